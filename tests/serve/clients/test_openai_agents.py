"""The OpenAI Agents SDK (``openai-agents``) on ``foliko serve``: agents on the
Responses and the Chat Completions models, function tools, streamed runs, and
the conversation state it keeps in foliko (sessions, response chains)."""

from __future__ import annotations

import asyncio

import openai
import pytest
from models.fake_servers import openai_message, openai_protocol_problems, openai_stream
from pydantic import BaseModel

from .conftest import UPSTREAM_MODEL, conversation_of, item_summary, stored_messages, tool_shape

pytestmark = pytest.mark.xdist_group("clients-openai-agents")

MODELS = ("OpenAIResponsesModel", "OpenAIChatCompletionsModel")


class Person(BaseModel):
    name: str
    born: int


@pytest.fixture(scope="module")
def agents():
    import agents

    agents.set_tracing_disabled(True)
    return agents


def async_client(server) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.base_url, api_key="none", max_retries=0)


@pytest.fixture
def sdk(server) -> openai.AsyncOpenAI:
    """The test's async OpenAI client: used and closed in one event loop by ``drive``."""
    return async_client(server)


def drive(sdk: openai.AsyncOpenAI, awaitable):
    """Await ``awaitable`` in a new event loop, closing ``sdk`` before the loop ends."""

    async def main():
        async with sdk:
            return await awaitable

    return asyncio.run(main())


def agent_on(agents, sdk, model_class: str, model: str = "echo", **options):
    model_object = getattr(agents, model_class)(model=model, openai_client=sdk)
    return agents.Agent(name="helper", model=model_object, **options)


def calculator(agents, calls: list):
    @agents.function_tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        calls.append(("add", a, b))
        return a + b

    @agents.function_tool
    def multiply(a: int, b: int) -> int:
        """Multiply two numbers."""
        calls.append(("multiply", a, b))
        return a * b

    return [add, multiply]


def messages_of(server, session_id: str) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in stored_messages(server, session_id)]


@pytest.mark.parametrize("model_class", MODELS)
def test_an_agent_answers_with_its_instructions_left_out_of_the_session(
    agents, sdk, server, client, model_class
):
    agent = agent_on(agents, sdk, model_class, instructions="Answer briefly.")

    result = drive(sdk, agents.Runner.run(agent, "hello there"))

    assert result.final_output == "hello there"
    if model_class == "OpenAIResponsesModel":
        session = conversation_of(client, result.last_response_id)
        assert messages_of(server, session) == [
            ("user", "hello there"),
            ("assistant", "hello there"),
        ]


@pytest.mark.parametrize("model_class", MODELS)
def test_function_tools_run_over_several_steps(agents, sdk, server, upstream, model_class):
    upstream.queue(
        openai_message(tool_calls=[("call_add", "add", {"a": 2, "b": 3})]),
        openai_message(tool_calls=[("call_mul", "multiply", {"a": 5, "b": 4})]),
        openai_message("(2 + 3) * 4 = 20"),
    )
    calls: list = []
    agent = agent_on(agents, sdk, model_class, UPSTREAM_MODEL, tools=calculator(agents, calls))

    result = drive(sdk, agents.Runner.run(agent, "What is (2 + 3) * 4?"))

    assert result.final_output == "(2 + 3) * 4 = 20"
    assert calls == [("add", 2, 3), ("multiply", 5, 4)]
    assert [item.type for item in result.new_items] == [
        "tool_call_item",
        "tool_call_output_item",
        "tool_call_item",
        "tool_call_output_item",
        "message_output_item",
    ]
    assert len(upstream.requests) == 3
    last = upstream.messages(2)
    assert openai_protocol_problems(last) == []
    assert [tool_shape(m) for m in last] == [
        ("user", "What is (2 + 3) * 4?"),
        ("assistant", [("call_add", "add", {"a": 2, "b": 3})]),
        ("tool", "call_add", "5"),
        ("assistant", [("call_mul", "multiply", {"a": 5, "b": 4})]),
        ("tool", "call_mul", "20"),
    ]
    assert [upstream.tool_names(i) for i in range(3)] == [["add", "multiply"]] * 3


@pytest.mark.parametrize("model_class", MODELS)
def test_a_streamed_run_calls_the_tool_and_streams_the_answer(agents, sdk, server, model_class):
    calls: list = []
    agent = agent_on(agents, sdk, model_class, tools=calculator(agents, calls))

    async def main():
        run = agents.Runner.run_streamed(agent, '/tool add {"a": 2, "b": 3}')
        deltas, names = [], []
        async for event in run.stream_events():
            if event.type == "raw_response_event":
                data = event.data
                if data.type == "response.output_text.delta":
                    deltas.append(data.delta)
            elif event.type == "run_item_stream_event":
                names.append(event.name)
        return run, deltas, names

    run, deltas, names = drive(sdk, main())

    assert calls == [("add", 2, 3)]
    assert names == ["tool_called", "tool_output", "message_output_created"]
    assert "".join(deltas) == "add returned: 5"
    assert run.final_output == "add returned: 5"


def test_a_client_tool_named_like_a_foliko_tool_is_the_one_called(agents, sdk):
    @agents.function_tool
    def get_variable(key: str) -> str:
        """Read one of the client's variables."""
        return f"client value of {key}"

    agent = agent_on(agents, sdk, "OpenAIResponsesModel", tools=[get_variable])

    result = drive(sdk, agents.Runner.run(agent, '/tool get_variable {"key": "city"}'))

    assert result.final_output == "get_variable returned: client value of city"


def test_a_conversations_session_holds_each_turn_once(agents, sdk, server, client):
    agent = agent_on(agents, sdk, "OpenAIResponsesModel")

    async def main():
        session = agents.OpenAIConversationsSession(openai_client=sdk)
        results = [
            await agents.Runner.run(agent, text, session=session)
            for text in ("one", "two", "three")
        ]
        return session, results, await session.get_items()

    session, results, items = drive(sdk, main())
    answers = [result.final_output for result in results]

    assert answers == ["one", "two", "three"]
    expected = [
        ("message", role, text)
        for text in ("one", "two", "three")
        for role in ("user", "assistant")
    ]
    assert [item_summary(item) for item in items] == expected
    listed = client.conversations.items.list(session.session_id, order="asc")
    assert [item_summary(item) for item in listed] == expected
    assert messages_of(server, session.session_id) == [(role, text) for _, role, text in expected]
    sent = client.responses.input_items.list(results[-1].last_response_id, order="asc")
    assert [item_summary(item) for item in sent] == expected[:5]


def test_a_conversations_session_keeps_a_tool_run_and_the_turn_after_it(agents, sdk, client):
    calls: list = []
    agent = agent_on(agents, sdk, "OpenAIResponsesModel", tools=calculator(agents, calls))

    async def main():
        session = agents.OpenAIConversationsSession(openai_client=sdk)
        for text in ('/tool add {"a": 2, "b": 3}', "next"):
            await agents.Runner.run(agent, text, session=session)
        return session.session_id

    conversation = drive(sdk, main())

    listed = client.conversations.items.list(conversation, order="asc")
    assert [item_summary(item)[::2] for item in listed] == [
        ("message", '/tool add {"a": 2, "b": 3}'),
        ("function_call", {"a": 2, "b": 3}),
        ("function_call_output", "5"),
        ("message", "add returned: 5"),
        ("message", "next"),
        ("message", "next"),
    ]
    assert calls == [("add", 2, 3)]


def test_a_conversations_session_pops_its_last_item_and_clears(agents, sdk, server, client):
    agent = agent_on(agents, sdk, "OpenAIResponsesModel")

    async def two_turns():
        session = agents.OpenAIConversationsSession(openai_client=sdk)
        for text in ("one", "two"):
            await agents.Runner.run(agent, text, session=session)
        return session.session_id, await session.pop_item(), await session.get_items()

    async def clear(conversation: str, later: openai.AsyncOpenAI):
        session = agents.OpenAIConversationsSession(
            conversation_id=conversation, openai_client=later
        )
        await session.clear_session()
        return await session.get_items(), session.session_id

    conversation, popped, left = drive(sdk, two_turns())

    assert item_summary(popped) == ("message", "assistant", "two")
    kept = [("message", "user", "one"), ("message", "assistant", "one"), ("message", "user", "two")]
    assert [item_summary(item) for item in left] == kept
    assert messages_of(server, conversation) == [(role, text) for _, role, text in kept]

    later = async_client(server)
    after_clear, new_conversation = drive(later, clear(conversation, later))

    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(conversation)
    assert after_clear == []
    assert new_conversation != conversation


def test_runs_chained_by_previous_response_id_continue_one_session(agents, sdk, server, client):
    agent = agent_on(agents, sdk, "OpenAIResponsesModel")

    async def main():
        first = await agents.Runner.run(agent, "one")
        second = await agents.Runner.run(agent, "two", previous_response_id=first.last_response_id)
        return first, second

    first, second = drive(sdk, main())

    assert second.final_output == "two"
    session = conversation_of(client, second.last_response_id)
    assert session == conversation_of(client, first.last_response_id)
    assert messages_of(server, session) == [
        ("user", "one"),
        ("assistant", "one"),
        ("user", "two"),
        ("assistant", "two"),
    ]


def test_a_tool_run_chained_automatically_is_stored_once(agents, sdk, server, client):
    calls: list = []
    agent = agent_on(agents, sdk, "OpenAIResponsesModel", tools=calculator(agents, calls))

    chained = agents.Runner.run(agent, '/tool add {"a": 2, "b": 3}', auto_previous_response_id=True)
    result = drive(sdk, chained)

    assert result.final_output == "add returned: 5"
    session = conversation_of(client, result.last_response_id)
    listed = client.conversations.items.list(session, order="asc")
    assert [item_summary(item)[::2] for item in listed] == [
        ("message", '/tool add {"a": 2, "b": 3}'),
        ("function_call", {"a": 2, "b": 3}),
        ("function_call_output", "5"),
        ("message", "add returned: 5"),
    ]


def test_runs_in_a_server_side_conversation_add_only_their_own_items(agents, sdk, server, client):
    calls: list = []
    agent = agent_on(agents, sdk, "OpenAIResponsesModel", tools=calculator(agents, calls))
    conversation = client.conversations.create().id

    async def main():
        for text in ("one", '/tool multiply {"a": 6, "b": 7}'):
            await agents.Runner.run(agent, text, conversation_id=conversation)

    drive(sdk, main())

    listed = client.conversations.items.list(conversation, order="asc")
    assert [item_summary(item)[::2] for item in listed] == [
        ("message", "one"),
        ("message", "one"),
        ("message", '/tool multiply {"a": 6, "b": 7}'),
        ("function_call", {"a": 6, "b": 7}),
        ("function_call_output", "42"),
        ("message", "multiply returned: 42"),
    ]
    assert calls == [("multiply", 6, 7)]


@pytest.mark.parametrize("model_class", MODELS)
def test_parallel_tool_calls_go_back_as_one_assistant_turn(
    agents, sdk, server, upstream, model_class
):
    upstream.queue(
        openai_message(
            tool_calls=[
                ("call_add", "add", {"a": 1, "b": 2}),
                ("call_mul", "multiply", {"a": 3, "b": 4}),
            ]
        ),
        openai_message("3 and 12"),
    )
    calls: list = []
    agent = agent_on(agents, sdk, model_class, UPSTREAM_MODEL, tools=calculator(agents, calls))

    result = drive(sdk, agents.Runner.run(agent, "1 + 2 and 3 * 4?"))

    assert result.final_output == "3 and 12"
    assert sorted(calls) == [("add", 1, 2), ("multiply", 3, 4)]
    last = upstream.messages(1)
    assert openai_protocol_problems(last) == []
    assert [tool_shape(m) for m in last] == [
        ("user", "1 + 2 and 3 * 4?"),
        (
            "assistant",
            [("call_add", "add", {"a": 1, "b": 2}), ("call_mul", "multiply", {"a": 3, "b": 4})],
        ),
        ("tool", "call_add", "3"),
        ("tool", "call_mul", "12"),
    ]


@pytest.mark.parametrize("model_class", MODELS)
def test_a_streamed_run_of_a_tool_calling_model(agents, sdk, server, upstream, model_class):
    upstream.queue(
        openai_stream(tool_calls=[("call_add", "add", {"a": 20, "b": 22})]),
        openai_stream(["The sum ", "is 42."]),
    )
    calls: list = []
    agent = agent_on(agents, sdk, model_class, UPSTREAM_MODEL, tools=calculator(agents, calls))

    async def main():
        run = agents.Runner.run_streamed(agent, "20 + 22?")
        names = [e.name async for e in run.stream_events() if e.type == "run_item_stream_event"]
        return run, names

    run, names = drive(sdk, main())

    assert calls == [("add", 20, 22)]
    assert names == ["tool_called", "tool_output", "message_output_created"]
    assert run.final_output == "The sum is 42."
    assert [request.body.get("stream") for request in upstream.requests] == [True, True]
    assert [tool_shape(m) for m in upstream.messages(1)][1:] == [
        ("assistant", [("call_add", "add", {"a": 20, "b": 22})]),
        ("tool", "call_add", "42"),
    ]


@pytest.mark.parametrize("model_class", MODELS)
def test_an_agent_with_an_output_type_gets_it_parsed(agents, sdk, server, model_class):
    agent = agent_on(agents, sdk, model_class, output_type=Person)

    result = drive(sdk, agents.Runner.run(agent, '{"name": "Jane Austen", "born": 1775}'))

    assert result.final_output == Person(name="Jane Austen", born=1775)


@pytest.mark.parametrize("model_class", MODELS)
def test_model_settings_reach_the_model(agents, sdk, server, upstream, model_class):
    upstream.queue(openai_message("fine"))
    settings = agents.ModelSettings(
        temperature=0.25,
        top_p=0.5,
        max_tokens=40,
        tool_choice="required",
        parallel_tool_calls=False,
    )
    agent = agent_on(
        agents,
        sdk,
        model_class,
        UPSTREAM_MODEL,
        tools=calculator(agents, []),
        model_settings=settings,
    )

    result = drive(sdk, agents.Runner.run(agent, "hi"))

    assert result.final_output == "fine"
    usage = result.context_wrapper.usage
    assert (usage.requests, usage.input_tokens, usage.output_tokens) == (1, 11, 7)
    sent = upstream.requests[0].body
    wanted = ("temperature", "top_p", "max_tokens", "tool_choice", "parallel_tool_calls")
    assert {key: sent.get(key) for key in wanted} == {
        "temperature": 0.25,
        "top_p": 0.5,
        "max_tokens": 40,
        "tool_choice": "required",
        "parallel_tool_calls": False,
    }


@pytest.mark.parametrize("model_class", MODELS)
def test_strict_function_tools_stay_strict(agents, sdk, server, upstream, model_class):
    upstream.queue(openai_message("fine"))
    agent = agent_on(agents, sdk, model_class, UPSTREAM_MODEL, tools=calculator(agents, []))

    drive(sdk, agents.Runner.run(agent, "hi"))

    functions = [tool["function"] for tool in upstream.requests[0].body["tools"]]
    strict = {f["name"]: f.get("strict") for f in functions if f["name"] in ("add", "multiply")}
    assert strict == {"add": True, "multiply": True}
