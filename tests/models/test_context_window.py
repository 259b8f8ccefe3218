"""Knowing the context window (config, FOLIKO_CONTEXT_WINDOW, the server, the table)
and recovering when the server says a prompt does not fit."""

from __future__ import annotations

import asyncio
import os
import stat
import time
from pathlib import Path

import orjson
import pytest

from foliko_cli.engine.framework import Framework
from foliko_cli.engine.handler import AgentChatHandler
from foliko_cli.errors import ContextOverflowError
from foliko_cli.models import FALLBACK_CONTEXT_WINDOW, build_model, discovery, model_spec
from foliko_cli.service.facade import Foliko

from .mock_transport import Script, chat_reply, json_response, llama_overflow

ENV = {"OPENAI_BASE_URL": "http://llm.test/v1", "OPENAI_API_KEY": "k"}
CHAT = "/v1/chat/completions"
LLAMA_MODELS = {"data": [{"id": "/models/x.gguf", "meta": {"n_ctx": 4096, "n_ctx_train": 8192}}]}


def provider(script: Script, name="openai:local-model", configured=None, env=ENV):
    return build_model(model_spec(name, configured, env), env, transport=script.transport)


def window_of(model, home: Path, context_window=None) -> int:
    handler = AgentChatHandler(Framework("memory", home=home), model, context_window=context_window)
    asyncio.run(handler.learn_context_window())
    return handler.compressor.budget


def test_llama_cpp_reports_the_window_of_a_slot_in_props(tmp_path: Path):
    script = Script()
    script.on("/v1/models", json_response(LLAMA_MODELS))
    script.on("/props", json_response({"default_generation_settings": {"n_ctx": 1024}}))

    assert window_of(provider(script), tmp_path) == 1024


def test_llama_cpp_without_props_gives_the_window_in_its_model_list(tmp_path: Path):
    script = Script()
    script.on("/v1/models", json_response(LLAMA_MODELS))

    assert window_of(provider(script), tmp_path) == 4096


def test_vllm_reports_max_model_len(tmp_path: Path):
    script = Script()
    listing = {"data": [{"id": "other"}, {"id": "local-model", "max_model_len": 32768}]}
    script.on("/v1/models", json_response(listing))

    assert window_of(provider(script), tmp_path) == 32768


def test_ollama_reports_context_length_in_api_show(tmp_path: Path):
    script = Script()
    script.on("/api/show", json_response({"model_info": {"llama.context_length": 131072}}))
    env = {"OLLAMA_HOST": "http://ollama.test:11434"}

    assert window_of(provider(script, "ollama:llama3.2", env=env), tmp_path) == 131072
    (sent,) = [s for s in script.sent if s.path == "/api/show"]
    assert sent.method == "POST" and sent.body == {"model": "llama3.2"}


def test_the_answer_is_cached_for_a_day_in_a_private_file(tmp_path: Path):
    script = Script()
    script.on("/v1/models", json_response(LLAMA_MODELS))
    assert window_of(provider(script), tmp_path) == 4096
    asked = len(script.sent)

    assert window_of(provider(script), tmp_path) == 4096
    assert len(script.sent) == asked, "the second process reads the cache"
    cache = tmp_path / discovery.CACHE_FILE
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o600
    entries = orjson.loads(cache.read_bytes())
    assert list(entries) == ["http://llm.test/v1 local-model"]

    key = "http://llm.test/v1 local-model"
    later = time.time() + discovery.CACHE_SECONDS + 1
    assert discovery.read_cached(tmp_path, key) == 4096
    assert discovery.read_cached(tmp_path, key, now=later) is None


def test_a_server_that_fails_or_hangs_leaves_the_known_window(tmp_path, monkeypatch):
    monkeypatch.setattr(discovery, "DISCOVERY_TIMEOUT", 0.05)
    hung = asyncio.Event()

    async def hang(sent):
        await hung.wait()

    script = Script()
    script.on("/v1/models", hang)
    started = time.monotonic()
    assert window_of(provider(script, "openai:gpt-4o"), tmp_path) == 128_000
    assert time.monotonic() - started < 5

    broken = Script()
    broken.on("/v1/models", json_response({"error": "nope"}, 500))
    assert window_of(provider(broken), tmp_path) == FALLBACK_CONTEXT_WINDOW
    assert not (tmp_path / discovery.CACHE_FILE).exists(), "failures are not cached"


def test_the_configured_window_beats_the_environment_which_beats_the_server(tmp_path):
    script = Script()
    script.on("/v1/models", json_response(LLAMA_MODELS))
    configured = {"small": {"model": "openai:local-model", "context_window": 2000}}

    assert window_of(provider(script, "small", configured), tmp_path, context_window=3000) == 2000
    assert window_of(provider(script), tmp_path, context_window=3000) == 3000
    assert script.sent == [], "a known window asks no server"
    assert window_of(provider(script), tmp_path) == 4096


def test_hosted_openai_is_not_asked_and_uses_the_table(tmp_path: Path):
    script = Script()
    env = {"OPENAI_API_KEY": "k"}
    model = provider(script, "openai:gpt-4o-mini", env=env)

    assert window_of(model, tmp_path) == 128_000
    assert script.sent == []


# overflow recovery


def seeded(foliko: Foliko, session_id: str, turns: int) -> None:
    for index in range(turns):
        foliko.chat(session_id, f"turn {index}: " + "words " * 150)


def test_an_overflow_teaches_the_window_compresses_and_retries_once(foliko_home: Path):
    script = Script()
    script.on(CHAT, chat_reply("fine"))
    model = provider(script)
    with Foliko("sqlite", model, home=foliko_home, context_window=100_000) as foliko:
        seeded(foliko, "s", 4)
        before = len(script.bodies(CHAT))
        script.queue(CHAT, llama_overflow(1200, 700), chat_reply("a summary"), chat_reply("after"))

        result = foliko.chat("s", "and now?")
        record = foliko.get_session("s")

    assert result.message == "after"
    sent = script.bodies(CHAT)[before:]
    assert len(sent) == 3, "the refused request, the summary, the retry"
    assert len(sent[2]["messages"]) < len(sent[0]["messages"])
    assert "a summary" in sent[2]["messages"][0]["content"]
    assert sent[2]["max_tokens"] == 700 // 4, "the reply bound follows the learned window"
    assert record.metadata["compression_count"] == 1
    assert [m["content"] for m in record.messages][-2:] == ["and now?", "after"]
    assert len(record.messages) == 10, "the stored history is whole"
    asked = len(script.sent)
    assert window_of(provider(script), foliko_home) == 700, "the next process knows it"
    assert len(script.sent) == asked


def test_a_message_that_alone_does_not_fit_fails_in_one_line_and_saves_nothing(foliko_home):
    script = Script()
    script.on(CHAT, chat_reply("fine"))
    model = provider(script)
    with Foliko("sqlite", model, home=foliko_home, context_window=100_000) as foliko:
        seeded(foliko, "s", 1)
        before = foliko.get_session("s")
        script.queue(CHAT, llama_overflow(3000, 1024))

        with pytest.raises(ContextOverflowError) as failure:
            foliko.chat("s", "x" * 8000)
        after = foliko.get_session("s")

    message = str(failure.value)
    assert "\n" not in message
    assert "about 2,000 tokens" in message and "1,024 tokens" in message
    assert "shorten the message" in message
    assert failure.value.exit_code == 1
    assert after == before


def test_a_second_overflow_after_compressing_is_not_retried_again(foliko_home: Path):
    script = Script()
    script.on(CHAT, chat_reply("fine"))
    model = provider(script)
    with Foliko("sqlite", model, home=foliko_home, context_window=100_000) as foliko:
        seeded(foliko, "s", 4)
        before = len(script.bodies(CHAT))
        script.queue(CHAT, llama_overflow(1200, 700), chat_reply("sum"), llama_overflow(900, 700))

        with pytest.raises(ContextOverflowError, match="does not fit"):
            foliko.chat("s", "and now?")
        assert len(foliko.get_session("s").messages) == 8

    assert len(script.bodies(CHAT)) - before == 3


def test_the_cli_exits_1_with_the_sizes(run_foliko, fake_server, openai_env):
    from .fake_servers import Reply

    body = orjson.loads(llama_overflow(3000, 1024).content)
    fake_server.queue(Reply(400, body=body))

    result = run_foliko("chat", "-s", "big", "y" * 8000, env=openai_env)

    assert result.returncode == 1
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "does not fit" in lines[0] and "1,024 tokens" in lines[0]
    assert run_foliko("sessions", "show", "big").returncode == 2
