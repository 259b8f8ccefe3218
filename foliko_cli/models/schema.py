"""Structured output: the JSON Schema a reply must follow, read from text or a file,
and the check of a reply against it (jsonschema is imported only then)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from foliko_cli.errors import InvalidReplyError, UsageError


def load_schema(source: str) -> dict[str, Any]:
    """``source`` is a JSON Schema itself (it starts with ``{``) or the path of a file with one."""
    text = source
    where = "the schema"
    if not source.lstrip().startswith("{"):
        where = f"schema file {source!r}"
        try:
            text = Path(source).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise UsageError(
                f"cannot read {where} ({reason}); pass a JSON Schema or the path of a file with one"
            ) from None
    try:
        schema = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{where} is not valid JSON ({exc}); fix it") from None
    return checked_schema(schema, where)


def checked_schema(schema: Any, where: str = "the schema") -> dict[str, Any]:
    """``schema`` itself when it is a JSON Schema (an object the metaschema accepts);
    a UsageError naming ``where`` otherwise."""
    if not isinstance(schema, dict):
        raise UsageError(f"{where} must be a JSON object (a JSON Schema); fix it")
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise UsageError(f"{where} is not a valid JSON Schema ({exc.message}); fix it") from None
    return schema


def check_reply(text: str, schema: Mapping[str, Any], model: str) -> None:
    """Raise InvalidReplyError unless ``text`` is JSON that follows ``schema``."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise InvalidReplyError(
            f"{model} replied with text that is not JSON ({text[:60]!r}), not what the "
            "schema asks for; nothing was saved: try again or simplify the schema"
        ) from None
    import jsonschema

    validator = jsonschema.validators.validator_for(schema)(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "the top level"
        raise InvalidReplyError(
            f"{model}'s reply does not follow the schema (at {where}: {error.message}); "
            "nothing was saved: try again or simplify the schema"
        )
