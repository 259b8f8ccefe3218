"""Templates (F18): saved prompts in llm's YAML template format, one ``NAME.yaml``
each in ``templates/`` of the user config directory.

A template holds a ``prompt`` (``$input`` stands for the message, ``$NAME`` for a
parameter; ``defaults`` gives parameters their values when none is passed), a
``system`` prompt, a ``model``, model ``options``, whether to print only the
first (``extract``) or last (``extract_last``) fenced code block of the reply, a
``schema_object`` the reply must follow, and the ``tools`` and ``functions`` a
turn with it offers. PyYAML is imported only when a template is read or written.
"""

from __future__ import annotations

import difflib
import os
import re
import string
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from foliko_cli.common.settings import config_dir
from foliko_cli.errors import Hint, StorageError, UsageError

KEYS = (
    "model",
    "prompt",
    "system",
    "defaults",
    "options",
    "extract",
    "extract_last",
    "schema_object",
    "tools",
    "functions",
)
"""The keys foliko reads, in the order ``save`` writes them (llm's order)."""
LLM_ONLY = ("attachments", "attachment_types", "fragments", "system_fragments")
"""llm's keys for what foliko's templates do not do: refused, not half honoured."""
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
SUFFIXES = (".yaml", ".yml")
EMPTY: Mapping[str, Any] = MappingProxyType({})


def templates_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where saved templates live: ``templates/`` beside the user config file."""
    return config_dir(env) / "templates"


def is_file_reference(reference: str) -> bool:
    """A template given as a file (``./review.yaml``) rather than by its saved name."""
    return "/" in reference or os.sep in reference or reference.endswith(SUFFIXES)


def check_name(name: str) -> str:
    if not NAME.fullmatch(name) or name.endswith(SUFFIXES):
        raise UsageError(
            f"{name!r} cannot name a template: use up to 100 letters, digits, '-', '_' "
            "or '.', starting with a letter or digit and without .yaml",
            fix="e.g. summarise",
        )
    return name


def template_path(name: str) -> Path:
    return templates_dir() / f"{check_name(name)}.yaml"


def saved_names() -> list[str]:
    directory = templates_dir()
    if not directory.is_dir():
        return []
    return sorted(p.stem for p in directory.glob("*.yaml") if NAME.fullmatch(p.stem))


def _variables(text: str | None) -> list[str]:
    """The ``$names`` in ``text``, in order; a ValueError for a ``$`` that starts none."""
    if not text:
        return []
    names = []
    for match in string.Template.pattern.finditer(text):
        if match.group("invalid") is not None:
            line = text.count("\n", 0, match.start()) + 1
            raise ValueError(
                f"has a '$' that starts no $name (line {line}: write $$ for a dollar sign, "
                "or ${name} before a letter or digit)"
            )
        name = match.group("named") or match.group("braced")
        if name and name not in names:
            names.append(name)
    return names


class Template(NamedTuple):
    name: str
    path: Path | None = None
    prompt: str | None = None
    system: str | None = None
    model: str | None = None
    options: Mapping[str, Any] = EMPTY
    defaults: Mapping[str, Any] = EMPTY
    schema: Mapping[str, Any] | None = None
    tools: tuple[str, ...] = ()
    functions: tuple[str, ...] = ()
    """Paths of Python files (relative ones from the template's directory) or Python code."""
    trusted: bool = True
    """False for a template file outside the user's templates directory that runs
    code (``runs_code``) and that the user has not trusted as it is."""

    def runs_code(self) -> bool:
        """Whether a turn with it runs Python: its functions, or a tool it names
        as ``module:function``."""
        return bool(self.functions) or any(":" in tool for tool in self.tools)

    def check_trusted(self) -> None:
        """Refuse a template whose code the user has not trusted."""
        if not self.trusted:
            raise UsageError(
                f"{self.where} runs Python code (its functions or module tools) and is "
                "neither in your templates directory nor trusted",
                fix=f"review it, then trust it: foliko config trust {self.path}",
            )

    extract: bool = False
    extract_last: bool = False

    @property
    def extract_mode(self) -> str | None:
        """``"first"`` or ``"last"``: the code block of the reply a turn prints (as
        ``-x``/``--xl``; the last wins when both are set, as in llm)."""
        return "last" if self.extract_last else "first" if self.extract else None

    @property
    def where(self) -> str:
        return f"template {self.name!r}" + (f" ({self.path})" if self.path else "")

    def variables(self) -> list[str]:
        """The ``$names`` of the prompt and the system prompt, ``input`` included."""
        found: list[str] = []
        for key in ("prompt", "system"):
            try:
                found += [v for v in _variables(getattr(self, key)) if v not in found]
            except ValueError as exc:
                raise UsageError(f"{self.where}: {key} {exc}") from None
        return found

    @property
    def uses_input(self) -> bool:
        return "input" in self.variables()

    def parameters(self) -> list[str]:
        """What ``-p`` may set: the ``$names`` other than ``$input``, and the defaults."""
        names = [v for v in self.variables() if v != "input"]
        return names + [k for k in self.defaults if k not in names]

    def apply(
        self, message: str | None, params: Mapping[str, str], system: str | None = None
    ) -> tuple[str | None, str | None]:
        """The turn's message and system prompt, as llm builds them: the prompt with
        ``$input`` as the message, or (without ``$input``) the prompt then the message
        on the next line; no prompt leaves the message as it is. A ``system`` given
        for the turn wins over the template's."""
        known = self.parameters()
        if "input" in params:
            raise UsageError(
                f"{self.where}: $input is the message, not a parameter",
                fix="give it as the message (or on stdin)",
            )
        unknown = [key for key in params if key not in known]
        if unknown:
            raise UsageError(
                f"{self.where} has no parameter {unknown[0]!r}",
                fix=f"pass only its parameters: {', '.join(known)}"
                if known
                else "it takes none: pass none",
            )
        if self.uses_input and message is None:
            raise UsageError(
                f"{self.where} puts the message in $input, and there is none",
                fix="give a message (or pipe it in)",
            )
        values = {**self.defaults, **params, "input": message or ""}
        missing = [v for v in self.variables() if v not in values]
        if missing:
            raise UsageError(
                f"{self.where} needs a value for {', '.join('$' + m for m in missing)}",
                fix="pass each one",
                hint=Hint.PARAMETER,
            )
        prompt = string.Template(self.prompt).substitute(values) if self.prompt else None
        if prompt is None:
            prompt = message
        elif message and not self.uses_input:
            prompt = f"{prompt}\n{message}"
        if system is None and self.system:
            system = string.Template(self.system).substitute(values)
        return prompt, system

    def to_dict(self) -> dict[str, Any]:
        """The template's keys in llm's form (the ones set)."""
        values = {
            "model": self.model,
            "prompt": self.prompt,
            "system": self.system,
            "defaults": dict(self.defaults) or None,
            "options": dict(self.options) or None,
            "extract": self.extract or None,
            "extract_last": self.extract_last or None,
            "schema_object": self.schema,
            "tools": list(self.tools) or None,
            "functions": None,
        }
        if self.functions:
            values["functions"] = (
                self.functions[0] if len(self.functions) == 1 else list(self.functions)
            )
        return {key: values[key] for key in KEYS if values[key] is not None}

    def to_yaml(self) -> str:
        import yaml

        class Dumper(yaml.SafeDumper):
            pass

        def text(dumper: yaml.SafeDumper, value: str) -> Any:
            style = "|" if "\n" in value else None
            return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

        Dumper.add_representer(str, text)
        return yaml.dump(
            self.to_dict(), Dumper=Dumper, sort_keys=False, allow_unicode=True, indent=4
        )


def _problem(where: str, problem: str, saved: bool) -> UsageError:
    if saved:
        return UsageError(f"{where}: {problem}", fix="fix the file", hint=Hint.EDIT_TEMPLATE)
    return UsageError(f"{where}: {problem}", fix="fix the file")


def _text(data: Mapping[str, Any], key: str, fail: Callable[[str], Exception]) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise fail(f"{key} must be text, not {type(value).__name__}")
    return value


def _mapping(
    data: Mapping[str, Any], key: str, fail: Callable[[str], Exception], scalars: bool = False
) -> dict[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise fail(f"{key} must be a mapping of names to values")
    if scalars:
        for k, v in value.items():
            if not isinstance(v, str | int | float | bool):
                raise fail(f"{key}: {k} must be text or a number, not {type(v).__name__}")
    return dict(value)


def _flag(data: Mapping[str, Any], key: str, fail: Callable[[str], Exception]) -> bool:
    value = data.get(key)
    if value is not None and not isinstance(value, bool):
        raise fail(f"{key} must be true or false, not {type(value).__name__}")
    return bool(value)


def _texts(data: Mapping[str, Any], key: str, fail: Callable[[str], Exception]) -> tuple[str, ...]:
    value = data.get(key) or ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise fail(f"{key} must be a list of text")
    return tuple(value)


def parse_template(text: str, name: str, path: Path | None = None, saved: bool = True) -> Template:
    """A template from its YAML text (a plain string is its prompt, as in llm)."""
    import yaml

    where = f"template {name!r}" + (f" ({path})" if path else "")

    def fail(problem: str) -> UsageError:
        return _problem(where, problem, saved)

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"line {mark.line + 1}: " if mark is not None else ""
        raise fail(f"not valid YAML ({at}{getattr(exc, 'problem', None) or exc})") from None
    if data is None:
        data = {}
    if isinstance(data, str):
        data = {"prompt": data}
    if not isinstance(data, dict):
        raise fail(f"must be a mapping of {', '.join(KEYS)}")
    for key in data:
        if key in LLM_ONLY:
            raise fail(f"{key!r} is an llm template key foliko does not read; remove it")
        if key not in KEYS and key != "name":
            close = difflib.get_close_matches(str(key), KEYS, n=1)
            suggestion = f" (did you mean {close[0]!r}?)" if close else ""
            raise fail(f"unknown key {key!r}{suggestion}; known keys: {', '.join(KEYS)}")
    model = _text(data, "model", fail)
    if model is not None and not model.strip():
        raise fail("model is blank")
    schema = data.get("schema_object")
    if schema is not None:
        from foliko_cli.messages.schema import checked_schema

        try:
            schema = checked_schema(schema, "schema_object")
        except UsageError as exc:
            raise fail(exc.problem) from None
    template = Template(
        name=name,
        path=path,
        prompt=_text(data, "prompt", fail),
        system=_text(data, "system", fail),
        model=model,
        options=MappingProxyType(_mapping(data, "options", fail)),
        defaults=MappingProxyType(_mapping(data, "defaults", fail, scalars=True)),
        schema=schema,
        tools=_texts(data, "tools", fail),
        functions=_texts(data, "functions", fail),
        extract=_flag(data, "extract", fail),
        extract_last=_flag(data, "extract_last", fail),
    )
    for key in ("prompt", "system"):
        try:
            _variables(getattr(template, key))
        except ValueError as exc:
            raise fail(f"{key} {exc}") from None
    return template


def load_template(reference: str) -> Template:
    """A saved template by name, or a template file by path (``./t.yaml``)."""
    if is_file_reference(reference):
        path, saved = Path(reference).expanduser(), False
        name = path.stem
    else:
        path, saved, name = template_path(reference), True, reference
        if not path.is_file():
            names = saved_names()
            close = difflib.get_close_matches(reference, names, n=1)
            raise UsageError(
                f"no template named {reference!r}"
                + (f" (did you mean {close[0]!r}?)" if close else ""),
                fix="save one first, or list those there are",
                hint=Hint.TEMPLATES,
            )
    try:
        data = path.read_bytes()
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(
            f"cannot read template file {str(path)!r} ({reason})",
            fix="give the path of a YAML template file, or a saved template's name",
        ) from None
    template = parse_template(text, name, path, saved=saved)
    if template.runs_code() and not saved and path.resolve().parent != templates_dir().resolve():
        from foliko_cli.common.settings import trust_store

        template = template._replace(trusted=trust_store().state(path, data) == "trusted")
    return template


def save_template(template: Template) -> tuple[Path, bool]:
    """Write ``template`` as ``NAME.yaml``, owner-only (over one of that name: True);
    the file is replaced whole, never left half written."""
    from foliko_cli.common.files import replaced

    path = template_path(template.name)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        existed = path.exists()
        with replaced(path) as file:
            file.write(template.to_yaml())
    except OSError as exc:
        raise StorageError(
            f"cannot save template {template.name!r} to {path} ({exc.strerror or exc})",
            fix="make the directory writable (or free some space), or point FOLIKO_CONFIG "
            "elsewhere",
        ) from None
    return path, existed
