"""The OpenAPI 3.1 description of ``foliko serve`` (``GET /openapi.json``),
made from the routes themselves: each operation's body, query and answer
are the types schema.py reads and writes them with, so the description
cannot say other than what the server does. Every error is OpenAI's error
object.
"""

from __future__ import annotations

import functools
from typing import Any

import msgspec
from msgspec import UNSET

from foliko_cli import __version__
from foliko_cli.serve.errors import ErrorBody
from foliko_cli.serve.openai_types import Answer
from foliko_cli.serve.schema import REF, Operation

ERRORS = "An error (400, 401, 403, 404, 408, 409, 413, 415, 421, 429, 431, 502, 503, 504)"
MCP = {
    "summary": "The sessions as an MCP server (Streamable HTTP, stateless, JSON answers)",
    "description": "One JSON-RPC message of the Model Context Protocol: tools list_sessions, "
    "search_sessions, read_session and chat, the sessions as resources, the agents as "
    "prompts. Send Accept: application/json, text/event-stream.",
    "tags": ["MCP"],
    "requestBody": {"required": True, "content": {"application/json": {"schema": {}}}},
    "responses": {
        "200": {
            "description": "The JSON-RPC answer",
            "content": {"application/json": {"schema": {}}},
        },
        "202": {"description": "A notification or response, accepted"},
        "default": {
            "description": "A JSON-RPC error, or an HTTP error (401, 403, 406, 413, 415, 421, 501)",
            "content": {"application/json": {"schema": {}}},
        },
    },
}
SESSION_HEADER = {
    "name": "X-Session-Id",
    "in": "header",
    "required": False,
    "description": "Run the turn in this session (stored) instead of statelessly.",
    "schema": {"type": "string"},
}

IF_BUSY_HEADER = {
    "name": "Foliko-If-Busy",
    "in": "header",
    "required": False,
    "description": "When another turn holds the session: wait for it (the default), reject "
    "this one at once (409 session_busy), or interrupt it (it ends unsaved, with "
    "turn_interrupted).",
    "schema": {"type": "string", "enum": ["wait", "reject", "interrupt"]},
}
TURN_ROUTES = ("/v1/chat/completions", "/v1/responses", "/v1/sessions/{session_id}/turns")
"""The POST operations that run a turn in a named session (Foliko-If-Busy)."""


def document(routes: list[Any]) -> dict[str, Any]:
    declared = [(route, route.operation) for route in routes if hasattr(route, "operation")]
    types = list(
        dict.fromkeys(
            kind
            for _, op in declared
            for kind in (op.body, op.answer, op.events)
            if kind is not None and kind is not True
        )
    )
    schemas, components = _components((ErrorBody, *types))
    paths: dict[str, Any] = {"/mcp": {"post": MCP}}
    for route, op in declared:
        path = route.path.replace(":id}", "}").replace(":path}", "}")
        params = [_path_parameter(name) for name in route.param_convertors]
        for method in sorted(route.methods - {"HEAD"}):
            paths.setdefault(path, {})[method.lower()] = _operation(op, params, schemas)
    if "/v1/chat/completions" in paths:
        paths["/v1/chat/completions"]["post"].setdefault("parameters", []).append(SESSION_HEADER)
    for path in TURN_ROUTES:
        if "post" in paths.get(path, {}):
            paths[path]["post"].setdefault("parameters", []).append(IF_BUSY_HEADER)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "foliko serve",
            "version": __version__,
            "description": "Foliko sessions over HTTP: OpenAI Responses, Conversations and "
            "Chat Completions, and the native sessions API.",
        },
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": dict(sorted(paths.items())),
    }


def _components(types: tuple[Any, ...]) -> tuple[dict[Any, Any], dict[str, Any]]:
    """Each type's schema, and the components they name. An answer sends every
    field (null when it has no value) but those it leaves out when UNSET."""
    outs, components = msgspec.json.schema_components(types, ref_template=REF)
    answers = _answer_types()
    for schema in components.values():
        kind = answers.get(schema.get("title", "").split("[")[0])
        if kind is not None and "properties" in schema:
            fields = msgspec.structs.fields(kind)
            schema["required"] = [f.encode_name for f in fields if f.default is not UNSET]
    return dict(zip(types, outs, strict=True)), components


@functools.cache
def _answer_types() -> dict[str, type]:
    found: dict[str, type] = {}
    todo = [Answer]
    while todo:
        kind = todo.pop()
        found[kind.__name__] = kind
        todo += kind.__subclasses__()
    return found


def _path_parameter(name: str) -> dict[str, Any]:
    schema = {"type": "string", "minLength": 1}
    return {"name": name, "in": "path", "required": True, "schema": schema}


def _query_parameters(query: Any) -> list[dict[str, Any]]:
    (ref,), components = msgspec.json.schema_components([query], ref_template=REF)
    schema = components[ref["$ref"].rpartition("/")[2]]
    parameters = []
    for name, value in schema["properties"].items():
        parameter = {
            "name": name,
            "in": "query",
            "required": name in schema.get("required", ()),
            "schema": value,
        }
        if value.get("type") == "object":
            parameter.update(style="deepObject", explode=True)
        parameters.append(parameter)
    return parameters


def _operation(
    op: Operation, params: list[dict[str, Any]], schemas: dict[Any, Any]
) -> dict[str, Any]:
    content: dict[str, Any] = dict(op.content or {})
    if op.answer is not None:
        content["application/json"] = {"schema": schemas[op.answer]}
    if op.events is not None:
        data: dict[str, Any] = {"type": "string", "contentMediaType": "application/json"}
        if op.events is not True:
            data["contentSchema"] = schemas[op.events]
        event = {"type": "object", "required": ["data"], "properties": {"data": data}}
        content["text/event-stream"] = {"schema": event}
    operation: dict[str, Any] = {
        "summary": op.summary,
        "tags": [op.tag],
        "responses": {
            "200": {"description": "OK", "content": content},
            "default": {
                "description": ERRORS,
                "content": {"application/json": {"schema": schemas[ErrorBody]}},
            },
        },
    }
    if op.public:
        operation["security"] = []
    parameters = params + (_query_parameters(op.query) if op.query is not None else [])
    if parameters:
        operation["parameters"] = parameters
    if op.body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": schemas[op.body]}},
        }
    return operation
