"""The OpenAPI 3.1 description of ``foliko serve`` (``GET /openapi.json``).

Written by hand from the routes: every operation, its parameters, its
request body and its 200 answer; every error is OpenAI's error object.
"""

from __future__ import annotations

from typing import Any

from foliko_cli import __version__

OBJECT: dict[str, Any] = {"type": "object"}
ERROR = {"$ref": "#/components/schemas/Error"}
NULLABLE_TEXT: dict[str, Any] = {"type": ["string", "null"]}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


TURN_RANGE = {
    "type": ["array", "null"],
    "items": {"type": "integer"},
    "minItems": 2,
    "maxItems": 2,
}


def _list_of(item: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["object", "data", "has_more"],
        "properties": {
            "object": {"const": "list"},
            "data": {"type": "array", "items": item},
            "first_id": {"type": ["string", "null"]},
            "last_id": {"type": ["string", "null"]},
            "has_more": {"type": "boolean"},
        },
    }


def _plain_list(item: dict[str, Any]) -> dict[str, Any]:
    """A whole list (no pages)."""
    return {
        "type": "object",
        "required": ["object", "data"],
        "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": item}},
    }


def _op(
    summary: str,
    answer: dict[str, Any],
    *,
    body: dict[str, Any] | None = None,
    params: list[dict[str, Any]] | None = None,
    stream: bool = False,
    events: dict[str, Any] | None = None,
    tag: str,
) -> dict[str, Any]:
    """One operation; ``stream``: it may answer with server-sent events, each
    an ``events`` object when that is given."""
    content: dict[str, Any] = {"application/json": {"schema": answer}}
    if stream or events is not None:
        content["text/event-stream"] = {"schema": events or {"type": "string"}}
    operation: dict[str, Any] = {
        "summary": summary,
        "tags": [tag],
        "responses": {
            "200": {"description": "OK", "content": content},
            "default": {
                "description": "An error (400, 401, 403, 404, 408, 409, 413, 415, 421, 429, "
                "431, 502, 503, 504)",
                "content": {"application/json": {"schema": ERROR}},
            },
        },
    }
    if params:
        operation["parameters"] = params
    if body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": body}},
        }
    return operation


def _path(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string", "minLength": 1},
    }


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


LIMIT = _query("limit", {"type": "integer", "minimum": 1, "maximum": 100}, "Page size.")
AFTER = _query("after", {"type": "string"}, "The last id of the previous page.")
ORDER = _query("order", {"enum": ["asc", "desc"]}, "Oldest (asc) or newest (desc) first.")
CONVERSATION = _path("conversation_id", "The conversation (session) id.")
SESSION = _path("session_id", "The session id.")
RESPONSE = _path("response_id", "A response id.")
STREAM = _query(
    "stream",
    {"type": "boolean"},
    "true: the events of a background response created with stream: true, "
    "replayed and then live until its end (text/event-stream).",
)
STARTING_AFTER = _query(
    "starting_after",
    {"type": "integer", "minimum": -1},
    "With stream: only the events whose sequence_number is greater (default -1: all).",
)
KEY = _path("key", "A variable name.")
MODEL = _path("model", "A model: echo, an alias or PROVIDER:MODEL.")
COMPLETION = _path("completion_id", "A stored chat completion id (chatcmpl-...).")

INPUT_ITEM = {
    "type": "object",
    "properties": {
        "type": {"enum": ["message", "function_call", "function_call_output"]},
        "role": {"enum": ["user", "assistant", "system", "developer"]},
        "content": {"type": ["string", "array"]},
        "call_id": {"type": "string"},
        "name": {"type": "string"},
        "arguments": {"type": "string"},
        "output": {"type": ["string", "array"]},
    },
}
METADATA = {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 16}

SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["message", "type"],
                "properties": {
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                    "param": {"type": ["string", "null"]},
                    "code": {"type": ["string", "null"]},
                },
            }
        },
    },
    "Item": {
        "type": "object",
        "required": ["type", "id"],
        "properties": {
            "type": {"enum": ["message", "function_call", "function_call_output"]},
            "id": {"type": "string"},
            "role": {"type": "string"},
            "content": {"type": "array"},
            "status": {"type": "string"},
        },
    },
    "Conversation": {
        "type": "object",
        "required": ["id", "object", "created_at", "metadata"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "conversation"},
            "created_at": {"type": "integer"},
            "metadata": {"type": "object"},
        },
    },
    "Response": {
        "type": "object",
        "required": ["id", "object", "created_at", "status", "model", "output"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "response"},
            "created_at": {"type": "integer"},
            "status": {"type": "string"},
            "model": {"type": "string"},
            "output": {"type": "array", "items": _ref("Item")},
            "conversation": {"type": ["object", "null"]},
            "usage": {"type": ["object", "null"]},
        },
    },
    "ChatCompletion": {
        "type": "object",
        "required": ["id", "object", "created", "model", "choices"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "chat.completion"},
            "created": {"type": "integer"},
            "model": {"type": "string"},
            "choices": {"type": "array"},
            "usage": {"type": "object"},
            "metadata": {"type": "object"},
        },
    },
    "ChatCompletionStoreMessage": {
        "type": "object",
        "required": ["id", "role", "content"],
        "properties": {
            "id": {"type": "string"},
            "role": {"enum": ["system", "developer", "user", "assistant", "tool"]},
            "content": {"type": ["string", "null"]},
            "name": {"type": ["string", "null"]},
            "content_parts": {"type": ["array", "null"]},
            "tool_calls": {"type": "array"},
            "tool_call_id": {"type": "string"},
        },
    },
    "ChatCompletionDeleted": {
        "type": "object",
        "required": ["id", "object", "deleted"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "chat.completion.deleted"},
            "deleted": {"const": True},
        },
    },
    "SessionRow": {
        "type": "object",
        "required": ["session_id", "message_count", "created_at", "updated_at", "preview"],
        "properties": {
            "session_id": {"type": "string"},
            "message_count": {"type": "integer"},
            "created_at": {"type": "integer"},
            "updated_at": {"type": "integer"},
            "preview": {"type": "string"},
            "title": NULLABLE_TEXT,
            "forked_from": NULLABLE_TEXT,
            "error": {"type": "string"},
        },
    },
    "Compaction": {
        "type": "object",
        "required": ["number", "covered", "summary", "turns", "new_turns", "status"],
        "properties": {
            "number": {"type": ["integer", "null"]},
            "at": {"type": ["integer", "null"]},
            "trigger": {"enum": ["auto", "manual", None]},
            "method": {"enum": ["summary", "truncation", None]},
            "model": {"type": ["string", "null"]},
            "from": {"type": "integer"},
            "covered": {"type": "integer"},
            "summary": {"type": ["string", "null"]},
            "usage": {"type": ["object", "null"]},
            "cost": {"type": "number"},
            "turns": TURN_RANGE,
            "new_turns": TURN_RANGE,
            "status": {"enum": ["active", "folded", "undone"]},
        },
    },
    "ForkRow": {
        "type": "object",
        "required": ["session_id", "parent", "turn", "message", "depth", "parent_missing"],
        "properties": {
            "session_id": {"type": "string"},
            "parent": {"type": ["string", "null"]},
            "turn": {"type": ["integer", "null"]},
            "message": {"type": ["integer", "null"]},
            "depth": {"type": "integer"},
            "parent_missing": {"type": "boolean"},
            "message_count": {"type": "integer"},
            "created_at": {"type": "integer"},
            "error": {"type": "string"},
        },
    },
    "Session": {
        "type": "object",
        "required": ["session_id", "messages", "variables", "metadata"],
        "properties": {
            "session_id": {"type": "string"},
            "messages": {"type": "array", "items": OBJECT},
            "variables": OBJECT,
            "metadata": OBJECT,
            "compression_state": OBJECT,
            "saved_at": {"type": "integer"},
        },
    },
}

REPLY_FORMAT = {
    "type": "object",
    "required": ["type"],
    "properties": {"type": {"enum": ["text", "json_object", "json_schema"]}},
    "description": "json_schema: the reply follows the schema, checked before the turn is saved",
}
RESPONSE_REQUEST = {
    "type": "object",
    "required": ["input"],
    "properties": {
        "model": {"type": "string"},
        "input": {"oneOf": [{"type": "string"}, {"type": "array", "items": INPUT_ITEM}]},
        "instructions": {"type": "string"},
        "conversation": {"type": ["string", "object"]},
        "previous_response_id": {"type": "string"},
        "stream": {"type": "boolean"},
        "store": {"type": "boolean"},
        "background": {
            "type": "boolean",
            "description": "Answer at once (status queued) and run the turn in the background; "
            "needs store: true",
        },
        "temperature": {"type": "number"},
        "max_output_tokens": {"type": "integer"},
        "tools": {"type": "array", "items": OBJECT},
        "metadata": METADATA,
        "text": {"type": "object", "properties": {"format": REPLY_FORMAT}},
    },
}
CHAT_REQUEST = {
    "type": "object",
    "required": ["messages"],
    "properties": {
        "model": {"type": "string"},
        "messages": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["role"],
                "properties": {
                    "role": {"enum": ["system", "developer", "user", "assistant", "tool"]},
                    "content": {"type": ["string", "array", "null"]},
                    "tool_calls": {"type": "array"},
                    "tool_call_id": {"type": "string"},
                },
            },
        },
        "stream": {"type": "boolean"},
        "tools": {"type": "array", "items": OBJECT},
        "response_format": REPLY_FORMAT,
        "n": {"const": 1},
        "store": {"type": "boolean"},
        "metadata": METADATA,
    },
}
MODELS = {
    "type": "object",
    "required": ["object", "data"],
    "properties": {
        "object": {"const": "list"},
        "data": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "object"],
                "properties": {"id": {"type": "string"}, "object": {"const": "model"}},
            },
        },
    },
}
NAME_BODY = {"type": "object", "required": ["to"], "properties": {"to": {"type": "string"}}}
FORK_BODY = {
    "type": "object",
    "required": ["to"],
    "properties": {
        "to": {"type": "string"},
        "upto": {"type": "integer", "minimum": 0, "description": "Keep its first upto messages."},
    },
}
SETTINGS = {
    "type": "object",
    "required": ["session_id", "title", "system_prompt"],
    "properties": {
        "session_id": {"type": "string"},
        "title": NULLABLE_TEXT,
        "system_prompt": NULLABLE_TEXT,
    },
}
SETTINGS_BODY = {
    "type": "object",
    "minProperties": 1,
    "additionalProperties": False,
    "properties": {
        "title": {"type": ["string", "null"], "maxLength": 200},
        "system_prompt": {"type": ["string", "null"], "maxLength": 100_000},
    },
}
TURN_BODY = {
    "type": "object",
    "properties": {
        "message": {"type": "string"},
        "model": {"type": "string"},
        "system": {"type": "string", "description": "The session's own system prompt from now on."},
        "regenerate": {
            "type": "boolean",
            "description": "Replace the last turn: a new answer to its message, or to message.",
        },
        "create": {"type": "boolean", "description": "A new session, titled after its message."},
        "attachments": {
            "type": "array",
            "maxItems": 20,
            "items": {
                "type": "object",
                "required": ["name", "data"],
                "properties": {
                    "name": {"type": "string"},
                    "data": {"type": "string", "contentEncoding": "base64"},
                },
            },
        },
    },
}
TURN_EVENTS = {
    "type": "object",
    "required": ["data"],
    "properties": {"data": {"type": "string", "contentMediaType": "application/json"}},
    "description": "Each event's data is a JSON object whose type is waiting, started "
    "(turn_id), delta, tool_call or tool_result, then done (position, messages, usage, "
    "duration_ms), cancelled or error.",
}
TRASH_ROW = {
    "type": "object",
    "required": ["id", "session_id", "reason", "removed_at", "expires_at"],
    "properties": {
        "id": {"type": "string"},
        "session_id": {"type": "string"},
        "reason": {"type": "string"},
        "removed_at": {"type": "integer"},
        "expires_at": {"type": "integer"},
        "message_count": {"type": "integer"},
        "last_used": {"type": "integer"},
    },
}
SEARCH_HIT = {
    "type": "object",
    "required": ["session_id", "seq", "role", "snippet", "matches", "title"],
    "properties": {
        "session_id": {"type": "string"},
        "seq": {"type": "integer"},
        "role": {"type": "string"},
        "created_at": {"type": "integer"},
        "snippet": {"type": "string"},
        "marked": {"type": "string"},
        "matches": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
        "score": {"type": "number"},
        "title": NULLABLE_TEXT,
    },
}
SESSION_HEADER = {
    "name": "X-Session-Id",
    "in": "header",
    "required": False,
    "description": "Run the turn in this session (stored) instead of statelessly.",
    "schema": {"type": "string"},
}


INPUT_TOKENS = {
    "type": "object",
    "required": ["object", "input_tokens", "counted_by"],
    "properties": {
        "object": {"const": "response.input_tokens"},
        "input_tokens": {"type": "integer"},
        "counted_by": {"enum": ["tokenizer", "estimate"]},
    },
}
COMPACTION = {
    "type": "object",
    "required": ["id", "object", "created_at", "output", "usage"],
    "properties": {
        "id": {"type": "string"},
        "object": {"const": "response.compaction"},
        "created_at": {"type": "integer"},
        "output": {"type": "array", "items": OBJECT},
        "usage": OBJECT,
    },
}
COMPACT_REQUEST = {
    "type": "object",
    "required": ["model"],
    "properties": {
        "model": {"type": "string"},
        "input": {"type": ["string", "array"]},
        "previous_response_id": {"type": "string"},
        "instructions": {"type": "string"},
    },
}
DELETED = {
    "type": "object",
    "required": ["id", "object", "deleted"],
    "properties": {
        "id": {"type": "string"},
        "object": {"type": "string"},
        "deleted": {"const": True},
    },
}


METRICS: dict[str, Any] = {
    "summary": "The worker's counters in Prometheus's text format (0.0.4)",
    "tags": ["Service"],
    "responses": {
        "200": {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}},
        "default": {
            "description": "An error (401)",
            "content": {"application/json": {"schema": ERROR}},
        },
    },
}


MCP: dict[str, Any] = {
    "summary": "The sessions as an MCP server (Streamable HTTP, stateless, JSON answers)",
    "description": "One JSON-RPC message of the Model Context Protocol: tools list_sessions, "
    "search_sessions, read_session and chat, the sessions as resources, the agents as "
    "prompts. Send Accept: application/json, text/event-stream.",
    "tags": ["MCP"],
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"type": "object"}}},
    },
    "responses": {
        "200": {
            "description": "The JSON-RPC answer",
            "content": {"application/json": {"schema": OBJECT}},
        },
        "202": {"description": "A notification or response, accepted"},
        "default": {
            "description": "A JSON-RPC error, or an HTTP error (401, 403, 406, 413, 415, 421, 501)",
            "content": {"application/json": {"schema": OBJECT}},
        },
    },
}


def document() -> dict[str, Any]:
    conv, sess, resp = "Conversations", "Sessions", "Responses"
    conversation_path = "/v1/conversations/{conversation_id}"
    session_path = "/v1/sessions/{session_id}"
    completion_path = "/v1/chat/completions/{completion_id}"
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "foliko serve",
            "version": __version__,
            "description": "Foliko sessions over HTTP: OpenAI Responses, Conversations and "
            "Chat Completions, and the native sessions API.",
        },
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": {
            "/healthz": {
                "get": {
                    **_op("Liveness and storage health", OBJECT, tag="Service"),
                    "security": [],
                }
            },
            "/metrics": {"get": METRICS},
            "/mcp": {"post": MCP},
            "/v1/models": {"get": _op("The models configured", MODELS, tag="Models")},
            "/v1/models/{model}": {
                "get": _op("A model a turn may name", OBJECT, params=[MODEL], tag="Models")
            },
            "/v1/responses": {
                "post": _op(
                    "Run one turn", _ref("Response"), body=RESPONSE_REQUEST, stream=True, tag=resp
                )
            },
            "/v1/responses/input_tokens": {
                "post": _op(
                    "Count a request's input tokens (the server's tokenizer, else an estimate)",
                    INPUT_TOKENS,
                    body=RESPONSE_REQUEST,
                    tag=resp,
                )
            },
            "/v1/responses/compact": {
                "post": _op(
                    "Compress a history into a compaction item and the kept items",
                    COMPACTION,
                    body=COMPACT_REQUEST,
                    tag=resp,
                )
            },
            "/v1/responses/{response_id}": {
                "get": _op(
                    "A stored response, or a background one as it stands (its events with stream)",
                    _ref("Response"),
                    params=[RESPONSE, STREAM, STARTING_AFTER],
                    stream=True,
                    tag=resp,
                ),
                "delete": _op(
                    "Delete a response (its conversation keeps its items)",
                    DELETED,
                    params=[RESPONSE],
                    tag=resp,
                ),
            },
            "/v1/responses/{response_id}/cancel": {
                "post": _op(
                    "Cancel a background response: the turn stops and nothing of it is saved; "
                    "the answer is the Response with status cancelled, or, once it has "
                    "finished, the Response unchanged (a response not run in the background "
                    "is a 400)",
                    _ref("Response"),
                    params=[RESPONSE],
                    tag=resp,
                )
            },
            "/v1/responses/{response_id}/input_items": {
                "get": _op(
                    "The input items of a response",
                    _list_of(_ref("Item")),
                    params=[RESPONSE, LIMIT, AFTER, ORDER],
                    tag=resp,
                )
            },
            "/v1/conversations": {
                "post": _op(
                    "Create a conversation",
                    _ref("Conversation"),
                    body={
                        "type": "object",
                        "properties": {
                            "metadata": METADATA,
                            "items": {"type": "array", "maxItems": 20, "items": INPUT_ITEM},
                        },
                    },
                    tag=conv,
                )
            },
            conversation_path: {
                "get": _op("A conversation", _ref("Conversation"), params=[CONVERSATION], tag=conv),
                "post": _op(
                    "Update its metadata",
                    _ref("Conversation"),
                    params=[CONVERSATION],
                    body={
                        "type": "object",
                        "required": ["metadata"],
                        "properties": {"metadata": METADATA},
                    },
                    tag=conv,
                ),
                "delete": _op("Delete it", OBJECT, params=[CONVERSATION], tag=conv),
            },
            conversation_path + "/items": {
                "get": _op(
                    "Its items",
                    _list_of(_ref("Item")),
                    params=[CONVERSATION, LIMIT, AFTER, ORDER],
                    tag=conv,
                ),
                "post": _op(
                    "Add items",
                    _list_of(_ref("Item")),
                    params=[CONVERSATION],
                    body={
                        "type": "object",
                        "required": ["items"],
                        "properties": {
                            "items": {"type": "array", "maxItems": 20, "items": INPUT_ITEM}
                        },
                    },
                    tag=conv,
                ),
            },
            conversation_path + "/items/{item_id}": {
                "get": _op(
                    "One item",
                    _ref("Item"),
                    params=[CONVERSATION, _path("item_id", "An item id.")],
                    tag=conv,
                ),
                "delete": _op(
                    "Remove an item (the items after a removed message move up)",
                    _ref("Conversation"),
                    params=[CONVERSATION, _path("item_id", "An item id.")],
                    tag=conv,
                ),
            },
            "/v1/chat/completions": {
                "post": {
                    **_op(
                        "A chat completion",
                        _ref("ChatCompletion"),
                        body=CHAT_REQUEST,
                        stream=True,
                        params=[SESSION_HEADER],
                        tag="Chat",
                    )
                },
                "get": _op(
                    "Stored chat completions, oldest first",
                    _list_of(_ref("ChatCompletion")),
                    params=[
                        _query("model", {"type": "string"}, "Only those of this model."),
                        {
                            **_query("metadata", METADATA, "Only those with these metadata."),
                            "style": "deepObject",
                            "explode": True,
                        },
                        AFTER,
                        LIMIT,
                        ORDER,
                    ],
                    tag="Chat",
                ),
            },
            completion_path: {
                "get": _op(
                    "A stored chat completion",
                    _ref("ChatCompletion"),
                    params=[COMPLETION],
                    tag="Chat",
                ),
                "post": _op(
                    "Replace its metadata",
                    _ref("ChatCompletion"),
                    params=[COMPLETION],
                    body={
                        "type": "object",
                        "required": ["metadata"],
                        "properties": {"metadata": {**METADATA, "type": ["object", "null"]}},
                        "additionalProperties": False,
                    },
                    tag="Chat",
                ),
                "delete": _op(
                    "Delete it", _ref("ChatCompletionDeleted"), params=[COMPLETION], tag="Chat"
                ),
            },
            completion_path + "/messages": {
                "get": _op(
                    "The messages of its request",
                    _list_of(_ref("ChatCompletionStoreMessage")),
                    params=[COMPLETION, AFTER, LIMIT, ORDER],
                    tag="Chat",
                )
            },
            "/v1/sessions": {
                "get": _op(
                    "Sessions, most recently updated first (sessions list --json)",
                    _list_of(_ref("SessionRow")),
                    params=[
                        _query(
                            "limit",
                            {"type": "integer", "minimum": 1, "maximum": 1000},
                            "Page size.",
                        ),
                        AFTER,
                    ],
                    tag=sess,
                )
            },
            session_path: {
                "get": _op(
                    "A session (sessions show --json)", _ref("Session"), params=[SESSION], tag=sess
                ),
                "delete": _op(
                    "Delete it (into the trash, when in_trash says so)",
                    OBJECT,
                    params=[SESSION],
                    tag=sess,
                ),
                "patch": _op(
                    "Set its title or its own system prompt (null removes either)",
                    SETTINGS,
                    params=[SESSION],
                    body=SETTINGS_BODY,
                    tag=sess,
                ),
            },
            session_path + "/turns": {
                "post": _op(
                    "Run one turn, its events streamed (the web app's turns)",
                    OBJECT,
                    params=[SESSION],
                    body=TURN_BODY,
                    events=TURN_EVENTS,
                    tag=sess,
                )
            },
            session_path + "/turns/{turn_id}/cancel": {
                "post": _op(
                    "Stop a running turn: nothing of it is saved (cancelled false: it was)",
                    OBJECT,
                    params=[SESSION, _path("turn_id", "The turn id its started event gave.")],
                    tag=sess,
                )
            },
            "/v1/search": {
                "get": _op(
                    "Messages by their text, best first (sessions search --json)",
                    {
                        "type": "object",
                        "required": ["object", "data", "unreadable"],
                        "properties": {
                            "object": {"const": "list"},
                            "data": {"type": "array", "items": SEARCH_HIT},
                            "unreadable": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                    params=[
                        {
                            **_query(
                                "q",
                                {"type": "string", "minLength": 1},
                                'Words, "phrases" and prefix*.',
                            ),
                            "required": True,
                        },
                        _query("limit", {"type": "integer", "minimum": 1, "maximum": 200}, "Hits."),
                    ],
                    tag=sess,
                )
            },
            "/v1/trash": {
                "get": _op(
                    "What the trash holds, latest first; keep_ms is the undo window",
                    {
                        "type": "object",
                        "required": ["object", "data", "keep_ms"],
                        "properties": {
                            "object": {"const": "list"},
                            "data": {"type": "array", "items": TRASH_ROW},
                            "keep_ms": {"type": "integer"},
                        },
                    },
                    tag=sess,
                )
            },
            "/v1/trash/{name}/restore": {
                "post": _op(
                    "Restore a session (its latest removal) or an entry, as itself or as",
                    OBJECT,
                    params=[_path("name", "A session id or a trash entry id.")],
                    body={"type": "object", "properties": {"as": {"type": "string"}}},
                    tag=sess,
                )
            },
            session_path + "/export": {
                "get": _op(
                    "Export it",
                    {"type": "array", "items": _ref("Session")},
                    params=[SESSION],
                    tag=sess,
                )
            },
            session_path + "/rename": {
                "post": _op(
                    "Rename it", _ref("Session"), params=[SESSION], body=NAME_BODY, tag=sess
                )
            },
            session_path + "/fork": {
                "post": _op(
                    "Copy it, or its first upto messages",
                    _ref("Session"),
                    params=[SESSION],
                    body=FORK_BODY,
                    tag=sess,
                )
            },
            session_path + "/clear": {
                "post": _op(
                    "Drop its history",
                    _ref("Session"),
                    params=[SESSION],
                    body={"type": "object", "properties": {"variables": {"type": "boolean"}}},
                    tag=sess,
                )
            },
            session_path + "/compact": {
                "post": _op(
                    "Compress its history now (sessions compact --json)",
                    _ref("Compaction"),
                    params=[SESSION],
                    body={
                        "type": "object",
                        "properties": {
                            "keep": {"type": "integer", "minimum": 0},
                            "model": {"type": "string"},
                        },
                    },
                    tag=sess,
                )
            },
            session_path + "/compactions": {
                "get": _op(
                    "Its compactions (sessions show --compactions --json)",
                    _plain_list(_ref("Compaction")),
                    params=[SESSION],
                    tag=sess,
                )
            },
            session_path + "/uncompact": {
                "post": _op(
                    "Send the whole history again from the next turn (sessions uncompact)",
                    {
                        "type": "object",
                        "required": ["uncompacted", "messages"],
                        "properties": {
                            "uncompacted": {"type": "string"},
                            "messages": {"type": "integer"},
                        },
                    },
                    params=[SESSION],
                    tag=sess,
                )
            },
            session_path + "/tree": {
                "get": _op(
                    "Its fork family (sessions tree ID --json)",
                    _plain_list(_ref("ForkRow")),
                    params=[SESSION],
                    tag=sess,
                )
            },
            "/v1/tree": {
                "get": _op(
                    "Every session's fork tree (sessions tree --json)",
                    _plain_list(_ref("ForkRow")),
                    tag=sess,
                )
            },
            session_path + "/vars": {
                "get": _op("Its variables", OBJECT, params=[SESSION], tag=sess),
                "put": _op("Set variables", OBJECT, params=[SESSION], body=OBJECT, tag=sess),
                "delete": _op("Remove every variable", OBJECT, params=[SESSION], tag=sess),
            },
            session_path + "/vars/{key}": {
                "get": _op("One variable", OBJECT, params=[SESSION, KEY], tag=sess),
                "put": _op("Set one variable", OBJECT, params=[SESSION, KEY], body={}, tag=sess),
                "delete": _op("Remove one variable", OBJECT, params=[SESSION, KEY], tag=sess),
            },
        },
    }
