"""One ``foliko serve`` per test module for the client libraries: model ``echo``
answers with the user's text, model ``openai:gpt`` answers from ``upstream``,
a fake OpenAI-compatible model server whose replies each test queues.

Each test file drives one library and runs on one worker (``xdist_group``):
the library is imported there only, and the module's server is started once.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterator
from typing import Any

import pytest
from models.fake_servers import OPENAI_KEY, FakeServer, Recorded, Reply, error_reply

from ..servers import ServeProcess, foliko_env, run_cli

UPSTREAM_MODEL = "openai:gpt"


class Upstream:
    """The replies the fake model server gives during one test, in order, and
    the requests foliko sent it."""

    def __init__(self) -> None:
        self.replies: collections.deque[Reply] = collections.deque()
        self.requests: list[Recorded] = []

    def queue(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def __call__(self, request: Recorded) -> Reply:
        self.requests.append(request)
        if not self.replies:
            return error_reply(400, "fake upstream: no reply was queued for this request")
        reply = self.replies.popleft()
        return reply(request) if callable(reply) else reply

    def messages(self, index: int) -> list[dict[str, Any]]:
        """The ``messages`` of the index-th request, without the system prompt."""
        return [m for m in self.requests[index].body["messages"] if m["role"] != "system"]

    def tool_names(self, index: int) -> list[str]:
        return [tool["function"]["name"] for tool in self.requests[index].body.get("tools", [])]


@pytest.fixture(scope="module")
def fake_model_server() -> Iterator[FakeServer]:
    fake = FakeServer().start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory, fake_model_server: FakeServer) -> Iterator[ServeProcess]:
    home = tmp_path_factory.mktemp("serve-home")
    env = {"OPENAI_BASE_URL": f"{fake_model_server.url}/v1", "OPENAI_API_KEY": OPENAI_KEY}
    running = ServeProcess([], foliko_env(home, env), [], home=home)
    try:
        yield running.wait_ready()
    finally:
        running.kill()


@pytest.fixture
def upstream(fake_model_server: FakeServer) -> Iterator[Upstream]:
    script = Upstream()
    fake_model_server.default = script
    try:
        yield script
    finally:
        fake_model_server.default = None


def stored_messages(server: ServeProcess, session_id: str) -> list[dict[str, Any]]:
    """The session's messages as ``foliko sessions show --json`` prints them."""
    shown = run_cli(server.home, "sessions", "show", session_id, "--json")
    assert shown.returncode == 0, shown.stderr.decode()
    return json.loads(shown.stdout)["messages"]


def conversation_of(client, response_id: str) -> str:
    """The id of the conversation (foliko session) a response was stored in."""
    return client.responses.retrieve(response_id).conversation.id


def item_summary(item: Any) -> tuple:
    """(type, role or name, text or arguments or output) of a conversation item."""
    data = item if isinstance(item, dict) else item.model_dump()
    kind = data["type"]
    if kind == "message":
        return kind, data["role"], "".join(part.get("text", "") for part in data["content"])
    if kind == "function_call":
        return kind, data["name"], json.loads(data["arguments"])
    if kind == "function_call_output":
        return kind, data["call_id"], data["output"]
    return (kind,)


def tool_shape(message: dict[str, Any]) -> tuple:
    """A chat message as (role, content), an assistant's tool calls as (role,
    [(id, name, arguments)]) and a tool result as (role, call id, content)."""
    if message["role"] == "tool":
        return "tool", message["tool_call_id"], message["content"]
    calls = message.get("tool_calls")
    if calls:
        return message["role"], [
            (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls
        ]
    return message["role"], message["content"]
