"""Tools from plain Python functions: entry points and ``module:function`` refs (F5).

A function's signature, type hints and docstring become the tool's JSON
schema and description. Nothing is loaded unless the user names it in the
config (``tools = [...]`` or an agent's ``tools``): plugins are opt-in.
Within ``no_code()`` (a dry run) nothing is imported or run at all: each tool
that would come from Python code is stood in for by ``unloaded_tool``.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
import types
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from foliko_cli.engine.tools import BUILTIN_TOOLS, Tool, code_stood_in
from foliko_cli.errors import Hint, UsageError

ENTRY_POINT_GROUP = "foliko.tools"
_PRIMITIVES = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def type_schema(annotation: Any) -> dict[str, Any]:
    """JSON Schema for a type hint; an unknown or missing hint accepts anything."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    if annotation in _PRIMITIVES:
        return {"type": _PRIMITIVES[annotation]}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [type_schema(a) for a in args]}
    if annotation in (list, tuple, set) or origin in (list, tuple, set):
        return {"type": "array", **({"items": type_schema(args[0])} if args else {})}
    if annotation is dict or origin is dict:
        schema: dict[str, Any] = {"type": "object"}
        if len(args) == 2:
            schema["additionalProperties"] = type_schema(args[1])
        return schema
    return {}


def _param_docs(doc: str) -> dict[str, str]:
    """Parameter descriptions from ``Args:`` sections or ``:param x:`` lines."""
    found = dict(re.findall(r":param\s+(\w+):\s*(.+)", doc))
    section = re.search(r"(?:Args|Arguments|Parameters):\s*\n((?:[ \t]+.+\n?)+)", doc)
    if section:
        for name, text in re.findall(
            r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.+)$", section.group(1), re.MULTILINE
        ):
            found.setdefault(name, text.strip())
    return found


def tool_from_function(function: Callable[..., Any], name: str | None = None) -> Tool:
    """Wrap ``function``: its keyword arguments are the tool's arguments.

    A parameter named ``context`` receives the ToolContext instead (for tools
    that read the current session, request or agent). A plain function runs
    in a worker thread, so a slow one cannot hold a turn past its deadline.
    """
    signature = inspect.signature(function)
    hints = typing.get_type_hints(function)
    doc = inspect.getdoc(function) or ""
    descriptions = _param_docs(doc)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in signature.parameters.values():
        if param.name == "context" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        schema = type_schema(hints.get(param.name, param.annotation))
        if param.name in descriptions:
            schema["description"] = descriptions[param.name]
        if param.default is param.empty:
            required.append(param.name)
        else:
            schema.setdefault("default", param.default)
        properties[param.name] = schema
    wants_context = "context" in signature.parameters

    def execute(arguments: dict[str, Any], context: Any) -> Any:
        extra = {"context": context} if wants_context else {}
        return function(**arguments, **extra)

    summary = doc.split("\n\n", 1)[0].strip() or f"Call {function.__name__}."
    return Tool(
        name=name or function.__name__,
        description=summary,
        execute=execute,
        blocking=not inspect.iscoroutinefunction(function),
        input_schema={
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
    )


def _as_tool(value: Any, name: str, where: str) -> Tool:
    """``value`` as a Tool: a Tool as it is, or a plain function with named parameters.

    A class is refused (calling it would build an object, not run a tool),
    and so is a ``*args`` parameter: the model passes arguments by name.
    """
    if isinstance(value, Tool):
        return value
    if inspect.isclass(value):
        raise UsageError(f"{where} is a class, not a function; point it at a function (or a Tool)")
    if not callable(value):
        raise UsageError(f"{where} is neither a function nor a Tool; point it at a function")
    try:
        parameters: Iterable[inspect.Parameter] = inspect.signature(value).parameters.values()
    except (TypeError, ValueError):
        parameters = []
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
        raise UsageError(
            f"{where} takes *args, which a model cannot pass; give it named parameters"
        )
    try:
        return tool_from_function(value, name)
    except Exception as exc:
        raise UsageError(
            f"{where}: cannot build its schema from the signature "
            f"({type(exc).__name__}: {exc}); fix the type hints"
        ) from None


def unloaded_tool(name: str, source: str) -> Tool:
    """What a dry run shows for a tool from Python code it did not load: its
    name, where it comes from, and no schema."""

    def refuse(arguments: dict[str, Any], context: Any) -> Any:
        raise RuntimeError(f"tool {name!r} was not loaded (a dry run runs no code)")

    return Tool(
        name=name,
        description=f"[{source}: not loaded in a dry run]",
        execute=refuse,
        input_schema={"type": "object"},
    )


def entry_point_tools() -> dict[str, Any]:
    """Installed plugins (group ``foliko.tools``), by name, not loaded yet."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def load_tool(reference: str) -> Tool:
    """A built-in name, an entry-point name, or ``package.module:function``."""
    builtins = {tool.name: tool for tool in BUILTIN_TOOLS}
    if reference in builtins:
        return builtins[reference]
    if ":" in reference:
        module_name, _, attribute = reference.partition(":")
        if code_stood_in():
            return unloaded_tool(attribute, reference)
        project = str(Path.cwd())
        if project not in sys.path:
            sys.path.append(project)
        try:
            module = importlib.import_module(module_name)
            value = getattr(module, attribute)
        except (ImportError, AttributeError) as exc:
            raise UsageError(
                f"cannot load tool {reference!r} ({type(exc).__name__}: {exc}); "
                "check the module path and that the package is installed"
            ) from None
        except Exception as exc:
            raise UsageError(
                f"cannot load tool {reference!r}: importing {module_name} failed "
                f"({type(exc).__name__}: {exc}); fix the module"
            ) from None
        return _as_tool(value, attribute, f"tool {reference!r}")
    entry = entry_point_tools().get(reference)
    if entry is None:
        raise UsageError(
            f"unknown tool {reference!r}: use a built-in ({', '.join(builtins)}), an installed "
            "plugin name, or package.module:function",
            fix="list the tools there are",
            hint=Hint.TOOLS,
        )
    if code_stood_in():
        return unloaded_tool(reference, f"plugin {entry.value}")
    try:
        value = entry.load()
    except Exception as exc:
        raise UsageError(
            f"plugin tool {reference!r} failed to load ({exc}); reinstall or remove the plugin"
        ) from None
    return _as_tool(value, reference, f"plugin {reference!r}")


def is_code(source: str) -> bool:
    """Functions come from a file's path (one line ending in .py) or from Python code,
    as llm's ``--functions`` tells them apart."""
    return "\n" in source or not source.strip().endswith(".py")


def function_tools(source: str, base: Path | None = None) -> list[Tool]:
    """Every public function a Python file (a relative path is taken from ``base``, else
    the working directory) or a piece of Python code defines, as a tool.

    The code runs here, in this process, as a module of its own; a file's
    directory goes on ``sys.path`` for what it imports. Functions it imports,
    classes and names starting with ``_`` are left out.
    """
    import hashlib

    if is_code(source):
        code, filename, where = source, "<functions>", "the functions code"
    else:
        path = (base or Path.cwd()) / Path(source.strip()).expanduser()
        where = f"functions file {source.strip()!r}"
        try:
            code = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise UsageError(
                f"cannot read {where} ({reason})",
                fix="give the path of a Python file, or Python code that defines functions",
            ) from None
        filename = str(path)
    if code_stood_in():
        names = _function_names(code, filename, where)
        if not names:
            raise _no_function(where)
        return [unloaded_tool(name, where) for name in names]
    if filename != "<functions>":
        folder = str(Path(filename).resolve().parent)
        if folder not in sys.path:
            sys.path.append(folder)
    name = "foliko_functions_" + hashlib.sha256(f"{filename}\0{code}".encode()).hexdigest()[:12]
    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module
    try:
        exec(compile(code, filename, "exec"), module.__dict__)  # the user's own code, asked for
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        raise UsageError(
            f"{where} does not compile (line {exc.lineno}: {exc.msg})", fix="fix the code"
        ) from None
    except (Exception, SystemExit) as exc:
        sys.modules.pop(name, None)
        raise UsageError(
            f"{where} failed to import ({type(exc).__name__}: {exc})", fix="fix the code"
        ) from None
    functions = [
        (attribute, value)
        for attribute, value in vars(module).items()
        if inspect.isfunction(value) and value.__module__ == name and not attribute.startswith("_")
    ]
    if not functions:
        raise _no_function(where)
    return [_as_tool(value, attribute, f"{where}: {attribute}") for attribute, value in functions]


def _function_names(code: str, filename: str, where: str) -> list[str]:
    """The public functions ``code`` defines at its top level, read from its
    syntax tree (nothing runs)."""
    import ast

    try:
        tree = ast.parse(code, filename)
    except SyntaxError as exc:
        raise UsageError(
            f"{where} does not compile (line {exc.lineno}: {exc.msg})", fix="fix the code"
        ) from None
    return [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and not node.name.startswith("_")
    ]


def _no_function(where: str) -> UsageError:
    return UsageError(
        f"{where} defines no function to offer (names starting with _ are left out)",
        fix="define one with def",
    )
