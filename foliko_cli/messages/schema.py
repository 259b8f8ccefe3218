"""Structured output: the JSON Schema a reply must follow, read from text or a file,
and the check of a reply against it (jsonschema is imported only then)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from foliko_cli.errors import InvalidReplyError, UsageError

DSL_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}


def load_schema(source: str) -> dict[str, Any]:
    """``source`` is a JSON Schema itself (it starts with ``{``), the path of a file
    with one, or fields in llm's compact syntax (``'name, age int, bio: short bio'``:
    text that holds a comma or a space and names no file)."""
    text = source
    where = "the schema"
    if not source.lstrip().startswith("{"):
        if not Path(source).is_file() and ("," in source or len(source.split()) > 1):
            return schema_dsl(source)
        where = f"schema file {source!r}"
        try:
            text = Path(source).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise UsageError(
                f"cannot read {where} ({reason}); pass a JSON Schema, the path of a file "
                "with one, or fields such as 'name, age int'"
            ) from None
    try:
        schema = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{where} is not valid JSON ({exc}); fix it") from None
    return checked_schema(schema, where)


def schema_dsl(source: str) -> dict[str, Any]:
    """A JSON Schema object from llm's compact syntax: fields split by commas (or by
    lines, when there are several), each ``NAME [TYPE][: description]``, TYPE one of
    str (the default), int, float, bool; every field is required."""
    properties: dict[str, Any] = {}
    separator = "\n" if "\n" in source else ","
    for field in filter(None, (part.strip() for part in source.split(separator))):
        head, colon, description = field.partition(":")
        words = head.split()
        if not words:
            raise UsageError(
                f"the schema field {field!r} has no name before ':'; write e.g. 'bio: a short bio'"
            )
        if len(words) > 2 or (len(words) == 2 and words[1] not in DSL_TYPES):
            kind = " ".join(words[1:])
            raise UsageError(
                f"the schema field {words[0]!r} has the unknown type {kind!r}; write one of "
                f"{', '.join(DSL_TYPES)} after the name (or ':' before a description)"
            )
        if words[0] in properties:
            raise UsageError(f"the schema names the field {words[0]!r} twice; keep one")
        prop: dict[str, Any] = {"type": DSL_TYPES[words[1] if len(words) == 2 else "str"]}
        if colon and description.strip():
            prop["description"] = description.strip()
        properties[words[0]] = prop
    if not properties:
        raise UsageError("the schema names no field; write e.g. 'name, age int'")
    return {"type": "object", "properties": properties, "required": list(properties)}


def checked_schema(schema: Any, where: str = "the schema") -> dict[str, Any]:
    """``schema`` itself when it is a JSON Schema (an object the metaschema accepts);
    a UsageError naming ``where`` otherwise."""
    if not isinstance(schema, dict):
        raise UsageError(f"{where} must be a JSON object (a JSON Schema)", fix="fix it")
    import jsonschema

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise UsageError(
            f"{where} is not a valid JSON Schema ({exc.message})", fix="fix it"
        ) from None
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
