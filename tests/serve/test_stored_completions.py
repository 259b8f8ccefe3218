"""Stored chat completions (``store: true``) through the official SDK, and their error paths."""

from __future__ import annotations

import json

import openai
import pytest
from models.fake_servers import OPENAI_KEY, Reply, openai_stream_events

from .servers import run_cli


def store(client, text: str = "hi", *, tag: str, **options):
    return client.chat.completions.create(
        model="echo",
        messages=[{"role": "user", "content": text}],
        store=True,
        metadata={"test": tag, **options.pop("metadata", {})},
        **options,
    )


def listed(client, tag: str, **options) -> list:
    return list(client.chat.completions.list(metadata={"test": tag}, **options))


def session_ids(http) -> set[str]:
    return {row["session_id"] for row in http.get("/v1/sessions?limit=1000").json()["data"]}


def test_a_stored_completion_is_retrieved_with_its_request_messages(client, server):
    created = client.chat.completions.create(
        model="echo",
        messages=[
            {"role": "developer", "content": "Be terse."},
            {"role": "user", "content": "earlier"},
            {"role": "assistant", "content": "earlier"},
            {"role": "user", "content": [{"type": "text", "text": "now"}], "name": "ann"},
        ],
        store=True,
        metadata={"test": "retrieve", "topic": "greeting"},
        temperature=0.5,
    )

    got = client.chat.completions.retrieve(created.id)
    assert got.id == created.id and got.id.startswith("chatcmpl-")
    assert (got.model, got.created, got.usage) == (created.model, created.created, created.usage)
    assert got.choices[0].message.content == created.choices[0].message.content == "now"
    assert got.choices[0].finish_reason == "stop"
    assert got.metadata == {"test": "retrieve", "topic": "greeting"}
    assert got.model_extra["temperature"] == 0.5
    messages = list(client.chat.completions.messages.list(created.id))
    assert [m.id for m in messages] == [f"{created.id}-{i}" for i in range(4)]
    assert [(m.role, m.content) for m in messages] == [
        ("developer", "Be terse."),
        ("user", "earlier"),
        ("assistant", "earlier"),
        ("user", "now"),
    ]
    assert messages[0].content_parts is None
    assert [p.text for p in messages[3].content_parts] == ["now"]
    assert messages[3].name == "ann"
    # A stored completion is a session holding the conversation and the answer.
    shown = json.loads(run_cli(server.home, "sessions", "show", created.id, "--json").stdout)
    stored = [m["content"] for m in shown["messages"]]
    assert stored == ["Be terse.", "earlier", "earlier", "now", "now"]


def test_without_store_nothing_is_kept(client, http):
    before = session_ids(http)
    for flag in ({}, {"store": False}):
        reply = client.chat.completions.create(
            model="echo",
            messages=[{"role": "user", "content": "forget me"}],
            metadata={"test": "unstored"},
            **flag,
        )
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.retrieve(reply.id)
    assert listed(client, "unstored") == []
    assert session_ids(http) == before


def test_the_list_pages_filters_and_orders(client, http):
    made = [store(client, f"number {i}", tag="paging", metadata={"i": str(i)}).id for i in range(5)]

    assert [c.id for c in listed(client, "paging", limit=2)] == made
    assert [c.id for c in listed(client, "paging", limit=2, order="desc")] == made[::-1]
    first = http.get("/v1/chat/completions?metadata[test]=paging&limit=2").json()
    assert (first["first_id"], first["last_id"], first["has_more"]) == (*made[:2], True)
    rest = http.get(f"/v1/chat/completions?metadata[test]=paging&after={made[1]}").json()
    assert [c["id"] for c in rest["data"]] == made[2:] and rest["has_more"] is False
    picked = client.chat.completions.list(metadata={"test": "paging", "i": "3"})
    assert [c.id for c in picked] == [made[3]]
    assert [c.id for c in listed(client, "paging", model="echo")] == made
    assert listed(client, "paging", model="another") == []


def test_update_replaces_the_metadata_and_delete_removes_it(client, http):
    made = store(client, tag="update", metadata={"old": "yes"})

    updated = client.chat.completions.update(made.id, metadata={"test": "updated", "new": "1"})
    assert updated.metadata == {"test": "updated", "new": "1"}
    assert client.chat.completions.retrieve(made.id).metadata == updated.metadata
    assert listed(client, "update") == []
    assert [c.id for c in listed(client, "updated")] == [made.id]
    assert client.chat.completions.update(made.id, metadata=None).metadata == {}

    deleted = client.chat.completions.delete(made.id)
    assert (deleted.id, deleted.object, deleted.deleted) == (
        made.id,
        "chat.completion.deleted",
        True,
    )
    assert made.id not in session_ids(http)
    for call in (
        lambda: client.chat.completions.retrieve(made.id),
        lambda: client.chat.completions.delete(made.id),
        lambda: client.chat.completions.messages.list(made.id),
        lambda: client.chat.completions.update(made.id, metadata={}),
    ):
        with pytest.raises(openai.NotFoundError) as caught:
            call()
        assert caught.value.body["code"] == "not_found"


def test_only_metadata_can_be_updated(client, http):
    made = store(client, tag="only-metadata")
    for body, param in (({"model": "x", "metadata": {}}, "model"), ({}, "metadata")):
        answer = http.post(f"/v1/chat/completions/{made.id}", json=body)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["param"] == param
    assert client.chat.completions.retrieve(made.id).metadata == {"test": "only-metadata"}


def test_the_messages_list_pages(client):
    roles = ["user", "assistant"]
    history = [{"role": roles[i % 2], "content": f"m{i}"} for i in range(5)]
    made = client.chat.completions.create(model="echo", messages=history, store=True)

    pages = client.chat.completions.messages.list(made.id, limit=2)
    assert [m.content for m in pages] == [f"m{i}" for i in range(5)]
    assert pages.has_more is True and len(pages.data) == 2
    newest = client.chat.completions.messages.list(made.id, order="desc", limit=100)
    assert [m.content for m in newest.data] == [f"m{i}" for i in reversed(range(5))]


def test_tool_calls_are_kept_in_the_choice_and_the_messages(client):
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    asked = client.chat.completions.create(
        model="echo",
        messages=[{"role": "user", "content": '/tool lookup {"q": 1}'}],
        tools=tools,
        store=True,
    )
    kept = client.chat.completions.retrieve(asked.id)
    assert kept.choices[0].finish_reason == "tool_calls"
    assert kept.choices[0].message.tool_calls == asked.choices[0].message.tool_calls
    assert kept.model_extra["tools"] == tools
    call = asked.choices[0].message.tool_calls[0]
    answered = client.chat.completions.create(
        model="echo",
        tools=tools,
        store=True,
        messages=[
            {"role": "user", "content": '/tool lookup {"q": 1}'},
            asked.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "found"},
        ],
    )
    _, assistant, tool = client.chat.completions.messages.list(answered.id).data
    assert assistant.tool_calls[0].id == call.id and assistant.content is None
    assert json.loads(assistant.tool_calls[0].function.arguments) == {"q": 1}
    assert (tool.role, tool.content, tool.model_extra["tool_call_id"]) == ("tool", "found", call.id)


def test_a_streamed_completion_is_stored_when_it_ends(client):
    stream = client.chat.completions.create(
        model="echo",
        messages=[{"role": "user", "content": "streamed and stored"}],
        stream=True,
        store=True,
        metadata={"test": "stream"},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    [kept] = listed(client, "stream")
    assert kept.id == chunks[0].id
    assert kept.choices[0].message.content == text == "streamed and stored"
    assert kept.choices[0].finish_reason == "stop"
    assert kept.usage.total_tokens > 0
    assert [m.content for m in client.chat.completions.messages.list(kept.id)] == [text]


def test_with_a_session_header_the_turn_is_also_a_stored_completion(client, http):
    made = client.chat.completions.create(
        model="echo",
        messages=[{"role": "user", "content": "in a session"}],
        store=True,
        metadata={"test": "session"},
        extra_headers={"X-Session-Id": "stored-sess"},
    )
    assert [c.id for c in listed(client, "session")] == [made.id]
    assert [m.content for m in client.chat.completions.messages.list(made.id)] == ["in a session"]
    client.chat.completions.delete(made.id)
    kept = http.get("/v1/sessions/stored-sess").json()
    assert [m["content"] for m in kept["messages"]] == ["in a session", "in a session"]


@pytest.mark.parametrize(
    "metadata",
    [
        {f"k{i}": "v" for i in range(17)},
        {"k" * 65: "v"},
        {"k": "v" * 513},
        {"k": 1},
        ["k", "v"],
    ],
    ids=["17 pairs", "long key", "long value", "not a string", "not an object"],
)
def test_bad_metadata_is_refused_before_the_turn(http, metadata):
    answer = http.post(
        "/v1/chat/completions",
        json={
            "model": "echo",
            "store": True,
            "metadata": metadata,
            "messages": [{"role": "user", "content": "x"}],
        },
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == "metadata"


def test_store_must_be_a_boolean(http):
    answer = http.post(
        "/v1/chat/completions",
        json={"store": "yes", "messages": [{"role": "user", "content": "x"}]},
    )
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "store"


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=many", "limit"),
        ("order=sideways", "order"),
        ("after=chatcmpl-never", "after"),
        ("metadata=x", "metadata"),
    ],
)
def test_bad_list_parameters_are_a_400(client, http, query, param):
    made = store(client, tag="bad-query")
    for path in ("/v1/chat/completions", f"/v1/chat/completions/{made.id}/messages"):
        if param == "metadata" and path.endswith("messages"):
            continue
        answer = http.get(f"{path}?{query}")
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert (error["param"], error["type"]) == (param, "invalid_request_error")


def test_unknown_ids_and_extra_segments_are_404(client, http):
    made = store(client, tag="not-found")
    http.post(  # a session named like a completion, but not one
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "x"}]},
        headers={"X-Session-Id": "chatcmpl-plain-session"},
    )
    for completion_id in ("chatcmpl-unknown", "chatcmpl-plain-session", "stored-sess", "%20x"):
        for method in ("GET", "DELETE"):
            answer = http.request(method, f"/v1/chat/completions/{completion_id}")
            assert answer.status_code == 404, (method, completion_id, answer.text)
            assert answer.json()["error"]["code"] == "not_found"
    assert "chatcmpl-plain-session" not in [c.id for c in client.chat.completions.list(limit=100)]
    for path in (f"{made.id}/extra", f"{made.id}/messages/extra", f"a/{made.id}"):
        for method in ("GET", "POST", "DELETE"):
            answer = http.request(method, f"/v1/chat/completions/{path}", json={"metadata": {}})
            assert answer.status_code == 404, (method, path, answer.text)
            assert answer.json()["error"]["code"] == "not_found"
    assert client.chat.completions.retrieve(made.id).metadata == {"test": "not-found"}


def test_a_stream_that_fails_stores_nothing(start_server, model_server):
    events = openai_stream_events(["par", "tial"], usage=None)
    model_server.queue(Reply(events=events, cut_after=4))
    env = {"OPENAI_BASE_URL": f"{model_server.url}/v1", "OPENAI_API_KEY": OPENAI_KEY}
    server = start_server(env=env)
    import httpx2 as httpx

    body = {
        "model": "openai:some-model",
        "stream": True,
        "store": True,
        "messages": [{"role": "user", "content": "x"}],
    }
    with httpx.Client(base_url=server.url, timeout=30) as http:
        with http.stream("POST", "/v1/chat/completions", json=body) as response:
            lines = [line for line in response.iter_lines() if line]
        assert "par" in "".join(lines)
        assert '"error"' in lines[-1] and "data: [DONE]" not in lines
        assert http.get("/v1/chat/completions").json()["data"] == []
        assert http.get("/v1/sessions").json()["data"] == []


def test_each_user_sees_only_their_stored_completions(start_server, tmp_path):
    keys = tmp_path / "keys.toml"
    keys.write_text('[keys]\n"key-alice" = "alice"\n"key-bob" = "bob"\n')
    keys.chmod(0o600)
    server = start_server("--api-keys", str(keys))
    alice, bob = (
        openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0)
        for key in ("key-alice", "key-bob")
    )
    made = store(alice, "alice's", tag="users")

    assert [c.id for c in alice.chat.completions.list()] == [made.id]
    assert list(bob.chat.completions.list()) == []
    for call in (
        lambda: bob.chat.completions.retrieve(made.id),
        lambda: bob.chat.completions.messages.list(made.id),
        lambda: bob.chat.completions.update(made.id, metadata={}),
        lambda: bob.chat.completions.delete(made.id),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert alice.chat.completions.retrieve(made.id).metadata == {"test": "users"}
