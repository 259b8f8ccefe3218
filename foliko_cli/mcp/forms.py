"""The forms of MCP elicitations (2025-11-25, client/elicitation, form mode).

A ``requestedSchema`` is a flat object schema of primitive fields: strings
(with ``format`` email, uri, date or date-time), numbers and integers,
booleans, single-select enums (``enum``, with the older ``enumNames``, or
``oneOf`` of ``{const, title}``) and multi-select enums (an array whose
``items`` hold ``enum`` or ``anyOf``). ``fields`` reads such a schema into
``Field`` values that an asker shows and parses typed answers with;
``check_content`` validates a whole answer; ``defaults_answer`` is the
answer of ``elicitation = "defaults"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from foliko_cli.mcp.asking import DECLINE, Answer


@dataclass(frozen=True)
class Choice:
    value: Any
    title: str


@dataclass(frozen=True)
class Field:
    name: str
    kind: str
    """``string``, ``number``, ``integer``, ``boolean``, ``enum`` or ``multi``."""
    schema: dict[str, Any]
    required: bool
    title: str = ""
    description: str = ""
    choices: tuple[Choice, ...] = ()

    @property
    def has_default(self) -> bool:
        return "default" in self.schema

    @property
    def default(self) -> Any:
        return self.schema.get("default")

    def describe(self) -> str:
        """The field's name, title, type (or choices) and whether it is required."""
        titled = self.title and self.title.lower() != self.name.lower()
        label = self.name + (f" ({self.title})" if titled else "")
        if self.kind in ("enum", "multi"):
            listed = ", ".join(f"{n}) {c.title}" for n, c in enumerate(self.choices, 1))
            kind = "one of" if self.kind == "enum" else "any of, separated by commas"
            what = f"{kind}: {listed}"
        else:
            what = self.kind + (f", {self.schema['format']}" if self.schema.get("format") else "")
        return f"{label}: {what}" + (", required" if self.required else "")

    def shown(self, value: Any) -> str:
        """A value as the user would type it back."""
        if self.kind == "boolean":
            return "yes" if value else "no"
        if self.kind == "enum":
            return self._title(value)
        if self.kind == "multi":
            return ", ".join(self._title(v) for v in value or ())
        return str(value)

    def _title(self, value: Any) -> str:
        return next((c.title for c in self.choices if c.value == value), str(value))

    def parse(self, text: str) -> Any:
        """The typed ``text`` as this field's value; ValueError says what is wrong."""
        text = text.strip()
        if self.kind == "boolean":
            if text.lower() in ("y", "yes", "true", "1"):
                return True
            if text.lower() in ("n", "no", "false", "0"):
                return False
            raise ValueError("answer yes or no")
        if self.kind == "integer":
            try:
                value: Any = int(text)
            except ValueError:
                raise ValueError("write a whole number") from None
        elif self.kind == "number":
            try:
                value = float(text)
            except ValueError:
                raise ValueError("write a number") from None
            value = int(value) if value.is_integer() and "." not in text else value
        elif self.kind == "enum":
            value = self._choice(text)
        elif self.kind == "multi":
            value = [self._choice(part) for part in text.split(",") if part.strip()]
        else:
            value = text
        problem = _first_problem(self.schema, value)
        if problem:
            raise ValueError(problem)
        return value

    def _choice(self, text: str) -> Any:
        text = text.strip()
        if text.isdigit() and 1 <= int(text) <= len(self.choices):
            return self.choices[int(text) - 1].value
        for choice in self.choices:
            if text in (str(choice.value), choice.title) or text.lower() == choice.title.lower():
                return choice.value
        raise ValueError(f"choose one of {', '.join(c.title for c in self.choices)}")


def _choices(schema: dict[str, Any]) -> tuple[Choice, ...]:
    if "enum" in schema:
        names = schema.get("enumNames") or []
        return tuple(
            Choice(v, str(names[i]) if i < len(names) else str(v))
            for i, v in enumerate(schema["enum"])
        )
    options = schema.get("oneOf") or schema.get("anyOf") or []
    return tuple(
        Choice(o["const"], str(o.get("title", o["const"])))
        for o in options
        if isinstance(o, dict) and "const" in o
    )


def fields(schema: dict[str, Any]) -> list[Field]:
    """The fields of a form-mode ``requestedSchema``; ValueError for one foliko cannot show."""
    required = set(schema.get("required") or ())
    found = []
    for name, spec in (schema.get("properties") or {}).items():
        if not isinstance(spec, dict):
            raise ValueError(f"field {name!r} has no schema")
        kind = spec.get("type")
        choices = _choices(spec)
        if kind == "array":
            choices = _choices(spec.get("items") or {})
            kind = "multi"
        elif choices:
            kind = "enum"
        if kind not in ("string", "number", "integer", "boolean", "enum", "multi") or (
            kind == "multi" and not choices
        ):
            raise ValueError(f"field {name!r} is of a type a form cannot hold ({kind})")
        found.append(
            Field(
                name,
                kind,
                spec,
                name in required,
                str(spec.get("title") or ""),
                str(spec.get("description") or ""),
                choices,
            )
        )
    return found


def _format_checker() -> Any:
    from urllib.parse import urlsplit

    from jsonschema import FormatChecker

    checker = FormatChecker()
    checker.checks("uri")(lambda value: not isinstance(value, str) or bool(urlsplit(value).scheme))
    return checker


def _first_problem(schema: dict[str, Any], value: Any) -> str | None:
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(schema, format_checker=_format_checker())
    error = next(iter(validator.iter_errors(value)), None)
    return None if error is None else error.message


def check_content(schema: dict[str, Any], content: dict[str, Any]) -> str | None:
    """What is wrong with ``content`` as an answer to ``schema``, or None."""
    return _first_problem(schema, content)


def defaults_answer(schema: dict[str, Any]) -> Answer:
    """Accept with the defaults (of every field that has one) when each required
    field has a default; otherwise decline."""
    try:
        form = fields(schema)
    except ValueError:
        return DECLINE
    if any(f.required and not f.has_default for f in form):
        return DECLINE
    content = {f.name: f.default for f in form if f.has_default}
    return DECLINE if check_content(schema, content) else Answer("accept", content)
