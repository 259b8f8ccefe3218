"""Structured output: the JSON Schema a reply must follow, read from text or a file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from foliko_cli.errors import UsageError


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
    if not isinstance(schema, dict):
        raise UsageError(f"{where} must be a JSON object (a JSON Schema); fix it")
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise UsageError(f"{where} is not a valid JSON Schema ({exc.message}); fix it") from None
    return schema
