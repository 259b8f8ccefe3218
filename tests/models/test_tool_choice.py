"""The ``tool_choice`` option: a mode or a tool to call, said in each provider's
terms, and sent with a turn's first model call only."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from foliko_cli.errors import UsageError
from foliko_cli.models.base import ModelRequest
from foliko_cli.service.facade import Foliko

from .mock_transport import Script, chat_reply, json_response
from .test_options import CHAT, MESSAGES, PERSON, provider, turn

ANTHROPIC_ENV = {"ANTHROPIC_BASE_URL": "http://a.test", "ANTHROPIC_API_KEY": "k"}
INFO_CALL = {
    "id": "c1",
    "type": "function",
    "function": {"name": "get_session_info", "arguments": "{}"},
}


def tool_then_text(script: Script) -> None:
    script.queue(CHAT, chat_reply("", tool_calls=[INFO_CALL]), chat_reply("done"))


def anthropic_tool_then_text(script: Script) -> None:
    use = {"type": "tool_use", "id": "t1", "name": "get_session_info", "input": {}}
    text = {"type": "text", "text": "done"}
    script.queue(
        MESSAGES,
        json_response({"content": [use], "stop_reason": "tool_use"}),
        json_response({"content": [text], "stop_reason": "end_turn"}),
    )


def test_a_forced_call_holds_for_the_first_model_call_only(foliko_home: Path):
    script = Script()
    tool_then_text(script)

    result, record = turn(provider(script), foliko_home, options={"tool_choice": "required"})

    assert [body["tool_choice"] for body in script.bodies(CHAT)] == ["required", "auto"]
    assert result.message == "done" and result.step_count == 2
    assert [m["role"] for m in record.messages] == ["user", "assistant", "tool", "assistant"]


def test_a_tool_named_as_the_choice_becomes_a_function_choice(foliko_home: Path):
    script = Script()
    tool_then_text(script)

    turn(provider(script), foliko_home, options={"tool_choice": "get_session_info"})

    first, second = script.bodies(CHAT)
    assert first["tool_choice"] == {"type": "function", "function": {"name": "get_session_info"}}
    assert second["tool_choice"] == "auto"


def test_a_configured_choice_also_holds_for_the_first_call_only(foliko_home: Path):
    script = Script()
    tool_then_text(script)
    configured = {"forced": {"model": "openai:m", "options": {"tool_choice": "required"}}}

    turn(provider(script, "forced", configured), foliko_home)

    assert [body["tool_choice"] for body in script.bodies(CHAT)] == ["required", "auto"]


def test_without_a_choice_none_is_sent(foliko_home: Path):
    script = Script()
    script.on(CHAT, chat_reply())

    turn(provider(script), foliko_home)

    assert "tool_choice" not in script.bodies(CHAT)[0]


@pytest.mark.parametrize(
    ("choice", "says"),
    [
        ("lookup", "tool_choice names 'lookup', which is not one of this turn's tools"),
        ({"type": "function"}, "is neither auto, none, required nor a tool's name"),
    ],
)
def test_a_bad_choice_is_a_usage_error_before_anything_is_sent(foliko_home: Path, choice, says):
    script = Script()
    script.on(CHAT, chat_reply())

    with pytest.raises(UsageError, match=says):
        turn(provider(script), foliko_home, options={"tool_choice": choice})

    assert script.bodies(CHAT) == []
    with Foliko("sqlite", "echo", home=foliko_home) as foliko:
        assert foliko.list_sessions() == []


def test_openai_gets_no_choice_when_no_tools_are_offered():
    script = Script()
    script.on(CHAT, chat_reply())
    request = ModelRequest(
        messages=[{"role": "user", "content": "hi"}], options={"tool_choice": "none"}
    )

    asyncio.run(provider(script).generate(request))

    assert "tool_choice" not in script.bodies(CHAT)[0]


@pytest.mark.parametrize(
    ("choice", "first"),
    [
        ("required", {"type": "any"}),
        ("auto", {"type": "auto"}),
        ("get_session_info", {"type": "tool", "name": "get_session_info"}),
    ],
)
def test_anthropic_says_the_choice_in_its_terms(foliko_home: Path, choice, first):
    script = Script()
    anthropic_tool_then_text(script)

    turn(
        provider(script, "anthropic:claude-x", env=ANTHROPIC_ENV),
        foliko_home,
        options={"tool_choice": choice},
    )

    bodies = script.bodies(MESSAGES)
    assert [body["tool_choice"] for body in bodies] == [first, {"type": "auto"}]


def test_anthropic_none_keeps_the_model_from_tools(foliko_home: Path):
    script = Script()
    text = {"type": "text", "text": "plain"}
    script.on(MESSAGES, json_response({"content": [text], "stop_reason": "end_turn"}))

    turn(
        provider(script, "anthropic:claude-x", env=ANTHROPIC_ENV),
        foliko_home,
        options={"tool_choice": "none"},
    )

    assert script.bodies(MESSAGES)[0]["tool_choice"] == {"type": "none"}


def test_anthropic_a_schema_keeps_its_forced_reply_tool(foliko_home: Path):
    from foliko_cli.models.anthropic import REPLY_TOOL

    script = Script()
    use = {"type": "tool_use", "id": "t1", "name": REPLY_TOOL, "input": {"name": "Ada", "age": 36}}
    script.on(MESSAGES, json_response({"content": [use], "stop_reason": "tool_use"}))

    turn(
        provider(script, "anthropic:claude-x", env=ANTHROPIC_ENV),
        foliko_home,
        schema=PERSON,
        options={"tool_choice": "required"},
    )

    assert script.bodies(MESSAGES)[0]["tool_choice"] == {"type": "tool", "name": REPLY_TOOL}
