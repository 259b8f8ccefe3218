"""Structured output as OpenAI clients ask for it: Chat Completions'
``response_format`` and the Responses API's ``text.format``, turned into the
JSON Schema the turn's reply must follow (``schema``, as ``chat --schema``).

``json_schema`` gives the schema itself; ``json_object`` (JSON mode) asks for
any JSON object; ``text`` asks for nothing. The reply is checked against the
schema before the turn is saved, as on the command line.
"""

from __future__ import annotations

from typing import Any

from foliko_cli.errors import UsageError
from foliko_cli.serve.errors import ApiError

ANY_OBJECT: dict[str, Any] = {"type": "object"}


def reply_schema(format_: Any, param: str, *, nested: bool) -> dict[str, Any] | None:
    """The schema a format asks for (None: plain text). ``nested``: the schema is
    under ``json_schema`` (Chat Completions), not beside ``type`` (Responses)."""
    if format_ is None:
        return None
    if not isinstance(format_, dict):
        raise ApiError(400, f"{param} must be an object", param=param)
    kind = format_.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return ANY_OBJECT
    if kind != "json_schema":
        raise ApiError(
            400,
            f"{param}.type {kind!r} is not supported; use text, json_object or json_schema",
            param=param,
        )
    holder = format_.get("json_schema") if nested else format_
    where = f"{param}.json_schema" if nested else param
    if not isinstance(holder, dict) or "schema" not in holder:
        raise ApiError(400, f"{where}.schema is required for json_schema", param=param)
    from foliko_cli.models.schema import checked_schema

    try:
        return checked_schema(holder["schema"], f"{where}.schema")
    except UsageError as exc:
        raise ApiError(400, str(exc), param=param) from None
