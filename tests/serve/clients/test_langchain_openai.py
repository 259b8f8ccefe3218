"""LangChain's ``ChatOpenAI`` (``langchain-openai``) on ``foliko serve``: message
lists, tools, structured output, the Responses API and its response chains."""

from __future__ import annotations

import functools

import pytest
from models.fake_servers import openai_message
from pydantic import BaseModel

from .conftest import UPSTREAM_MODEL, conversation_of, item_summary, stored_messages, tool_shape

pytestmark = pytest.mark.xdist_group("clients-langchain-openai")

ADD = '/tool add {"a": 2, "b": 3}'


class Person(BaseModel):
    name: str
    born: int


@pytest.fixture(scope="module")
def chat_model(server):
    from langchain_openai import ChatOpenAI

    return functools.partial(
        ChatOpenAI, model="echo", base_url=server.base_url, api_key="none", max_retries=0
    )


@pytest.fixture(scope="module")
def add_tool():
    from langchain_core.tools import tool

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    return add


def test_a_message_list_reaches_the_model_whole(chat_model, upstream):
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

    upstream.queue(openai_message("Paris"))
    model = chat_model(model=UPSTREAM_MODEL)

    reply = model.invoke(
        [
            SystemMessage("Answer with one word."),
            HumanMessage("Capital of Italy?"),
            AIMessage("Rome"),
            HumanMessage("And of France?"),
        ]
    )

    assert reply.content == "Paris"
    (request,) = upstream.requests
    assert [tool_shape(m) for m in request.body["messages"]] == [
        ("system", "Answer with one word."),
        ("user", "Capital of Italy?"),
        ("assistant", "Rome"),
        ("user", "And of France?"),
    ]


def test_a_history_answers_its_last_message(chat_model):
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

    reply = chat_model().invoke(
        [SystemMessage("Be brief."), HumanMessage("a"), AIMessage("b"), HumanMessage("c")]
    )

    assert reply.content == "c"
    assert reply.response_metadata["finish_reason"] == "stop"


@pytest.mark.parametrize("use_responses_api", [False, True])
@pytest.mark.parametrize("streamed", [False, True])
def test_a_bound_tool_round_trips(chat_model, add_tool, use_responses_api, streamed):
    from langchain_core.messages import HumanMessage, ToolMessage

    model = chat_model(use_responses_api=use_responses_api).bind_tools([add_tool])

    def ask(messages):
        if not streamed:
            return model.invoke(messages)
        return functools.reduce(lambda whole, chunk: whole + chunk, model.stream(messages))

    history = [HumanMessage(ADD)]
    call = ask(history)
    assert [(c["name"], c["args"]) for c in call.tool_calls] == [("add", {"a": 2, "b": 3})]
    output = add_tool.invoke(call.tool_calls[0]["args"])
    history += [call, ToolMessage(str(output), tool_call_id=call.tool_calls[0]["id"])]

    assert ask(history).text == "add returned: 5"


@pytest.mark.parametrize("use_responses_api", [False, True])
@pytest.mark.parametrize(
    ("method", "text"),
    [
        ("json_schema", '{"name": "Jane Austen", "born": 1775}'),
        ("json_mode", '{"name": "Jane Austen", "born": 1775}'),
        ("function_calling", '/tool Person {"name": "Jane Austen", "born": 1775}'),
    ],
)
def test_structured_output_is_parsed_into_the_model(chat_model, use_responses_api, method, text):
    model = chat_model(use_responses_api=use_responses_api)
    structured = model.with_structured_output(Person, method=method)

    assert structured.invoke(text) == Person(name="Jane Austen", born=1775)


def test_the_responses_api_answers_a_history_with_its_new_reply_only(chat_model, client, server):
    from langchain_core.messages import AIMessage, HumanMessage

    model = chat_model(use_responses_api=True)

    reply = model.invoke([HumanMessage("a"), AIMessage("b"), HumanMessage("c")])
    streamed = "".join(chunk.text for chunk in model.stream("streamed words"))

    assert reply.text == "c"
    assert streamed == "streamed words"
    session = conversation_of(client, reply.response_metadata["id"])
    assert [(m["role"], m["content"]) for m in stored_messages(server, session)] == [
        ("user", "a"),
        ("assistant", "b"),
        ("user", "c"),
        ("assistant", "c"),
    ]


def test_previous_response_ids_chain_the_turns_in_one_session(chat_model, add_tool, client):
    from langchain_core.messages import HumanMessage, ToolMessage

    model = chat_model(use_previous_response_id=True).bind_tools([add_tool])

    history = [HumanMessage("one")]
    history.append(model.invoke(history))
    history.append(HumanMessage(ADD))
    call = model.invoke(history)
    history += [call, ToolMessage("5", tool_call_id=call.tool_calls[0]["id"])]
    last = model.invoke(history)

    assert history[1].text == "one"
    assert last.text == "add returned: 5"
    ids = [m.response_metadata["id"] for m in (history[1], call, last)]
    session = conversation_of(client, ids[0])
    assert {conversation_of(client, rid) for rid in ids} == {session}
    listed = client.conversations.items.list(session, order="asc")
    assert [item_summary(item)[::2] for item in listed] == [
        ("message", "one"),
        ("message", "one"),
        ("message", ADD),
        ("function_call", {"a": 2, "b": 3}),
        ("function_call_output", "5"),
        ("message", "add returned: 5"),
    ]
    inputs = client.responses.input_items.list(ids[2], order="asc")
    assert [item_summary(item)[::2] for item in inputs] == [("function_call_output", "5")]
