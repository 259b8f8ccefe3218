"""Structured output as OpenAI clients ask for it: Chat Completions'
``response_format`` and the Responses API's ``text.format``, turned into the
JSON Schema the turn's reply must follow (``schema``, as ``chat --schema``).

``json_schema`` gives the schema itself; ``json_object`` (JSON mode) asks for
any JSON object; ``text`` asks for nothing. The reply is checked against the
schema before the turn is saved, as on the command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from foliko_cli.errors import UsageError
from foliko_cli.serve.errors import ApiError

if TYPE_CHECKING:
    from foliko_cli.serve.chat_types import ResponseFormat
    from foliko_cli.serve.openai_types import TextFormat

ANY_OBJECT: dict[str, Any] = {"type": "object"}


def reply_schema(format_: TextFormat | ResponseFormat | None, param: str) -> dict[str, Any] | None:
    """The schema a format asks for (None: plain text). Chat Completions nests
    it under ``json_schema``, the Responses API has it beside ``type``."""
    if format_ is None or format_.type == "text":
        return None
    if format_.type == "json_object":
        return ANY_OBJECT
    holder = getattr(format_, "json_schema", format_)
    where = param if holder is format_ else f"{param}.json_schema"
    if getattr(holder, "schema", None) is None:
        raise ApiError(400, f"{where}.schema is required for json_schema", param=param)
    from foliko_cli.messages.schema import checked_schema

    try:
        return checked_schema(holder.schema, f"{where}.schema")  # type: ignore[union-attr]
    except UsageError as exc:
        raise ApiError(400, str(exc), param=param) from None
