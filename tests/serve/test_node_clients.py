"""``foliko serve`` driven by the real Node client libraries (tests/serve/node):
the openai SDK, the AI SDK, the OpenAI Agents SDK and the Codex CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from models.fake_servers import OPENAI_KEY, FakeServer, openai_protocol_problems, openai_stream

from .node_clients import NodeClients, NodeRun, node_clients, run_codex, trapped_network
from .servers import ServeProcess, foliko_env, run_cli

UPSTREAM_MODEL = "openai:fake"


@pytest.fixture(scope="session")
def node(tmp_path_factory) -> NodeClients:
    return node_clients(tmp_path_factory.mktemp("node-clients"))


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeServer]:
    """A fake OpenAI-compatible model for the whole module (each test queues its replies)."""
    fake = FakeServer().start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture(scope="module")
def relay(tmp_path_factory, upstream) -> Iterator[ServeProcess]:
    """A ``foliko serve`` whose ``openai:`` models are the fake upstream."""
    home = tmp_path_factory.mktemp("relay-home")
    env = {"OPENAI_BASE_URL": f"{upstream.url}/v1", "OPENAI_API_KEY": OPENAI_KEY}
    running = ServeProcess([], foliko_env(home, env), [], home=home)
    try:
        yield running.wait_ready()
    finally:
        running.kill()


@pytest.fixture
def model(upstream) -> FakeServer:
    """The fake upstream, its requests and replies cleared for this test."""
    upstream.requests.clear()
    upstream.unplanned = 0
    upstream._replies.clear()
    return upstream


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


def test_openai_sdk_helpers(node, server):
    run = node.run("openai_sdk.mjs", "helpers", "helped along", base_url=server.base_url)
    result = succeeded(run)

    assert result["stream"]["text"] == "".join(result["stream"]["deltas"]) == "helped along"
    previous = result["previous"]
    assert previous["next"]["previous_response_id"] == previous["id"]
    assert previous["next"]["output_text"] == "next"
    assert previous["next"]["output"][0]["role"] == "assistant"
    assert message_texts(previous["input"]) == [("user", "next")]
    city = {"city": "Oslo", "population": 709037}
    assert result["parsed"] == result["chatParsed"] == city
    assert result["runTools"] == "add returned: 3"
    assert result["chatStream"] == "helped along"


# the AI SDK (generateText, streamText, generateObject) on both OpenAI APIs

API = pytest.mark.parametrize("api", ["responses", "chat"])
ARITHMETIC = "What is (2 + 3) * 4? Use the tools."


def queue_arithmetic(model: FakeServer) -> str:
    """Three model turns: add (said first), then multiply, then the answer (returned)."""
    model.queue(
        openai_stream(["First 2 + 3."], tool_calls=[("call_add", "add", {"a": 2, "b": 3})]),
        openai_stream(tool_calls=[("call_mul", "multiply", {"a": 5, "b": 4})]),
        openai_stream(["(2 + 3) ", "* 4 = 20"]),
    )
    return "(2 + 3) * 4 = 20"


def text_of(content: str | list[dict]) -> str:
    if isinstance(content, str):
        return content
    return "".join(part["text"] for part in content if part["type"] == "text")


def assert_arithmetic_steps(result: dict, model: FakeServer, answer: str) -> None:
    assert result["text"] == answer
    steps = result["steps"]
    assert [step["text"] for step in steps] == ["First 2 + 3.", "", answer]
    assert [[call["toolName"] for call in step["toolCalls"]] for step in steps] == [
        ["add"],
        ["multiply"],
        [],
    ]
    assert [step["toolCalls"][0]["input"] for step in steps[:2]] == [
        {"a": 2, "b": 3},
        {"a": 5, "b": 4},
    ]
    assert [step["toolResults"] for step in steps] == [
        [{"toolName": "add", "output": {"sum": 5}}],
        [{"toolName": "multiply", "output": {"product": 20}}],
        [],
    ]
    assert [step["finishReason"] for step in steps] == ["tool-calls", "tool-calls", "stop"]
    assert model.unplanned == 0
    assert len(model.requests) == 3
    for request in model.requests:
        messages = request.body["messages"]
        assert openai_protocol_problems(messages) == [], messages
        assert (messages[0]["role"], text_of(messages[0]["content"])) == ("user", ARITHMETIC)
    last = model.requests[-1].body["messages"]
    said = [text_of(m["content"] or "") for m in last if m["role"] == "assistant"]
    assert said[0] == "First 2 + 3."
    results = [(m["tool_call_id"], json.loads(m["content"])) for m in last if m["role"] == "tool"]
    assert results == [("call_add", {"sum": 5}), ("call_mul", {"product": 20})]
    for request in model.requests:
        assert {tool["function"]["name"] for tool in request.body["tools"]} == {"add", "multiply"}


@API
def test_ai_sdk_generate_text_with_tools_over_several_steps(node, relay, model, api):
    answer = queue_arithmetic(model)
    run = node.run(
        "ai_sdk.mjs", "generate-tools", api, UPSTREAM_MODEL, ARITHMETIC, base_url=relay.base_url
    )
    assert_arithmetic_steps(succeeded(run), model, answer)


@API
def test_ai_sdk_stream_text_with_tools_over_several_steps(node, relay, model, api):
    answer = queue_arithmetic(model)
    run = node.run(
        "ai_sdk.mjs", "stream-tools", api, UPSTREAM_MODEL, ARITHMETIC, base_url=relay.base_url
    )
    result = succeeded(run)

    assert result["deltas"] == "First 2 + 3." + answer  # every step's text, in order
    assert result["parts"].count("tool-call") == 2
    assert result["parts"].count("tool-result") == 2
    assert result["parts"][-1] == "finish"
    assert_arithmetic_steps(result, model, answer)


@API
def test_ai_sdk_parallel_tool_calls_of_one_step(node, relay, model, api):
    model.queue(
        openai_stream(
            tool_calls=[
                ("call_add", "add", {"a": 2, "b": 3}),
                ("call_mul", "multiply", {"a": 4, "b": 5}),
            ]
        ),
        openai_stream(["5 and 20"]),
    )
    run = node.run(
        "ai_sdk.mjs", "generate-tools", api, UPSTREAM_MODEL, "2+3 and 4*5?", base_url=relay.base_url
    )
    result = succeeded(run)

    assert result["text"] == "5 and 20"
    assert [r["output"] for r in result["steps"][0]["toolResults"]] == [{"sum": 5}, {"product": 20}]
    second = model.requests[1].body["messages"]
    assert openai_protocol_problems(second) == [], second
    (asked,) = [m for m in second if m["role"] == "assistant"]
    assert [call["id"] for call in asked["tool_calls"]] == ["call_add", "call_mul"]


@API
def test_ai_sdk_generate_text_with_a_tool_on_echo(node, server, api):
    prompt = '/tool add {"a": 20, "b": 22}'
    run = node.run("ai_sdk.mjs", "generate-tools", api, "echo", prompt, base_url=server.base_url)
    result = succeeded(run)

    steps = result["steps"]
    assert [step["toolResults"] for step in steps] == [
        [{"toolName": "add", "output": {"sum": 42}}],
        [],
    ]
    assert result["text"] == 'add returned: {"sum":42}'


@API
def test_ai_sdk_generate_object(node, server, client, api):
    city = {"city": "Lyon", "population": 522250}
    run = node.run(
        "ai_sdk.mjs", "generate-object", api, "echo", json.dumps(city), base_url=server.base_url
    )
    result = succeeded(run)

    assert result["object"] == city
    assert result["finishReason"] == "stop"
    sent = json.loads(run.exchanges[-1]["body"])
    asked = sent["text"]["format"] if api == "responses" else sent["response_format"]
    assert asked["type"] == "json_schema"
    if api == "responses":
        assert json.loads(client.responses.retrieve(result["responseId"]).output_text) == city


# the OpenAI Agents SDK

AGENT_API = pytest.mark.parametrize("api", ["responses", "chat_completions"])


@AGENT_API
def test_agents_run_with_a_tool(node, server, api):
    prompt = '/tool get_weather {"city": "Paris"}'
    run = node.run("agents.mjs", "run-tool", api, "echo", prompt, base_url=server.base_url)
    result = succeeded(run)

    assert result["finalOutput"] == "get_weather returned: sunny in Paris"
    assert [item["type"] for item in result["items"]] == [
        "tool_call_item",
        "tool_call_output_item",
        "message_output_item",
    ]
    call = result["items"][0]["raw"]
    assert (call["name"], json.loads(call["arguments"])) == ("get_weather", {"city": "Paris"})
    streamed = result["streamed"]
    assert streamed["finalOutput"] == result["finalOutput"]
    assert [item["type"] for item in streamed["items"]] == [
        item["type"] for item in result["items"]
    ]
    assert "raw_model_stream_event" in streamed["events"]


@AGENT_API
def test_agents_session_across_turns(node, server, client, api):
    run = node.run(
        "agents.mjs", "session", api, "echo", "first", "second", "third", base_url=server.base_url
    )
    result = succeeded(run)

    assert result["outputs"] == ["first", "second", "third"]
    turns = [
        (role, text) for text in ("first", "second", "third") for role in ("user", "assistant")
    ]
    conversation = result["conversation"]
    listed = client.conversations.items.list(conversation, order="asc", limit=100).data
    assert [(item.role, item.content[0].text) for item in listed] == turns
    assert stored_messages(server, conversation) == turns
    sent = [
        json.loads(e["body"])
        for e in run.exchanges
        if e["url"].endswith(("/responses", "/chat/completions"))
    ]
    assert len(sent) == 3


# the Codex CLI (its native binary ships in the npm package)


@pytest.fixture
def network_trap() -> Iterator[FakeServer]:
    with trapped_network() as trap:
        yield trap


def completed(events: list[dict], kind: str) -> list[dict]:
    return [
        event["item"]
        for event in events
        if event["type"] == "item.completed" and event["item"]["type"] == kind
    ]


def test_codex_exec_answers_through_foliko(node, server, tmp_path, network_trap):
    before = run_cli(server.home, "sessions", "list", "--json").stdout
    done, events = run_codex(node, tmp_path, network_trap, server.base_url, "say hi")

    assert done.returncode == 0, done.stdout + done.stderr
    assert [item["text"] for item in completed(events, "agent_message")] == ["say hi"]
    assert events[-1]["type"] == "turn.completed"
    assert run_cli(server.home, "sessions", "list", "--json").stdout == before  # store: false


def test_codex_exec_runs_a_command_the_model_calls_for(node, server, tmp_path, network_trap):
    prompt = '/tool exec_command {"cmd": "echo codex-ran-this"}'
    done, events = run_codex(node, tmp_path, network_trap, server.base_url, prompt)

    assert done.returncode == 0, done.stdout + done.stderr
    (command,) = completed(events, "command_execution")
    assert (command["exit_code"], command["aggregated_output"]) == (0, "codex-ran-this\n")
    (answer,) = completed(events, "agent_message")
    assert answer["text"].startswith("exec_command returned: ")
    assert "codex-ran-this" in answer["text"]
