"""Model providers: the offline echo model, resolving names, default streaming (SPEC F9)."""

from __future__ import annotations

import asyncio

import pytest

from foliko_cli.errors import ExitCode, UnknownModelError, UsageError
from foliko_cli.models import DEFAULT_MODEL, resolve_model
from foliko_cli.models.base import ModelProvider, ModelRequest, ModelResponse, StreamEvent, ToolCall
from foliko_cli.models.echo import EchoModel


def ask(*messages: dict, system: str | None = None) -> ModelResponse:
    return asyncio.run(EchoModel().generate(ModelRequest(list(messages), system)))


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def test_reply_contains_the_last_user_message_verbatim():
    text = "Grüße, 世界!\n  two lines\twith tabs and {json: true} /not-a-command"
    response = ask(user("an earlier message"), {"role": "assistant", "content": "x"}, user(text))
    assert text in response.text
    assert "an earlier message" not in response.text
    assert response.tool_calls == []
    assert response.finish_reason == "stop"


def test_reply_is_deterministic():
    assert ask(user("same")).text == ask(user("same")).text


def test_empty_conversation_gets_an_empty_reply():
    response = ask()
    assert response.text == ""
    assert response.tool_calls == []


def test_tool_command_emits_a_tool_call_with_parsed_arguments():
    response = ask(user('/tool set_variable {"key": "k", "value": [1, {"x": null}]}'))
    (call,) = response.tool_calls
    assert isinstance(call, ToolCall)
    assert call.name == "set_variable"
    assert call.arguments == {"key": "k", "value": [1, {"x": None}]}
    assert call.id.startswith("call_")
    assert response.finish_reason == "tool_calls"


def test_tool_command_variants():
    assert ask(user("/tool get_session_info")).tool_calls[0].arguments == {}
    assert ask(user("  /tool get_session_info   ")).tool_calls[0].name == "get_session_info"
    multiline = ask(user('/tool t {\n  "a": 1,\n  "b": 2\n}')).tool_calls[0]
    assert multiline.arguments == {"a": 1, "b": 2}
    assert ask(user("/tool t [1, 2]")).tool_calls[0].arguments == [1, 2]
    assert ask(user("please /tool t {}")).tool_calls == [], "only a message that starts with it"


def test_tool_call_ids_are_unique():
    ids = {ask(user("/tool t {}")).tool_calls[0].id for _ in range(50)}
    assert len(ids) == 50


def test_invalid_json_arguments_are_passed_through_as_a_string():
    (call,) = ask(user("/tool t {not json}")).tool_calls
    assert call.name == "t"
    assert call.arguments == "{not json}"


def test_after_tool_results_it_answers_with_them():
    response = ask(
        user("/tool a {}"),
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "name": "a", "arguments": {}}],
        },
        {"role": "tool", "content": '{"ok":true}', "tool_call_id": "c1", "name": "a"},
        {"role": "tool", "content": "second result", "tool_call_id": "c2", "name": "b"},
    )
    assert response.tool_calls == []
    assert response.finish_reason == "stop"
    assert response.text == 'a returned: {"ok":true}\nb returned: second result'


def test_only_the_latest_tool_results_are_reported():
    response = ask(
        {"role": "tool", "content": "old", "tool_call_id": "c0", "name": "old_tool"},
        user("/tool a {}"),
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "a"}]},
        {"role": "tool", "content": "new", "tool_call_id": "c1", "name": "a"},
    )
    assert response.text == "a returned: new"


def test_usage_is_reported():
    response = ask(user("x" * 40), system="y" * 40)
    assert set(response.usage) == {"input_tokens", "output_tokens"}
    assert response.usage["input_tokens"] >= 20
    assert response.usage["output_tokens"] >= 10
    assert all(isinstance(v, int) for v in response.usage.values())
    assert ask(user("x" * 40)).usage["input_tokens"] < response.usage["input_tokens"]


# resolving model names


def test_resolve_echo_and_the_default():
    assert DEFAULT_MODEL == "echo"
    assert isinstance(resolve_model("echo"), EchoModel)
    assert isinstance(resolve_model(None), EchoModel)
    assert isinstance(resolve_model(" echo "), EchoModel)
    assert resolve_model("echo").name == "echo"


def test_echo_with_a_model_part_is_an_echo_model_or_a_usage_error():
    try:
        model = resolve_model("echo:anything")
    except UnknownModelError as exc:
        assert exc.exit_code == ExitCode.USAGE
    else:
        assert isinstance(model, EchoModel)


def test_resolve_passes_a_provider_through():
    provider = EchoModel()
    assert resolve_model(provider) is provider


@pytest.mark.parametrize("name", ["gpt-nonsense", "nosuchprovider:model", "echoes"])
def test_unknown_model_is_a_usage_error(name):
    with pytest.raises(UnknownModelError) as caught:
        resolve_model(name)
    assert isinstance(caught.value, UsageError)
    assert caught.value.exit_code == ExitCode.USAGE == 2
    assert name.strip() in str(caught.value)
    assert "echo" in str(caught.value), "the message names a model that works"


# the default stream


class OneShot(ModelProvider):
    name = "oneshot"

    def __init__(self, response: ModelResponse):
        self.response = response

    async def generate(self, request: ModelRequest) -> ModelResponse:
        return self.response


def stream_all(provider: ModelProvider) -> list[StreamEvent]:
    async def collect():
        return [event async for event in provider.stream(ModelRequest([user("hi")]))]

    return asyncio.run(collect())


def test_default_stream_yields_delta_then_done():
    response = ModelResponse(text="whole answer", usage={"input_tokens": 1})
    events = stream_all(OneShot(response))
    assert [e.type for e in events] == ["delta", "done"]
    assert events[0].text == "whole answer"
    assert events[1].response is response


def test_default_stream_without_text_yields_only_done():
    response = ModelResponse(text="", tool_calls=[ToolCall("c", "t", {})])
    events = stream_all(OneShot(response))
    assert [e.type for e in events] == ["done"]
    assert events[0].response is response


def test_echo_streams_through_the_default():
    events = stream_all(EchoModel())
    assert [e.type for e in events] == ["delta", "done"]
    assert events[0].text == "hi" == events[1].response.text


def test_provider_contract_is_abstract():
    with pytest.raises(TypeError):
        ModelProvider()  # type: ignore[abstract]
