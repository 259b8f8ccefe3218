"""The HTTP layer over httpx2: one client per provider, entry-point providers, errors."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from foliko_cli.errors import ContextOverflowError, ModelError, UnknownModelError, UsageError
from foliko_cli.models import (
    BUILTIN_PROVIDERS,
    ENTRY_POINT_GROUP,
    build_model,
    model_spec,
    plugin_providers,
    resolve_model,
)
from foliko_cli.models.base import ModelProvider, ModelRequest, ModelResponse
from foliko_cli.models.echo import EchoModel
from foliko_cli.models.http import overflow_window
from foliko_cli.service.facade import Foliko

from .mock_transport import Script, chat_reply, json_response, llama_overflow

ENV = {"OPENAI_BASE_URL": "http://llm.test/v1", "OPENAI_API_KEY": "k"}
CHAT = "/v1/chat/completions"


def provider(script: Script, name: str = "openai:m", configured=None):
    return build_model(model_spec(name, configured, ENV), ENV, transport=script.transport)


def run(coroutine):
    return asyncio.run(coroutine)


def test_one_client_serves_every_step_and_turn_until_aclose(foliko_home: Path):
    script = Script()
    call = {"id": "c1", "type": "function"}
    call["function"] = {"name": "set_variable", "arguments": '{"key": "a", "value": 1}'}
    script.queue(CHAT, chat_reply("", tool_calls=[call], finish_reason="tool_calls"))
    script.on(CHAT, chat_reply("done"))
    model = provider(script)

    with Foliko("sqlite", model, home=foliko_home) as foliko:
        foliko.chat("s", "first")
        client = model.client._client
        foliko.chat("s", "second")
        assert model.client._client is client, "the same client across turns"
    assert len(script.bodies(CHAT)) == 3
    assert client.is_closed, "closing the facade closes the provider's client"


def test_aclose_is_a_no_op_by_default_and_a_closed_provider_opens_again():
    assert run(EchoModel().aclose()) is None
    script = Script()
    script.on(CHAT, chat_reply("again"))
    model = provider(script)

    async def twice():
        first = await model.generate(ModelRequest([{"role": "user", "content": "hi"}]))
        await model.aclose()
        second = await model.generate(ModelRequest([{"role": "user", "content": "hi"}]))
        await model.aclose()
        return first.text, second.text

    assert run(twice()) == ("again", "again")


def test_the_built_in_providers_are_the_installed_entry_points():
    installed = {name: ep.value for name, ep in plugin_providers().items()}
    assert {k: installed.get(k) for k in BUILTIN_PROVIDERS} == BUILTIN_PROVIDERS


class PluginModel(ModelProvider):
    def __init__(self, spec, key):
        self.name = f"plug:{spec.model}"
        self.key = key

    async def generate(self, request):
        return ModelResponse(text=f"plugin says {request.messages[-1]['content']}")


def test_a_provider_plugin_is_found_through_its_entry_point(monkeypatch, foliko_home: Path):
    entry = SimpleNamespace(name="plug", value="x:build", load=lambda: PluginModel)
    monkeypatch.setattr("foliko_cli.models.plugin_providers", lambda: {"plug": entry})

    model = resolve_model("plug:tiny", {}, {})
    with Foliko("sqlite", model, home=foliko_home) as foliko:
        assert foliko.chat("p", "hi").message == "plugin says hi"
    assert model.name == "plug:tiny"


def test_a_broken_or_missing_provider_plugin_is_a_usage_error(monkeypatch):
    def broken():
        raise ImportError("no module named plug_pkg")

    entry = SimpleNamespace(name="plug", value="plug_pkg:build", load=broken)
    monkeypatch.setattr("foliko_cli.models.plugin_providers", lambda: {"plug": entry})
    with pytest.raises(UsageError, match=r"plug.*failed to load.*reinstall"):
        resolve_model("plug:tiny", {}, {})
    monkeypatch.setattr("foliko_cli.models.plugin_providers", lambda: {})
    with pytest.raises(UnknownModelError):
        resolve_model("plug:tiny", {}, {})
    assert ENTRY_POINT_GROUP == "foliko.models"


def test_failures_name_the_fix_and_no_cli_flag(monkeypatch):
    monkeypatch.setattr("foliko_cli.models.http.BASE_DELAY", 0.001)
    script = Script()
    script.on(CHAT, json_response({"error": {"message": "overloaded"}}, 503))
    model = provider(script)

    with pytest.raises(ModelError) as failure:
        run(model.generate(ModelRequest([{"role": "user", "content": "hi"}])))
    assert "raise the turn's timeout" in str(failure.value)
    assert "--" not in str(failure.value)

    expired = ModelRequest([{"role": "user", "content": "hi"}], deadline=0.0)
    with pytest.raises(ModelError) as late:
        run(model.generate(expired))
    assert "raise the turn's timeout" in str(late.value) and "--" not in str(late.value)


@pytest.mark.parametrize(
    ("status", "body", "window"),
    [
        (
            400,
            b'{"error":{"code":400,"message":"request (1531 tokens) exceeds the available '
            b'context size (1024 tokens), try increasing it","type":"exceed_context_size_error",'
            b'"n_prompt_tokens":1531,"n_ctx":1024}}',
            1024,
        ),
        (
            400,
            b'{"error":{"message":"This model\'s maximum context length is 8192 tokens. However, '
            b'your messages resulted in 9000 tokens.","type":"invalid_request_error",'
            b'"param":"messages","code":"context_length_exceeded"}}',
            8192,
        ),
        (
            400,
            b'{"type":"error","error":{"type":"invalid_request_error",'
            b'"message":"prompt is too long: 210000 tokens > 200000 maximum"}}',
            200000,
        ),
        (400, b'{"error":{"message":"prompt is too long"}}', None),
    ],
)
def test_overflow_answers_are_recognised_with_their_window(status, body, window):
    assert overflow_window(status, body) == (True, window)


@pytest.mark.parametrize(
    ("status", "body"),
    [(400, b'{"error":{"message":"unknown parameter: tempreature"}}'), (500, b"context size")],
)
def test_other_errors_are_not_overflows(status, body):
    assert overflow_window(status, body) == (False, None)


def test_an_overflow_answer_raises_the_typed_error_with_the_window():
    script = Script()
    script.on(CHAT, llama_overflow(2000, 1024))
    model = provider(script)

    with pytest.raises(ContextOverflowError) as failure:
        run(model.generate(ModelRequest([{"role": "user", "content": "hi"}])))
    assert failure.value.window == 1024
    assert failure.value.exit_code == 1
    assert len(script.sent) == 1, "an overflow is not retried by the HTTP layer"
