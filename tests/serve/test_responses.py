"""The Responses and Conversations APIs through the official OpenAI SDK."""

from __future__ import annotations

import json

import pytest

from .servers import run_cli

WEATHER = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


def item(conversation_id: str, position: int) -> str:
    """The id of the message item at ``position`` of a conversation."""
    from foliko_cli.serve.ids import message_item_id, scope_of

    return message_item_id(scope_of(conversation_id), position)


def texts(client, conversation_id: str) -> list[tuple[str, str]]:
    page = client.conversations.items.list(conversation_id, order="asc", limit=100)
    return [(item.role, item.content[0].text) for item in page.data if item.type == "message"]


def test_two_turns_in_a_conversation_are_one_cli_session(client, server):
    conversation = client.conversations.create(metadata={"topic": "tests"})
    assert conversation.id.startswith("conv_")
    first = client.responses.create(model="echo", input="hello", conversation=conversation.id)
    second = client.responses.create(model="echo", input="again", conversation=conversation.id)
    assert (first.output_text, second.output_text) == ("hello", "again")
    assert first.conversation.id == conversation.id

    assert texts(client, conversation.id) == [
        ("user", "hello"),
        ("assistant", "hello"),
        ("user", "again"),
        ("assistant", "again"),
    ]
    newest_first = client.conversations.items.list(conversation.id, limit=2)
    assert [item.id for item in newest_first.data] == [
        item(conversation.id, 3),
        item(conversation.id, 2),
    ]
    assert newest_first.has_more
    rest = client.conversations.items.list(
        conversation.id, limit=10, after=item(conversation.id, 2)
    )
    assert [i.id for i in rest.data] == [item(conversation.id, 1), item(conversation.id, 0)]

    shown = run_cli(server.home, "sessions", "show", conversation.id, "--json")
    assert shown.returncode == 0, shown.stderr
    stored = json.loads(shown.stdout)
    assert [m["content"] for m in stored["messages"]] == ["hello", "hello", "again", "again"]
    assert stored["metadata"]["conversation_metadata"] == {"topic": "tests"}
    assert client.conversations.retrieve(conversation.id).metadata == {"topic": "tests"}


def test_a_cli_session_is_a_conversation(client, server):
    made = run_cli(server.home, "chat", "--session", "from-cli", "made by the CLI")
    assert made.returncode == 0, made.stderr
    reply = client.responses.create(model="echo", input="and by HTTP", conversation="from-cli")
    assert reply.output_text == "and by HTTP"
    assert texts(client, "from-cli")[0] == ("user", "made by the CLI")


def test_conversation_metadata_update_items_and_delete(client):
    conversation = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "seeded"}]
    )
    assert texts(client, conversation.id) == [("user", "seeded")]
    updated = client.conversations.update(conversation.id, metadata={"k": "v"})
    assert updated.metadata == {"k": "v"}
    added = client.conversations.items.create(
        conversation.id, items=[{"type": "message", "role": "assistant", "content": "noted"}]
    )
    assert [i.id for i in added.data] == [item(conversation.id, 1)]
    retrieved = client.conversations.items.retrieve(
        item(conversation.id, 1), conversation_id=conversation.id
    )
    assert retrieved.role == "assistant"
    deleted = client.conversations.delete(conversation.id)
    assert deleted.deleted
    from openai import NotFoundError

    with pytest.raises(NotFoundError):
        client.conversations.retrieve(conversation.id)


def test_a_deleted_conversation_can_be_restored_from_the_trash(client, server):
    conversation = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "worth keeping"}]
    )
    assert client.conversations.delete(conversation.id).deleted
    listed = json.loads(run_cli(server.home, "sessions", "trash", "list", "--json").stdout)
    assert conversation.id in [row["session_id"] for row in listed]
    restored = run_cli(server.home, "sessions", "restore", conversation.id)
    assert restored.returncode == 0, restored.stderr
    assert texts(client, conversation.id) == [("user", "worth keeping")]


def test_previous_response_id_chains_and_forks(client):
    first = client.responses.create(model="echo", input="one")
    second = client.responses.create(model="echo", input="two", previous_response_id=first.id)
    assert second.conversation.id == first.conversation.id
    assert texts(client, first.conversation.id) == [
        ("user", "one"),
        ("assistant", "one"),
        ("user", "two"),
        ("assistant", "two"),
    ]
    # ``first`` is no longer the latest turn: continuing it forks.
    branch = client.responses.create(model="echo", input="other", previous_response_id=first.id)
    assert branch.conversation.id != first.conversation.id
    assert texts(client, branch.conversation.id) == [
        ("user", "one"),
        ("assistant", "one"),
        ("user", "other"),
        ("assistant", "other"),
    ]
    assert len(texts(client, first.conversation.id)) == 4
    assert client.responses.retrieve(second.id).output_text == "two"
    inputs = client.responses.input_items.list(second.id)
    assert [item.content[0].text for item in inputs.data] == ["two"]


def test_stream_events_as_the_sdk_helper_reads_them(client):
    conversation = client.conversations.create()
    with client.responses.stream(
        model="echo", input="streamed reply", conversation=conversation.id
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds == [
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
    assert final.output_text == "streamed reply"
    assert final.output[0].id == item(conversation.id, 1)
    assert client.responses.retrieve(final.id).output_text == "streamed reply"
    assert texts(client, conversation.id)[-1] == ("assistant", "streamed reply")


def test_stream_with_create_has_increasing_sequence_numbers(client):
    events = list(client.responses.create(model="echo", input="x y", stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].response.status == "completed"


def test_async_stream(server):
    import asyncio

    from openai import AsyncOpenAI

    async def main():
        async with (
            AsyncOpenAI(base_url=server.base_url, api_key="none") as client,
            client.responses.stream(model="echo", input="async") as stream,
        ):
            deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
            return deltas, await stream.get_final_response()

    deltas, final = asyncio.run(main())
    assert "".join(deltas) == final.output_text == "async"


def test_client_tools_hand_the_call_back_and_continue(client):
    conversation = client.conversations.create()
    asked = client.responses.create(
        model="echo",
        input='/tool get_weather {"city": "Paris"}',
        conversation=conversation.id,
        tools=WEATHER,
    )
    [call] = asked.output
    assert (call.type, call.name, json.loads(call.arguments)) == (
        "function_call",
        "get_weather",
        {"city": "Paris"},
    )
    answered = client.responses.create(
        model="echo",
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
        conversation=conversation.id,
        tools=WEATHER,
    )
    assert answered.output_text == "get_weather returned: sunny"
    kinds = [i.type for i in client.conversations.items.list(conversation.id, order="asc").data]
    assert kinds == ["message", "function_call", "function_call_output", "message"]


def test_client_tool_call_streamed(client):
    with client.responses.stream(
        model="echo", input='/tool get_weather {"city": "Oslo"}', tools=WEATHER
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.done" in kinds
    assert final.output[0].type == "function_call"
    assert json.loads(final.output[0].arguments) == {"city": "Oslo"}


def test_an_unknown_call_id_is_bad_input(client):
    from openai import BadRequestError

    conversation = client.conversations.create()
    with pytest.raises(BadRequestError, match="no function call"):
        client.responses.create(
            model="echo",
            input=[{"type": "function_call_output", "call_id": "call_nope", "output": "x"}],
            conversation=conversation.id,
        )


def test_store_false_saves_nothing(client, http):
    conversation = client.conversations.create()
    client.responses.create(model="echo", input="kept", conversation=conversation.id)
    reply = client.responses.create(
        model="echo", input="not kept", conversation=conversation.id, store=False
    )
    assert reply.output_text == "not kept"
    assert len(texts(client, conversation.id)) == 2
    before = http.get("/v1/sessions").json()["data"]
    client.responses.create(model="echo", input="alone", store=False)
    assert http.get("/v1/sessions").json()["data"] == before
    from openai import NotFoundError

    with pytest.raises(NotFoundError):
        client.responses.retrieve(reply.id)


def test_instructions_are_this_turn_system_prompt_only(start_server):
    from openai import OpenAI

    from .servers import StubModelServer

    stub = StubModelServer(status=200)
    try:
        server = start_server(env={"OPENAI_BASE_URL": stub.url, "OPENAI_API_KEY": "k"})
        client = OpenAI(base_url=server.base_url, api_key="none", max_retries=0)
        first = client.responses.create(model="openai:gpt-4o", input="hi", instructions="Be brief.")
        client.responses.create(
            model="openai:gpt-4o", input="and now", previous_response_id=first.id
        )
    finally:
        stub.stop()
    sent = [[m for m in body["messages"] if m["role"] == "system"] for body in stub.bodies]
    assert sent == [[{"role": "system", "content": "Be brief."}], []]
    assert first.instructions == "Be brief."
    shown = run_cli(server.home, "sessions", "show", first.conversation.id, "--json")
    assert "system_prompt" not in json.loads(shown.stdout)["metadata"]


def test_request_ids_are_the_servers_and_the_trace_is_the_clients(http, server):
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    headers = {
        "X-Request-Id": "req-abc",
        "X-Client-Request-Id": "mine-1",
        "traceparent": f"00-{trace}-00f067aa0ba902b7-01",
    }
    response = http.post(
        "/v1/responses", json={"model": "echo", "input": "traced"}, headers=headers
    )
    assert response.status_code == 200
    request_id = response.headers["x-request-id"]
    assert request_id != "req-abc"
    assert response.headers["x-client-request-id"] == "mine-1"
    assert response.headers["traceparent"].startswith(f"00-{trace}-")
    session = response.json()["conversation"]["id"]
    stored = json.loads(run_cli(server.home, "sessions", "show", session, "--json").stdout)
    assert {(m["request_id"], m["trace_id"]) for m in stored["messages"]} == {(request_id, trace)}
    generated = http.get("/healthz")
    assert len(generated.headers["x-request-id"]) == 16


def test_streamed_items_after_server_tools_have_their_stored_ids(start_server):
    from openai import OpenAI

    server = start_server(env={"FOLIKO_SERVE_TOOLS": "set_variable"})
    client = OpenAI(base_url=server.base_url, api_key="none", max_retries=0)
    conversation = client.conversations.create()
    with client.responses.stream(
        model="echo",
        input='/tool set_variable {"key": "a", "value": 1}',
        conversation=conversation.id,
    ) as stream:
        added = [e.item.id for e in stream if e.type == "response.output_item.added"]
        final = stream.get_final_response()
    assert final.output_text.startswith("set_variable returned:")
    assert added == [i.id for i in final.output] == [item(conversation.id, 3)]
    stored = client.conversations.items.list(conversation.id, order="asc").data
    assert [i.id for i in stored][-1] == item(conversation.id, 3)


def test_sampling_options_reach_the_model(start_server):
    from openai import OpenAI

    from .servers import StubModelServer

    stub = StubModelServer(status=200)
    try:
        server = start_server(env={"OPENAI_BASE_URL": stub.url, "OPENAI_API_KEY": "k"})
        client = OpenAI(base_url=server.base_url, api_key="none", max_retries=0)
        client.responses.create(
            model="openai:gpt-4o", input="hi", temperature=0.25, top_p=0.5, max_output_tokens=7
        )
        client.chat.completions.create(
            model="openai:gpt-4o",
            messages=[{"role": "user", "content": "hi"}],
            temperature=0.75,
            seed=3,
            stop=["END"],
        )
    finally:
        stub.stop()
    first, second = stub.bodies
    assert (first["temperature"], first["top_p"]) == (0.25, 0.5)
    assert first.get("max_completion_tokens", first.get("max_tokens")) == 7
    assert (second["temperature"], second["seed"], second["stop"]) == (0.75, 3, ["END"])
