"""The tools of a request (both APIs) as foliko tool specs, and ``tool_choice``.

Function tools are the client's to run. A ``namespace`` tool is a named
group of function tools: each is offered by its own name. Hosted tools
(web search, file search, code interpreter, ...) run on OpenAI's servers
and foliko hosts none: a request whose tools are all hosted is refused
(400, naming them), since nothing it asks for can run; hosted tools beside
the client's own are not offered to the model, and the answer says which
(``x-foliko-tools-not-hosted``). Codex, for one, offers ``web_search``
beside its function tools on every request.
"""

from __future__ import annotations

from typing import Any

from foliko_cli.serve.errors import ApiError
from foliko_cli.serve.openai_types import Tool, ToolChoice
from foliko_cli.service.values import TOOL_CHOICE_MODES

NOT_HOSTED_HEADER = "x-foliko-tools-not-hosted"


def _bad(message: str) -> ApiError:
    return ApiError(400, message, param="tools")


def _function_spec(tool: Tool, at: str) -> dict[str, Any]:
    function = tool.function or tool
    if not function.name:
        raise _bad(f"{at}: a function tool needs a name")
    spec: dict[str, Any] = {
        "name": function.name,
        "description": function.description or "",
        "input_schema": function.parameters or {"type": "object", "properties": {}},
    }
    if function.strict is not None:
        spec["strict"] = function.strict
    return spec


def function_tools(tools: list[Tool] | None) -> tuple[dict[str, Any], ...]:
    """Foliko tool specs for the request's tools (Responses or Chat shape)."""
    return offered_tools(tools)[0]


def offered_tools(
    tools: list[Tool] | None,
) -> tuple[tuple[dict[str, Any], ...], tuple[str, ...]]:
    """Foliko tool specs for the request's tools, and the hosted tool types left out."""
    specs: dict[str, dict[str, Any]] = {}
    hosted: list[str] = []

    def add(spec: dict[str, Any], at: str) -> None:
        if spec["name"] in specs:
            raise _bad(f"{at}: two tools are named {spec['name']!r}; give each its own name")
        specs[spec["name"]] = spec

    for index, tool in enumerate(tools or ()):
        at = f"tools[{index}]"
        if tool.type == "function":
            add(_function_spec(tool, at), at)
        elif tool.type == "namespace":
            if tool.tools is None:
                raise _bad(f"{at}: a namespace tool needs a list of tools")
            for number, member in enumerate(tool.tools):
                where = f"{at}.tools[{number}]"
                if member.type not in ("function", None):
                    raise _bad(f"{where}: a namespace holds function tools only")
                add(_function_spec(member, where), where)
        elif tool.type is None:
            raise _bad(f"{at}: a tool must be an object with a type")
        else:
            hosted.append(tool.type)
    if hosted and not specs:
        named = ", ".join(repr(kind) for kind in dict.fromkeys(hosted))
        raise _bad(f"foliko does not host {named} tools; send function tools and run them yourself")
    return tuple(specs.values()), tuple(dict.fromkeys(hosted))


def namespaces_of(tools: list[Tool] | None) -> dict[str, str]:
    """The namespace of each function offered inside a ``namespace`` tool, by name
    (a call of one comes back with its ``namespace``)."""
    return {
        member.name: tool.name or ""
        for tool in tools or ()
        if tool.type == "namespace"
        for member in tool.tools or ()
        if member.name
    }


def tool_choice(value: str | ToolChoice | None) -> str | None:
    """The ``tool_choice`` option a request asks for: a mode, or the name of the
    function it forces (``{"type": "function", "name": ...}`` as the Responses
    API writes it, ``{"type": "function", "function": {"name": ...}}`` as Chat
    Completions does)."""
    if value is None or (isinstance(value, str) and value in TOOL_CHOICE_MODES):
        return value
    if isinstance(value, ToolChoice):
        name = value.function.name if value.function is not None else value.name
        if value.type == "function" and name and name not in TOOL_CHOICE_MODES:
            return name
        if value.type == "allowed_tools" and value.mode in ("auto", "required"):
            return value.mode
    raise ApiError(
        400,
        "tool_choice must be auto, none, required or a function to call by name",
        param="tool_choice",
    )
