"""Pydantic AI agents (``pydantic-ai-slim[openai]``) on ``foliko serve``, on the
Chat Completions model and on the Responses model: message history across
runs, tools, streamed runs, and response chains stored once."""

from __future__ import annotations

import asyncio

import pytest
from models.fake_servers import openai_message
from pydantic import BaseModel

from .conftest import UPSTREAM_MODEL, conversation_of, item_summary, stored_messages, tool_shape

pytestmark = pytest.mark.xdist_group("clients-pydantic-ai")

MODELS = ("OpenAIChatModel", "OpenAIResponsesModel")
AUSTEN = '{"name": "Jane Austen", "born": 1775}'


class Person(BaseModel):
    name: str
    born: int


@pytest.fixture(scope="module")
def agent_on(server):
    from pydantic_ai import Agent
    from pydantic_ai.models import openai as models
    from pydantic_ai.providers.openai import OpenAIProvider

    def build(model_class: str, model: str = "echo", **options) -> Agent:
        provider = OpenAIProvider(base_url=server.base_url, api_key="none")
        return Agent(getattr(models, model_class)(model, provider=provider), **options)

    return build


def texts(server, session_id: str) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in stored_messages(server, session_id)]


@pytest.mark.parametrize("model_class", MODELS)
def test_a_second_run_answers_after_the_first_runs_history(agent_on, client, server, model_class):
    agent = agent_on(model_class)

    first = agent.run_sync("hello")
    second = agent.run_sync("again", message_history=first.all_messages())

    assert (first.output, second.output) == ("hello", "again")
    assert len(second.all_messages()) == 4
    if model_class == "OpenAIResponsesModel":
        session = conversation_of(client, second.all_messages()[-1].provider_response_id)
        assert texts(server, session) == [
            ("user", "hello"),
            ("assistant", "hello"),
            ("user", "again"),
            ("assistant", "again"),
        ]


@pytest.mark.parametrize("model_class", MODELS)
def test_the_history_and_instructions_reach_the_model(agent_on, upstream, model_class):
    upstream.queue(openai_message("Rome"), openai_message("Paris"))
    agent = agent_on(model_class, UPSTREAM_MODEL, instructions="Answer with one word.")

    first = agent.run_sync("Capital of Italy?")
    second = agent.run_sync("And of France?", message_history=first.all_messages())

    assert (first.output, second.output) == ("Rome", "Paris")
    assert [tool_shape(m) for m in upstream.requests[1].body["messages"]] == [
        ("system", "Answer with one word."),
        ("user", "Capital of Italy?"),
        ("assistant", "Rome"),
        ("user", "And of France?"),
    ]


@pytest.mark.parametrize("model_class", MODELS)
def test_a_tool_call_round_trips(agent_on, model_class):
    from pydantic_ai.messages import ToolCallPart, ToolReturnPart

    agent = agent_on(model_class)
    called = []

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        called.append((a, b))
        return a + b

    result = agent.run_sync('/tool add {"a": 2, "b": 3}')

    assert result.output == "add returned: 5"
    assert called == [(2, 3)]
    parts = [part for message in result.all_messages() for part in message.parts]
    (call,) = [part for part in parts if isinstance(part, ToolCallPart)]
    (returned,) = [part for part in parts if isinstance(part, ToolReturnPart)]
    assert (call.tool_name, call.args_as_dict()) == ("add", {"a": 2, "b": 3})
    assert (returned.tool_call_id, returned.content) == (call.tool_call_id, 5)


@pytest.mark.parametrize("model_class", MODELS)
def test_a_streamed_run_gives_the_whole_answer(agent_on, model_class):
    agent = agent_on(model_class)

    async def main():
        async with agent.run_stream("streamed words") as run:
            pieces = [piece async for piece in run.stream_text(delta=True)]
        return pieces, await run.get_output()

    pieces, output = asyncio.run(main())

    assert "".join(pieces) == "streamed words"
    assert output == "streamed words"


@pytest.mark.parametrize("model_class", MODELS)
@pytest.mark.parametrize("mode", ["native", "tool"])
def test_an_output_type_is_parsed_from_the_reply(agent_on, model_class, mode):
    from pydantic_ai import NativeOutput

    if mode == "native":
        agent, text = agent_on(model_class, output_type=NativeOutput(Person)), AUSTEN
    else:
        agent, text = agent_on(model_class, output_type=Person), f"/tool final_result {AUSTEN}"

    assert agent.run_sync(text).output == Person(name="Jane Austen", born=1775)


def test_runs_chained_by_previous_response_id_are_stored_once(agent_on, client, server):
    agent = agent_on("OpenAIResponsesModel", model_settings={"openai_previous_response_id": "auto"})

    first = agent.run_sync("hello")
    second = agent.run_sync("again", message_history=first.all_messages())

    assert second.output == "again"
    ids = [m.provider_response_id for m in second.all_messages() if m.kind == "response"]
    inputs = client.responses.input_items.list(ids[1], order="asc")
    assert [item_summary(item) for item in inputs] == [("message", "user", "again")]
    session = conversation_of(client, ids[0])
    assert conversation_of(client, ids[1]) == session
    assert texts(server, session) == [
        ("user", "hello"),
        ("assistant", "hello"),
        ("user", "again"),
        ("assistant", "again"),
    ]


def test_runs_in_a_conversation_add_only_their_own_items(agent_on, client):
    conversation = client.conversations.create().id
    settings = {"openai_conversation_id": conversation}
    agent = agent_on("OpenAIResponsesModel", model_settings=settings)

    first = agent.run_sync("hello")
    second = agent.run_sync("again", message_history=first.all_messages())

    assert second.output == "again"
    listed = client.conversations.items.list(conversation, order="asc")
    assert [item_summary(item) for item in listed] == [
        ("message", "user", "hello"),
        ("message", "assistant", "hello"),
        ("message", "user", "again"),
        ("message", "assistant", "again"),
    ]
