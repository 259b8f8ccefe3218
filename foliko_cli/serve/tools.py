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

from foliko_cli.models.base import TOOL_CHOICE_MODES
from foliko_cli.serve.errors import ApiError

NOT_HOSTED_HEADER = "x-foliko-tools-not-hosted"


def _bad(message: str) -> ApiError:
    return ApiError(400, message, param="tools")


def _function_spec(tool: dict[str, Any], at: str) -> dict[str, Any]:
    function = given if isinstance(given := tool.get("function"), dict) else tool
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise _bad(f"{at}: a function tool needs a name")
    parameters = function.get("parameters") or {"type": "object", "properties": {}}
    if not isinstance(parameters, dict):
        raise _bad(f"{at}: parameters must be a JSON schema object")
    description = function.get("description")
    spec: dict[str, Any] = {
        "name": name,
        "description": description if isinstance(description, str) else "",
        "input_schema": parameters,
    }
    if isinstance(function.get("strict"), bool):
        spec["strict"] = function["strict"]
    return spec


def function_tools(tools: Any) -> tuple[dict[str, Any], ...]:
    """Foliko tool specs for the request's tools (Responses or Chat shape)."""
    return offered_tools(tools)[0]


def offered_tools(tools: Any) -> tuple[tuple[dict[str, Any], ...], tuple[str, ...]]:
    """Foliko tool specs for the request's tools, and the hosted tool types left out."""
    if tools is None:
        return (), ()
    if not isinstance(tools, list):
        raise _bad("tools must be a list")
    specs: dict[str, dict[str, Any]] = {}
    hosted: list[str] = []

    def add(spec: dict[str, Any], at: str) -> None:
        if spec["name"] in specs:
            raise _bad(f"{at}: two tools are named {spec['name']!r}; give each its own name")
        specs[spec["name"]] = spec

    for index, tool in enumerate(tools):
        at = f"tools[{index}]"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "function":
            add(_function_spec(tool, at), at)
        elif kind == "namespace":
            members = tool.get("tools")
            if not isinstance(members, list):
                raise _bad(f"{at}: a namespace tool needs a list of tools")
            for number, member in enumerate(members):
                where = f"{at}.tools[{number}]"
                if not isinstance(member, dict) or member.get("type", "function") != "function":
                    raise _bad(f"{where}: a namespace holds function tools only")
                add(_function_spec(member, where), where)
        elif isinstance(kind, str):
            hosted.append(kind)
        else:
            raise _bad(f"{at}: a tool must be an object with a type")
    if hosted and not specs:
        named = ", ".join(repr(kind) for kind in dict.fromkeys(hosted))
        raise _bad(f"foliko does not host {named} tools; send function tools and run them yourself")
    return tuple(specs.values()), tuple(dict.fromkeys(hosted))


def namespaces_of(tools: Any) -> dict[str, str]:
    """The namespace of each function offered inside a ``namespace`` tool, by name
    (a call of one comes back with its ``namespace``)."""
    found = {}
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, dict) and tool.get("type") == "namespace":
            for member in tool.get("tools") or ():
                if isinstance(member, dict) and isinstance(member.get("name"), str):
                    found[member["name"]] = str(tool.get("name") or "")
    return found


def tool_choice(value: Any) -> str | None:
    """The ``tool_choice`` option a request asks for: a mode, or the name of the
    function it forces (``{"type": "function", "name": ...}`` as the Responses
    API writes it, ``{"type": "function", "function": {"name": ...}}`` as Chat
    Completions does)."""
    if value is None or (isinstance(value, str) and value in TOOL_CHOICE_MODES):
        return value
    if isinstance(value, dict) and value.get("type") == "function":
        function = value.get("function")
        name = function.get("name") if isinstance(function, dict) else value.get("name")
        if isinstance(name, str) and name and name not in TOOL_CHOICE_MODES:
            return name
    if isinstance(value, dict) and value.get("type") == "allowed_tools":
        mode = value.get("mode")
        if mode in ("auto", "required"):
            return mode
    raise ApiError(
        400,
        "tool_choice must be auto, none, required or a function to call by name",
        param="tool_choice",
    )
