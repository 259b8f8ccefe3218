"""Structured output through ``foliko serve``: Chat Completions' ``response_format``
and the Responses API's ``text.format``, as the official SDK sends them."""

from __future__ import annotations

import json

import openai
import pytest
from models.fake_servers import OPENAI_KEY, openai_message
from pydantic import BaseModel

from .servers import run_cli


class Person(BaseModel):
    name: str
    born: int


AUSTEN = '{"name": "Jane Austen", "born": 1775}'


def stored_messages(server, session_id: str) -> list[dict]:
    result = run_cli(server.home, "sessions", "show", session_id, "--json")
    return json.loads(result.stdout)["messages"] if result.returncode == 0 else []


def test_the_sdks_parse_gets_a_checked_reply_in_a_session(server, client):
    reply = client.chat.completions.parse(
        model="echo",
        messages=[{"role": "user", "content": AUSTEN}],
        response_format=Person,
        extra_headers={"X-Session-Id": "people"},
    )

    assert reply.choices[0].message.parsed == Person(name="Jane Austen", born=1775)
    assert [m["content"] for m in stored_messages(server, "people")] == [AUSTEN, AUSTEN]


def test_a_reply_that_breaks_the_schema_is_a_502_and_nothing_is_saved(server, client):
    client.chat.completions.parse(
        model="echo",
        messages=[{"role": "user", "content": AUSTEN}],
        response_format=Person,
        extra_headers={"X-Session-Id": "strict"},
    )

    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.parse(
            model="echo",
            messages=[{"role": "user", "content": '{"name": "Jane"}'}],
            response_format=Person,
            extra_headers={"X-Session-Id": "strict"},
        )

    assert caught.value.status_code == 502
    assert caught.value.body["code"] == "invalid_reply"
    assert "'born' is a required property" in caught.value.body["message"]
    assert len(stored_messages(server, "strict")) == 2


def test_json_mode_asks_for_an_object(server, client):
    reply = client.chat.completions.create(
        model="echo",
        messages=[{"role": "user", "content": '{"ok": true}'}],
        response_format={"type": "json_object"},
    )
    assert json.loads(reply.choices[0].message.content) == {"ok": True}

    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(
            model="echo",
            messages=[{"role": "user", "content": "[1, 2]"}],
            response_format={"type": "json_object"},
        )
    assert caught.value.body["code"] == "invalid_reply"


def test_a_plain_text_format_asks_for_nothing(client):
    reply = client.chat.completions.create(
        model="echo",
        messages=[{"role": "user", "content": "not json"}],
        response_format={"type": "text"},
    )
    assert reply.choices[0].message.content == "not json"


@pytest.mark.parametrize(
    ("response_format", "says"),
    [
        ({"type": "xml"}, "response_format.type 'xml' is not supported"),
        ({"type": "json_schema"}, "response_format.json_schema.schema is required"),
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}},
            "response_format.json_schema.schema is not a valid JSON Schema",
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": [1]}},
            "response_format.json_schema.schema must be a JSON object",
        ),
        ("json", "response_format must be an object"),
    ],
)
def test_a_bad_format_is_a_400_naming_it_and_runs_no_turn(server, client, response_format, says):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="echo",
            messages=[{"role": "user", "content": AUSTEN}],
            response_format=response_format,
            extra_headers={"X-Session-Id": "bad-format"},
        )
    assert says in caught.value.body["message"]
    assert caught.value.body["param"] == "response_format"
    assert stored_messages(server, "bad-format") == []


def test_more_than_one_choice_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="echo", messages=[{"role": "user", "content": "hi"}], n=2
        )
    assert caught.value.body["param"] == "n"
    one = client.chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "hi"}], n=1
    )
    assert [c.message.content for c in one.choices] == ["hi"]


def test_a_streamed_reply_is_checked_before_the_turn_is_saved(server, client):
    good = client.chat.completions.create(
        model="echo",
        messages=[{"role": "user", "content": AUSTEN}],
        response_format={"type": "json_object"},
        stream=True,
        extra_headers={"X-Session-Id": "streamed"},
    )
    assert "".join(c.choices[0].delta.content or "" for c in good if c.choices) == AUSTEN

    bad = client.chat.completions.create(
        model="echo",
        messages=[{"role": "user", "content": "not json"}],
        response_format={"type": "json_object"},
        stream=True,
        extra_headers={"X-Session-Id": "streamed"},
    )
    with pytest.raises(openai.APIError, match="not JSON"):
        list(bad)
    assert len(stored_messages(server, "streamed")) == 2


def test_the_responses_api_takes_text_format_and_says_it_back(client):
    response = client.responses.parse(
        model="echo", input='{"name": "Emily Bronte", "born": 1818}', text_format=Person
    )

    assert response.output_parsed == Person(name="Emily Bronte", born=1818)
    assert response.text.format.type == "json_schema"
    assert response.text.format.name == "Person"

    with pytest.raises(openai.InternalServerError) as caught:
        client.responses.parse(model="echo", input='{"born": 1818}', text_format=Person)
    assert caught.value.body["code"] == "invalid_reply"
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="echo", input="x", text={"format": {"type": "json_schema"}})
    assert refused.value.body["param"] == "text.format"


def test_the_schema_reaches_an_openai_compatible_model(start_server, model_server):
    model_server.queue(openai_message(AUSTEN), openai_message('{"x": 1}'))
    env = {"OPENAI_BASE_URL": f"{model_server.url}/v1", "OPENAI_API_KEY": OPENAI_KEY}
    server = start_server(env=env)
    client = openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0)

    parsed = client.chat.completions.parse(
        model="openai:gpt", messages=[{"role": "user", "content": "who?"}], response_format=Person
    )
    client.responses.create(
        model="openai:gpt", input="any object", text={"format": {"type": "json_object"}}
    )

    assert parsed.choices[0].message.parsed == Person(name="Jane Austen", born=1775)
    first, second = (request.body["response_format"] for request in model_server.requests)
    assert first["type"] == "json_schema"
    assert first["json_schema"]["schema"] == Person.model_json_schema() | {
        "additionalProperties": False
    }
    assert second == {
        "type": "json_schema",
        "json_schema": {"name": "reply", "schema": {"type": "object"}},
    }


LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a word up.",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
    },
}


def test_tool_choice_reaches_the_model_in_its_terms(start_server, model_server):
    model_server.queue(openai_message("one"), openai_message("two"))
    env = {"OPENAI_BASE_URL": f"{model_server.url}/v1", "OPENAI_API_KEY": OPENAI_KEY}
    server = start_server(env=env)
    client = openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0)

    client.chat.completions.create(
        model="openai:gpt",
        messages=[{"role": "user", "content": "define owl"}],
        tools=[LOOKUP],
        tool_choice={"type": "function", "function": {"name": "lookup"}},
    )
    client.responses.create(
        model="openai:gpt",
        input="define owl",
        tools=[{"type": "function", **LOOKUP["function"]}],
        tool_choice="required",
    )

    first, second = (request.body["tool_choice"] for request in model_server.requests)
    assert first == {"type": "function", "function": {"name": "lookup"}}
    assert second == "required"


@pytest.mark.parametrize(
    ("tool_choice", "says"),
    [
        ({"type": "allowed_tools", "tools": []}, "tool_choice must be auto, none, required"),
        ({"type": "function", "function": {"name": "other"}}, "tool_choice names 'other'"),
    ],
)
def test_a_bad_tool_choice_is_a_400(client, tool_choice, says):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="echo",
            messages=[{"role": "user", "content": "hi"}],
            tools=[LOOKUP],
            tool_choice=tool_choice,
        )
    assert says in caught.value.body["message"]
