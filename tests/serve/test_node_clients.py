"""``foliko serve`` driven by the real Node client libraries (tests/serve/node):
the openai SDK, the AI SDK, the OpenAI Agents SDK and the Codex CLI."""

from __future__ import annotations

import json

import pytest

from .node_clients import NodeClients, NodeRun, node_clients
from .servers import run_cli


@pytest.fixture(scope="session")
def node(tmp_path_factory) -> NodeClients:
    return node_clients(tmp_path_factory.mktemp("node-clients"))


def succeeded(run: NodeRun):
    assert run.ok, run.explain()
    return run.result


def stored_messages(server, session: str) -> list[tuple[str, str]]:
    shown = run_cli(server.home, "sessions", "show", session, "--json")
    assert shown.returncode == 0, shown.stderr
    return [(m["role"], m["content"]) for m in json.loads(shown.stdout)["messages"]]


def message_texts(items: list[dict]) -> list[tuple[str, str]]:
    return [
        (item["role"], "".join(part.get("text", "") for part in item["content"]))
        for item in items
        if item["type"] == "message"
    ]


# the openai SDK


def test_openai_responses_create(node, server, client):
    run = node.run("openai_sdk.mjs", "responses-plain", "hello from node", base_url=server.base_url)
    reply = succeeded(run)

    assert (reply["object"], reply["status"]) == ("response", "completed")
    assert reply["output_text"] == "hello from node"
    assert message_texts(reply["output"]) == [("assistant", "hello from node")]
    assert client.responses.retrieve(reply["id"]).output_text == "hello from node"
    inputs = client.responses.input_items.list(reply["id"]).data
    assert [(i.role, i.content[0].text) for i in inputs] == [("user", "hello from node")]


def test_openai_responses_stream(node, server, client):
    run = node.run("openai_sdk.mjs", "responses-stream", "streamed words", base_url=server.base_url)
    streamed = succeeded(run)

    types = [event["type"] for event in streamed["events"]]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    numbers = [event["sequence_number"] for event in streamed["events"]]
    assert numbers == sorted(set(numbers))
    assert streamed["deltas"] == "streamed words"
    final = streamed["final"]
    assert (final["status"], final["output_text"]) == ("completed", "streamed words")
    assert client.responses.retrieve(final["id"]).output_text == "streamed words"


def test_openai_responses_in_a_conversation(node, server, client):
    run = node.run(
        "openai_sdk.mjs", "responses-conversation", "one", "two", base_url=server.base_url
    )
    result = succeeded(run)

    conversation = result["conversation"]
    assert [reply["output_text"] for reply in result["replies"]] == ["one", "two"]
    assert [reply["conversation"] for reply in result["replies"]] == [{"id": conversation}] * 2
    turns = [("user", "one"), ("assistant", "one"), ("user", "two"), ("assistant", "two")]
    assert message_texts(result["items"]) == turns
    listed = client.conversations.items.list(conversation, order="asc").data
    assert [(item.role, item.content[0].text) for item in listed] == turns
    assert stored_messages(server, conversation) == turns
    assert client.conversations.retrieve(conversation).metadata == {"from": "node"}


def test_openai_chat_completion(node, server):
    before = run_cli(server.home, "sessions", "list", "--json").stdout
    run = node.run(
        "openai_sdk.mjs", "chat-plain", "be brief", "plain chat", base_url=server.base_url
    )
    completion = succeeded(run)

    assert completion["object"] == "chat.completion"
    (choice,) = completion["choices"]
    assert (choice["message"]["role"], choice["message"]["content"]) == ("assistant", "plain chat")
    assert choice["finish_reason"] == "stop"
    assert completion["usage"]["total_tokens"] == (
        completion["usage"]["prompt_tokens"] + completion["usage"]["completion_tokens"]
    )
    assert run_cli(server.home, "sessions", "list", "--json").stdout == before


def test_openai_chat_completions_in_a_session(node, server):
    run = node.run(
        "openai_sdk.mjs", "chat-session", "node-chat", "first", "second", base_url=server.base_url
    )
    result = succeeded(run)

    contents = [c["choices"][0]["message"]["content"] for c in result["completions"]]
    assert contents == ["first", "second"]
    assert stored_messages(server, "node-chat") == [
        ("user", "first"),
        ("assistant", "first"),
        ("user", "second"),
        ("assistant", "second"),
    ]


def test_openai_chat_completion_stream(node, server):
    run = node.run("openai_sdk.mjs", "chat-stream", "chunked reply", base_url=server.base_url)
    streamed = succeeded(run)

    chunks = streamed["chunks"]
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    assert len({chunk["id"] for chunk in chunks}) == 1
    assert streamed["content"] == "chunked reply"
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "stop"
    assert all(reason is None for reason in finishes[:-1])
    (usage,) = [chunk["usage"] for chunk in chunks if chunk.get("usage")]
    assert chunks[-1]["choices"] == [] and usage["completion_tokens"] > 0


def test_openai_chat_completion_tools(node, server):
    run = node.run("openai_sdk.mjs", "chat-tools", "2", "3", base_url=server.base_url)
    result = succeeded(run)

    (first,) = result["first"]["choices"]
    assert first["finish_reason"] == "tool_calls"
    (call,) = first["message"]["tool_calls"]
    assert (call["type"], call["function"]["name"]) == ("function", "add")
    assert json.loads(call["function"]["arguments"]) == {"a": 2, "b": 3}
    (second,) = result["second"]["choices"]
    assert second["finish_reason"] == "stop"
    assert second["message"]["content"] == "add returned: 5"
