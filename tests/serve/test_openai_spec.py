"""Every answer of the OpenAI endpoints foliko serves, valid against OpenAI's
published OpenAPI description (``openai_spec/``, see its README).

One server is toured once: the Responses API (whole, streamed, in the
background, with a function call for the client, compacted, counted), the
Conversations API and its items, Chat Completions (whole and streamed,
stored, listed, updated, deleted) and the models. Every JSON answer and
every streamed event is checked against the schema the description gives
for that path, method and content type. Where foliko deliberately differs,
``DEVIATIONS`` says what and why, and the test fails once it no longer does.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import httpx2 as httpx
import orjson
import pytest
from jsonschema import Draft202012Validator
from models.fake_servers import FakeServer, error_reply, openai_message, openai_stream

from .servers import ServeProcess, foliko_env, wait_until

SPEC = orjson.loads((Path(__file__).parent / "openai_spec" / "openai-openapi.json").read_bytes())
JSON, SSE = "application/json", "text/event-stream"
CALL = ("call_1", "get_weather", {"city": "Oslo"})
TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
CHAT_TOOLS = [{"type": "function", "function": {k: v for k, v in TOOLS[0].items() if k != "type"}}]

DEVIATIONS = {
    r"'user'\]: None is not of type 'string'": "Response.user is typed as a string, but "
    "OpenAI sends null when the request named no user (the description's own examples of "
    "Response and of response.created do), and so does foliko: every field is present",
    r"'usage'\]: None is not of type 'object'": "Response.usage is typed as an object, but "
    "until a response has finished there is none: OpenAI sends null (the description's own "
    "example of response.created does), and so does foliko",
    r"'error'\]: \{'code': '\w+'.* is not valid under any of the given schemas": "a failed "
    "Response's error.code is foliko's own (model_rejected_request, model_error, ...), the code "
    "the same failure has as an HTTP error, not the reference's short list (server_error, ...)",
    r"\['data', \d+, 'role'\]: '(user|system|developer|tool)' is not one of \['assistant'\]": (
        "a stored completion's messages are its request's, each with its own role, as OpenAI "
        "lists them; the description gives each the shape of the model's answer (assistant)"
    ),
}
"""A problem foliko keeps on purpose (a pattern of ``problems``) -> why. The
docs/serve.md lists them; each must still occur (test_each_deviation_still_occurs)."""


def _nullable(node: Any) -> Any:
    """OpenAPI 3.0's ``nullable: true``, which the description still uses in
    places, as the JSON Schema of 3.1 says it: null is allowed too."""
    if isinstance(node, list):
        return [_nullable(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _nullable(value) for key, value in node.items()}
    if node.pop("nullable", False):
        return {"anyOf": [node, {"type": "null"}]}
    return node


COMPONENTS = _nullable(SPEC["components"])


def _event_schema(schema: dict[str, Any], event: Any) -> dict[str, Any]:
    """The branch of a union of events that is this event's type (so that a
    problem is reported inside it, not as a mismatch of the whole union)."""
    union = COMPONENTS["schemas"][schema["$ref"].rpartition("/")[2]]
    for branch in union.get("anyOf", ()):
        target = COMPONENTS["schemas"][branch["$ref"].rpartition("/")[2]]
        if event.get("type") in target.get("properties", {}).get("type", {}).get("enum", ()):
            return branch
    return schema


def _deviation(problem: str) -> str | None:
    return next((p for p in DEVIATIONS if re.search(p, problem)), None)


class Answer(NamedTuple):
    path: str  # as the description names it: /responses/{response_id}
    method: str
    kind: str  # JSON or SSE
    body: Any


def problems(answer: Answer) -> list[str]:
    schema = SPEC["paths"][answer.path][answer.method].get(answer.kind)
    if schema is None:
        return [f"the description defines no {answer.kind} answer"]
    schema = _event_schema(schema, answer.body) if answer.kind == SSE else schema
    validator = Draft202012Validator({**schema, "components": COMPONENTS})
    found = sorted(validator.iter_errors(answer.body), key=lambda e: list(e.absolute_path))
    return [f"{list(e.absolute_path)}: {e.message[:300]}" for e in found]


class Tour:
    """Calls foliko as a client would, keeping every answer it gets."""

    def __init__(self, http: httpx.Client, upstream: FakeServer):
        self.http = http
        self.upstream = upstream
        self.answers: list[Answer] = []

    def call(self, method: str, path: str, named: str, body: Any = None, **kwargs: Any) -> Any:
        answer = self.http.request(method, "/v1" + path, json=body, **kwargs)
        assert answer.status_code == 200, f"{method} {path}: {answer.text}"
        if answer.headers["content-type"].startswith(SSE):
            events = _events(answer.text)
            self.answers += [Answer(named, method.lower(), SSE, event) for event in events]
            return events
        self.answers.append(Answer(named, method.lower(), JSON, answer.json()))
        return answer.json()


def _events(text: str) -> list[dict[str, Any]]:
    datas = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    return [orjson.loads(data) for data in datas if data != "[DONE]"]


def _responses(tour: Tour) -> None:
    made = tour.call("POST", "/responses", "/responses", {"model": "echo", "input": "hi"})
    one = "/responses/{response_id}"
    tour.call("GET", f"/responses/{made['id']}", one)
    tour.call("GET", f"/responses/{made['id']}/input_items", one + "/input_items")
    tour.call(
        "POST",
        "/responses",
        "/responses",
        {"model": "echo", "input": "again", "previous_response_id": made["id"], "stream": True},
    )
    tour.upstream.queue(openai_message(None, [CALL]), openai_message("sunny"))
    called = tour.call(
        "POST",
        "/responses",
        "/responses",
        {"model": "openai:m", "input": "weather?", "tools": TOOLS, "metadata": {"k": "v"}},
    )
    output = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
    body = {"model": "openai:m", "input": [output], "previous_response_id": called["id"]}
    tour.call("POST", "/responses", "/responses", body)
    tour.upstream.queue(openai_stream(["it is ", "sunny"]))
    tour.call("POST", "/responses", "/responses", {**body, "stream": True, "store": False})
    tour.upstream.queue(error_reply(400, "the upstream refuses this one"))
    failed = tour.call("POST", "/responses", "/responses", {**body, "stream": True})
    assert [e["type"] for e in failed[-2:]] == ["error", "response.failed"]
    queued = tour.call(
        "POST", "/responses", "/responses", {"model": "echo", "input": "later", "background": True}
    )
    wait_until(
        lambda: tour.http.get(f"/v1/responses/{queued['id']}").json()["status"] == "completed"
    )
    tour.call("GET", f"/responses/{queued['id']}", one)
    tour.call("POST", f"/responses/{queued['id']}/cancel", one + "/cancel")
    streamed = {"model": "echo", "input": "later", "background": True, "stream": True}
    tour.call("POST", "/responses", "/responses", streamed)
    counted = {"model": "echo", "input": "how many tokens is this?"}
    tour.call("POST", "/responses/input_tokens", "/responses/input_tokens", counted)
    history = [{"role": "user", "content": f"message {i} " * 40} for i in range(30)]
    compacted = tour.call(
        "POST", "/responses/compact", "/responses/compact", {"model": "echo", "input": history}
    )
    assert compacted["output"][-1]["type"] == "compaction"
    manage = {"context_management": [{"type": "compaction", "compact_threshold": 1000}]}
    managed = {"model": "echo", "input": history, **manage}
    made = tour.call("POST", "/responses", "/responses", managed)
    assert made["output"][0]["type"] == "compaction"
    tour.call("GET", f"/responses/{made['id']}", one)
    tour.call("POST", "/responses", "/responses", {**managed, "stream": True})
    again = {"model": "echo", "input": [*compacted["output"], {"role": "user", "content": "on"}]}
    tour.call("POST", "/responses", "/responses", again)


def _conversations(tour: Tour) -> None:
    image = base64.b64encode(_PNG).decode()
    made = tour.call(
        "POST",
        "/conversations",
        "/conversations",
        {
            "metadata": {"topic": "spec"},
            "items": [
                {"role": "system", "content": "Be brief."},
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "look"},
                        {"type": "input_image", "image_url": f"data:image/png;base64,{image}"},
                    ],
                },
            ],
        },
    )
    one = "/conversations/{conversation_id}"
    here = f"/conversations/{made['id']}"
    tour.call("GET", here, one)
    tour.call("POST", here, one, {"metadata": {"topic": "changed"}})
    added = tour.call(
        "POST", here + "/items", one + "/items", {"items": [{"role": "user", "content": "x"}]}
    )
    continued = {"model": "echo", "input": "y", "conversation": made["id"]}
    tour.call("POST", "/responses", "/responses", continued)
    tour.call("GET", here + "/items", one + "/items")
    item = one + "/items/{item_id}"
    tour.call("GET", f"{here}/items/{added['data'][0]['id']}", item)
    tour.call("DELETE", f"{here}/items/{added['data'][0]['id']}", item)
    tour.call("DELETE", here, one)


def _chat(tour: Tour) -> None:
    messages = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    made = tour.call(
        "POST",
        "/chat/completions",
        "/chat/completions",
        {"model": "echo", "messages": messages, "store": True, "metadata": {"k": "v"}},
    )
    body = {"model": "echo", "messages": messages, "stream": True}
    tour.call("POST", "/chat/completions", "/chat/completions", body)
    body["stream_options"] = {"include_usage": True}
    tour.call("POST", "/chat/completions", "/chat/completions", {**body, "store": True})
    tour.upstream.queue(openai_message(None, [CALL]))
    tour.call(
        "POST",
        "/chat/completions",
        "/chat/completions",
        {"model": "openai:m", "messages": messages, "tools": CHAT_TOOLS, "store": True},
    )
    tour.upstream.queue(openai_stream([], [CALL]))
    body = {"model": "openai:m", "messages": messages, "tools": CHAT_TOOLS, "stream": True}
    tour.call("POST", "/chat/completions", "/chat/completions", body)
    one = "/chat/completions/{completion_id}"
    tour.call("GET", "/chat/completions", "/chat/completions")
    tour.call("GET", f"/chat/completions/{made['id']}", one)
    tour.call("GET", f"/chat/completions/{made['id']}/messages", one + "/messages")
    tour.call("POST", f"/chat/completions/{made['id']}", one, {"metadata": {"k": "w"}})
    tour.call("DELETE", f"/chat/completions/{made['id']}", one)
    tour.call("GET", "/models", "/models")
    tour.call("GET", "/models/echo", "/models/{model}")


_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


@pytest.fixture(scope="module")
def answers(tmp_path_factory) -> Iterator[list[Answer]]:
    home = tmp_path_factory.mktemp("spec-home")
    upstream = FakeServer().start()
    env = {"OPENAI_BASE_URL": f"{upstream.url}/v1", "OPENAI_API_KEY": "sk-spec"}
    server = ServeProcess([], foliko_env(home, env), [], home=home).wait_ready()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            tour = Tour(http, upstream)
            for part in (_responses, _conversations, _chat):
                part(tour)
            yield tour.answers
    finally:
        server.kill()
        upstream.stop()


OPERATIONS = sorted(
    (path, method)
    for path, methods in SPEC["paths"].items()
    for method, content in methods.items()
    if content
)
NOT_SERVED = {
    ("/models/{model}", "delete"): "foliko's models are configured, not fine-tuned: no DELETE",
}


@pytest.mark.parametrize(("path", "method"), OPERATIONS, ids=lambda v: v)
def test_every_answer_is_valid_against_openai_s_description(answers, path, method):
    if (path, method) in NOT_SERVED:
        pytest.skip(NOT_SERVED[path, method])
    seen = [a for a in answers if (a.path, a.method) == (path, method)]
    assert seen, f"the tour never called {method.upper()} {path}"
    found = [f"{a.kind} {p}" for a in seen for p in problems(a) if _deviation(p) is None]
    assert not found, "\n".join(found[:20])


def test_each_deviation_still_occurs(answers):
    seen = {_deviation(p) for answer in answers for p in problems(answer)}
    gone = [reason for pattern, reason in DEVIATIONS.items() if pattern not in seen]
    assert not gone, f"no longer a deviation, drop it here and in docs/serve.md: {gone}"
