"""Tools the model can call: a registry, argument validation, built-ins.

A tool's failure (bad arguments, an exception) becomes a tool result marked
as an error and goes back to the model; it never ends the turn.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from foliko_cli.common.loop import in_worker_thread
from foliko_cli.errors import MCPLoginError, ToolError

if TYPE_CHECKING:
    from foliko_cli.context import AgentContext, RequestContext, SessionContext


class ToolContext(NamedTuple):
    """What a running tool may see: the turn's three layers, and whether the
    user typed the call (``/tool``: no approval is asked for it)."""

    session: SessionContext | None = None
    request: RequestContext | None = None
    agent: AgentContext | None = None
    typed: bool = False


ToolFunction = Callable[[dict[str, Any], ToolContext], Any | Awaitable[Any]]

EMPTY_OBJECT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {},
    "additionalProperties": False,
}


class Tool(NamedTuple):
    """``blocking`` tools are plain functions that may take long (plugins): they
    run in a worker thread, so the turn's deadline still holds while they work."""

    name: str
    description: str
    execute: ToolFunction
    input_schema: dict[str, Any] = EMPTY_OBJECT_SCHEMA
    blocking: bool = False

    def spec(self) -> dict[str, Any]:
        """What a model provider is told about the tool."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }


class ToolOutput(NamedTuple):
    """What a tool may return besides a value: its text, and images for a model
    that takes them (attachment parts, see ``foliko_cli.messages.attachments``)."""

    text: str
    attachments: tuple[dict[str, Any], ...] = ()


class ToolResult(NamedTuple):
    """``attachments`` are image parts stored on the tool message; a provider that
    takes images in tool results sends them with ``content``."""

    content: str
    is_error: bool = False
    attachments: tuple[dict[str, Any], ...] = ()


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()):
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        self._tools[tool.name] = tool

    def unregister(self, name: str) -> bool:
        return self._tools.pop(name, None) is not None

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def all(self) -> list[Tool]:
        return list(self._tools.values())

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)


def argument_errors(schema: dict[str, Any], arguments: Any) -> list[str]:
    """Every way ``arguments`` breaks ``schema``, as short messages."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
    return [
        (f"{'/'.join(map(str, e.absolute_path))}: " if e.absolute_path else "") + e.message
        for e in errors
    ]


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


async def run_tool(
    tool: Tool | None, name: str, arguments: Any, context: ToolContext
) -> ToolResult:
    """Validate and run one tool call; every failure becomes an error result."""
    if tool is None:
        return ToolResult(f"error: unknown tool {name!r}", is_error=True)
    if not isinstance(arguments, dict):
        return ToolResult(
            f"error: arguments for {name!r} must be a JSON object, got {_render(arguments)}",
            is_error=True,
        )
    try:
        problems = argument_errors(tool.input_schema, arguments) if tool.input_schema else []
    except Exception as exc:
        return ToolResult(
            f"error: tool {name!r} has an invalid input schema ({type(exc).__name__}); "
            "it cannot be called",
            is_error=True,
        )
    if problems:
        return ToolResult(
            f"error: invalid arguments for {name!r}: " + "; ".join(problems), is_error=True
        )
    try:
        if tool.blocking:
            value = await in_worker_thread(tool.execute, arguments, context)
        else:
            value = tool.execute(arguments, context)
        if inspect.isawaitable(value):
            value = await value
        if isinstance(value, ToolOutput):
            return ToolResult(value.text, attachments=tuple(value.attachments))
        return ToolResult(_render(value))
    except ToolError as exc:
        return ToolResult(f"error: {exc}", is_error=True)
    except MCPLoginError:
        raise
    except Exception as exc:
        return ToolResult(f"error: {name} failed: {type(exc).__name__}: {exc}", is_error=True)


def _get_session_info(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    session, request = context.session, context.request
    return {
        "session_id": session.session_id if session else None,
        "message_count": session.metadata["message_count"] if session else 0,
        "request_id": request.request_id if request else None,
        "elapsed": round(request.elapsed(), 6) if request else None,
    }


def _require_session(context: ToolContext) -> SessionContext:
    session = context.session
    if session is None:
        raise ToolError("no session is active")
    return session


def _get_variable(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    session = _require_session(context)
    key = arguments["key"]
    return {"key": key, "value": session.get_variable(key), "exists": key in session.variables}


def _set_variable(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    session = _require_session(context)
    session.set_variable(arguments["key"], arguments["value"])
    return {"key": arguments["key"], "value": arguments["value"], "ok": True}


_KEY = {"type": "string", "minLength": 1, "maxLength": 256}

BUILTIN_TOOLS: tuple[Tool, ...] = (
    Tool(
        "get_session_info",
        "Get the current session id, its message count, the request id and elapsed seconds.",
        _get_session_info,
    ),
    Tool(
        "get_variable",
        "Read a session variable by key.",
        _get_variable,
        {
            "type": "object",
            "properties": {"key": _KEY},
            "required": ["key"],
            "additionalProperties": False,
        },
    ),
    Tool(
        "set_variable",
        "Set a session variable; it is saved with the session.",
        _set_variable,
        {
            "type": "object",
            "properties": {"key": _KEY, "value": {}},
            "required": ["key", "value"],
            "additionalProperties": False,
        },
    ),
)


_NO_CODE: contextvars.ContextVar[bool] = contextvars.ContextVar("foliko_no_code", default=False)


@contextlib.contextmanager
def no_code() -> Iterator[None]:
    """Within it, a tool that comes from Python code is never imported or run:
    ``load_tool`` and ``function_tools`` give stand-ins (a dry run runs no code)."""
    token = _NO_CODE.set(True)
    try:
        yield
    finally:
        _NO_CODE.reset(token)


def code_stood_in() -> bool:
    """Whether tools from code are stood in for here (inside ``no_code()``)."""
    return _NO_CODE.get()
