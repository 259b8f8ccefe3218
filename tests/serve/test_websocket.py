"""WebSocket mode on /v1/responses, through the OpenAI SDK's own WebSocket
client (``client.responses.connect()``) and a raw client for bad input."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from .servers import StubModelServer
from .test_responses import WEATHER
from .test_users import KEYS

TERMINAL = ("response.completed", "response.incomplete", "response.failed")
TEXT_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]


def done(event: dict[str, Any]) -> bool:
    """The last event of a response: its end, or an error outside any stream
    (one inside a stream has a sequence_number and response.failed follows)."""
    return event["type"] in TERMINAL or (
        event["type"] == "error" and "sequence_number" not in event
    )


def until_done(connection) -> list:
    """The SDK's events of one response, up to its last."""
    events = []
    for event in connection:
        events.append(event)
        if done(event.to_dict()):
            return events
    raise AssertionError(f"the connection closed after {[e.type for e in events]}")


def final(connection):
    events = until_done(connection)
    assert events[-1].type == "response.completed", events[-1]
    return events[-1].response


def create(**fields: Any) -> dict[str, Any]:
    return {"type": "response.create", "model": "echo", **fields}


def ws_url(server) -> str:
    return server.url.replace("http://", "ws://") + "/v1/responses"


class Raw:
    """A plain WebSocket to /v1/responses: JSON (or anything) in, JSON out."""

    def __init__(self, server, headers: dict[str, str] | None = None):
        from websockets.sync.client import connect

        self.socket = connect(ws_url(server), additional_headers=headers or {})

    def send(self, message: Any) -> None:
        self.socket.send(message if isinstance(message, str) else json.dumps(message))

    def receive(self) -> dict[str, Any]:
        raw = self.socket.recv(timeout=30)
        assert isinstance(raw, str), "events are text frames"
        return json.loads(raw)

    def until_done(self) -> list[dict[str, Any]]:
        events = [self.receive()]
        while not done(events[-1]):
            events.append(self.receive())
        return events

    def close(self) -> None:
        self.socket.close()


@pytest.fixture
def raw(server):
    socket = Raw(server)
    yield socket
    socket.close()


def test_a_turn_sends_the_streamed_events_and_is_stored(client):
    with client.responses.connect() as connection:
        connection.response.create(model="echo", input="hello")
        events = until_done(connection)
    assert [event.type for event in events] == TEXT_EVENTS
    assert [event.sequence_number for event in events] == list(range(len(events)))
    done = events[-1].response
    assert done.output_text == "hello"
    assert done.status == "completed"
    assert client.responses.retrieve(done.id).output_text == "hello"


def test_turns_on_one_socket_continue_each_other_and_run_in_order(client):
    with client.responses.connect() as connection:
        connection.response.create(model="echo", input="one")
        first = final(connection)
        connection.response.create(model="echo", input="two", previous_response_id=first.id)
        connection.response.create(model="echo", input="three", conversation=first.conversation.id)
        second, third = final(connection), final(connection)
    assert (second.output_text, third.output_text) == ("two", "three")
    assert second.previous_response_id == first.id
    assert second.conversation.id == third.conversation.id == first.conversation.id
    items = client.conversations.items.list(first.conversation.id, order="asc").data
    assert [item.content[0].text for item in items] == [
        "one",
        "one",
        "two",
        "two",
        "three",
        "three",
    ]


def test_store_false_continues_from_the_connection_memory_only(client):
    with client.responses.connect() as connection:
        connection.response.create(model="echo", input="one", store=False)
        first = final(connection)
        connection.response.create(
            model="echo", input="two", previous_response_id=first.id, store=False
        )
        second = final(connection)
        # The model saw the whole chain: its input counts all four messages.
        assert second.usage.input_tokens > first.usage.input_tokens
        connection.response.create(
            model="echo", input="three", previous_response_id=second.id, store=False
        )
        assert final(connection).output_text == "three"
        # Only the latest store: false response is kept.
        connection.response.create(
            model="echo", input="again", previous_response_id=first.id, store=False
        )
        missed = until_done(connection)[-1]
    assert (second.output_text, second.store) == ("two", False)
    assert missed.type == "error"
    assert missed.status == 400
    assert missed.error.code == "previous_response_not_found"
    assert missed.error.param == "previous_response_id"
    from openai import NotFoundError

    with pytest.raises(NotFoundError):
        client.responses.retrieve(second.id)
    # A new connection does not know it.
    with client.responses.connect() as connection:
        connection.response.create(
            model="echo", input="later", previous_response_id=second.id, store=False
        )
        assert until_done(connection)[-1].error.code == "previous_response_not_found"


def test_a_store_false_response_is_not_continued_into_storage(raw):
    raw.send(create(input="x", store=False))
    first = raw.until_done()[-1]["response"]
    raw.send(create(input="y", previous_response_id=first["id"]))
    refused = raw.until_done()[-1]
    assert (refused["status"], refused["error"]["param"]) == (400, "store")


def test_a_failed_continuation_drops_the_response_it_named(raw):
    raw.send(create(input="x", store=False))
    first = raw.until_done()[-1]["response"]
    wrong = [{"type": "function_call_output", "call_id": "call_nope", "output": "?"}]
    raw.send(create(input=wrong, previous_response_id=first["id"], store=False))
    failed = raw.until_done()[-1]
    assert (failed["type"], failed["status"]) == ("error", 400)
    assert "call_nope" in failed["error"]["message"]
    raw.send(create(input="retry", previous_response_id=first["id"], store=False))
    assert raw.until_done()[-1]["error"]["code"] == "previous_response_not_found"


@pytest.mark.parametrize("store", [True, False])
def test_a_function_tool_round_trip(client, store):
    with client.responses.connect() as connection:
        connection.response.create(
            model="echo", input='/tool get_weather {"city": "Oslo"}', tools=WEATHER, store=store
        )
        events = until_done(connection)
        call = events[-1].response.output[0]
        connection.response.create(
            model="echo",
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
            previous_response_id=events[-1].response.id,
            tools=WEATHER,
            store=store,
        )
        answered = final(connection)
    kinds = [event.type for event in events]
    assert "response.function_call_arguments.done" in kinds
    assert kinds[-1] == "response.completed"
    assert (call.type, call.name, json.loads(call.arguments)) == (
        "function_call",
        "get_weather",
        {"city": "Oslo"},
    )
    assert answered.output_text == "get_weather returned: sunny"


@pytest.mark.parametrize(
    ("message", "param"),
    [
        ("{not json", None),
        ([1, 2], None),
        ({"type": "session.update"}, "type"),
        (create(input="x", stream=True), "stream"),
        (create(input="x", background=True), "background"),
        (create(input="x", generate=False), "generate"),
        (create(), "input"),
        (create(input="x", stream_id="a b"), "stream_id"),
        (create(input="x", previous_response_id="resp_x0"), "previous_response_id"),
    ],
)
def test_an_error_keeps_the_connection_open(raw, message, param):
    raw.send(message)
    error = raw.receive()
    assert error["type"] == "error"
    assert error["status"] == 400
    assert error["error"]["type"] == "invalid_request_error"
    assert error["error"]["code"]
    assert error["error"]["param"] == param
    raw.send(create(input="still here"))
    assert raw.until_done()[-1]["response"]["output"][0]["content"][0]["text"] == "still here"


def test_steering_is_refused_as_the_sdk_expects(client):
    with client.responses.connect() as connection:
        connection.response.steer(input="faster", previous_response_id="resp_1")
        event = connection.recv()
    assert event.type == "response.steer.failed"
    assert event.error.code == "steering_not_supported"


def test_api_keys_guard_the_upgrade_and_name_the_user(start_server, tmp_path):
    from openai import OpenAI
    from websockets.exceptions import InvalidStatus

    keys = tmp_path / "keys.toml"
    keys.write_text(KEYS)
    keys.chmod(0o600)
    server = start_server("--api-keys", str(keys))
    for key in (None, "key-nobody"):
        with pytest.raises(InvalidStatus) as refused:
            Raw(server, {"Authorization": f"Bearer {key}"} if key else {})
        assert refused.value.response.status_code == 401
        assert json.loads(refused.value.response.body)["error"]["code"] == "invalid_api_key"

    alice = OpenAI(base_url=server.base_url, api_key="key-alice", max_retries=0)
    bob = OpenAI(base_url=server.base_url, api_key="key-bob", max_retries=0)
    with alice.responses.connect() as connection:
        connection.response.create(model="echo", input="alice's")
        mine = final(connection)
    assert alice.responses.retrieve(mine.id).output_text == "alice's"
    with bob.responses.connect() as connection:
        connection.response.create(model="echo", input="x", previous_response_id=mine.id)
        assert until_done(connection)[-1].error.code == "previous_response_not_found"


def test_two_sockets_at_once_keep_their_conversations(client):
    one, two = client.conversations.create(), client.conversations.create()
    with client.responses.connect() as first, client.responses.connect() as second:
        for turn in ("a", "b"):
            first.response.create(model="echo", input=f"one {turn}", conversation=one.id)
            second.response.create(model="echo", input=f"two {turn}", conversation=two.id)
            assert final(second).output_text == f"two {turn}"
            assert final(first).output_text == f"one {turn}"
    for conversation, name in ((one, "one"), (two, "two")):
        items = client.conversations.items.list(conversation.id, order="asc").data
        texts = [item.content[0].text for item in items]
        assert texts == [f"{name} a", f"{name} a", f"{name} b", f"{name} b"]


def test_a_new_socket_continues_a_stored_response(client):
    with client.responses.connect() as connection:
        connection.response.create(model="echo", input="before")
        before = final(connection)
    with client.responses.connect() as connection:
        connection.response.create(model="echo", input="after", previous_response_id=before.id)
        after = final(connection)
    assert after.conversation.id == before.conversation.id
    items = client.conversations.items.list(before.conversation.id, order="asc").data
    assert [item.content[0].text for item in items] == ["before", "before", "after", "after"]


def test_lanes_run_side_by_side_and_each_in_order(start_server):
    """A stalled model holds the default lane: the response queued behind it
    waits, while a response in a stream_id lane finishes; 16 responses may
    wait or run on a connection."""
    stub = StubModelServer(stall=True)
    try:
        server = start_server(env={"OPENAI_BASE_URL": stub.url, "OPENAI_API_KEY": "k"})
        raw = Raw(server)
        raw.send(create(model="openai:gpt-4o", input="slow"))
        raw.send(create(input="queued"))
        raw.send(create(input="x", stream_id="side"))
        events = []
        while not (events and events[-1].get("stream_id") == "side" and done(events[-1])):
            events.append(raw.receive())
        side = [event for event in events if "stream_id" in event]
        assert all(event["stream_id"] == "side" for event in side)
        assert [event["type"] for event in side] == TEXT_EVENTS
        assert not any(done(event) for event in events if "stream_id" not in event)
        crowded = Raw(server)
        for _ in range(16):
            crowded.send(create(model="openai:gpt-4o", input="wait"))
        crowded.send(create(input="one too many", stream_id="extra"))
        # The first waiting response may announce itself before the refusal comes.
        frames = [crowded.receive()]
        while frames[-1].get("stream_id") != "extra" and len(frames) < 5:
            frames.append(crowded.receive())
        refused = frames[-1]
        assert (refused["type"], refused.get("stream_id")) == ("error", "extra")
        starting = {"response.created", "response.in_progress"}
        assert {frame["type"] for frame in frames[:-1]} <= starting
        assert refused["error"]["code"] == "websocket_stream_limit_reached"
        crowded.close()
        stub.release.set()
        # The stub answers 400 at last: the first response fails, then the queued one runs.
        failed, queued = raw.until_done(), raw.until_done()
        error = next(event for event in failed if event["type"] == "error")
        assert (error["status"], error["error"]["code"]) == (400, "model_rejected_request")
        assert failed[-1]["type"] == "response.failed"
        assert failed[-1]["response"]["error"]["code"] == "model_rejected_request"
        assert queued[-1]["response"]["output"][0]["content"][0]["text"] == "queued"
        raw.close()
    finally:
        stub.stop()


class FakeSocket:
    """The part of a Starlette WebSocket a Connection uses; the client never speaks."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.closed: int | None = None

    async def receive(self) -> dict[str, Any]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def send_text(self, text: str) -> None:
        self.sent.append(json.loads(text))

    async def close(self, code: int = 1000) -> None:
        self.closed = code


def test_a_connection_ends_at_its_lifetime_with_the_documented_error():
    from foliko_cli.serve.websocket import GOING_AWAY, Connection

    socket = FakeSocket()
    asyncio.run(Connection(socket, lifetime=0.01).run())  # type: ignore[arg-type]
    assert socket.closed == GOING_AWAY
    [error] = socket.sent
    assert error["type"] == "error"
    assert error["error"]["code"] == "websocket_connection_limit_reached"
