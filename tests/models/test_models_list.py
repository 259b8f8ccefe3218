"""``models list`` asks each reachable server what it serves; cancelled streams hang up."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx2
import orjson
import pytest
from trusting import trust

from foliko_cli.errors import TurnTimeoutError
from foliko_cli.models import build_model, model_spec
from foliko_cli.models.listing import served_models
from foliko_cli.service.facade import Foliko

from .fake_servers import free_port
from .mock_transport import Script


def listing(run_foliko, env) -> dict[str, dict]:
    result = run_foliko("models", "list", "--json", env=env)
    assert result.returncode == 0, result.stderr
    return {row["name"]: row for row in orjson.loads(result.stdout)}


def test_the_models_a_server_serves_are_listed_with_their_window(run_foliko, fake_server):
    fake_server.metadata["/v1/models"] = {
        "data": [
            {"id": "small.gguf", "meta": {"n_ctx": 1024, "n_ctx_train": 8192}},
            {"id": "big", "max_model_len": 32768},
        ]
    }
    env = {"OPENAI_BASE_URL": f"{fake_server.url}/v1", "OLLAMA_HOST": f"127.0.0.1:{free_port()}"}

    rows = listing(run_foliko, env)

    assert rows["openai:small.gguf"]["context_window"] == 1024
    assert rows["openai:big"]["context_window"] == 32768
    assert rows["openai:big"]["served"] is True and rows["openai:big"]["usable"] is True
    assert rows["openai:MODEL"]["usable"] is True
    assert rows["ollama:MODEL"]["usable"] is False
    assert "unreachable" in rows["ollama:MODEL"]["problem"]
    assert [p.path for p in fake_server.probes] == ["/v1/models", "/props"], (
        "llama.cpp's window is asked as a turn asks it (/props, a 404 here: then meta.n_ctx)"
    )


def test_ollama_lists_its_tags(run_foliko, fake_server):
    fake_server.metadata["/api/tags"] = {"models": [{"name": "llama3.2:latest"}]}

    rows = listing(run_foliko, {"OLLAMA_HOST": f"127.0.0.1:{fake_server.port}"})

    assert rows["ollama:llama3.2:latest"]["served"] is True
    assert rows["ollama:llama3.2:latest"]["context_window"] == 131_072
    assert rows["ollama:llama3.2:latest"]["window_source"] == "known"
    assert rows["ollama:MODEL"]["usable"] is True


def test_ollama_windows_come_from_api_show(run_foliko, fake_server):
    fake_server.metadata["/api/tags"] = {"models": [{"name": "llama3.2:latest"}]}
    fake_server.metadata["/api/show"] = {"model_info": {"llama.context_length": 4096}}

    rows = listing(run_foliko, {"OLLAMA_HOST": f"127.0.0.1:{fake_server.port}"})

    assert rows["ollama:llama3.2:latest"]["context_window"] == 4096
    assert rows["ollama:llama3.2:latest"]["window_source"] == "server"


def llama_cpp_alias(fake_server, window: int = 1024) -> None:
    fake_server.metadata["/v1/models"] = {
        "data": [{"id": "SmolLM2-135M.gguf", "meta": {"n_ctx": 8192, "n_ctx_train": 8192}}]
    }
    fake_server.metadata["/props"] = {"default_generation_settings": {"n_ctx": window}}
    trust(
        Path("foliko.toml"),
        f'[models.smol]\nmodel = "openai:smol"\nbase_url = "{fake_server.url}/v1"\n',
    )


def test_an_alias_to_a_local_server_is_listed_once_where_it_is_reached(run_foliko, fake_server):
    llama_cpp_alias(fake_server)

    result = run_foliko("models", "list", "--json", env={"OLLAMA_HOST": f"127.0.0.1:{free_port()}"})

    assert result.returncode == 0, result.stderr
    rows = orjson.loads(result.stdout)
    assert [r["name"] for r in rows] == [
        "echo",
        "openai:MODEL",
        "anthropic:MODEL",
        "ollama:MODEL",
        "smol",
    ], "the model llama.cpp serves is the alias's, listed once"
    smol = rows[-1]
    assert smol["base_url"] == f"{fake_server.url}/v1"
    assert (smol["context_window"], smol["window_source"]) == (1024, "server")
    assert (smol["key_needed"], smol["key"], smol["usable"]) == (False, "not needed", True)
    assert smol["served"] is True
    assert not any("api.openai.com" in (r["base_url"] or "") and r["served"] for r in rows)


def test_the_window_listed_is_the_one_a_turn_then_uses(run_foliko, fake_server):
    llama_cpp_alias(fake_server, window=1024)

    listed = listing(run_foliko, {"OLLAMA_HOST": f"127.0.0.1:{free_port()}"})
    dry = run_foliko("chat", "-s", "s", "-m", "smol", "--dry-run", "hi")

    assert listed["smol"]["context_window"] == 1024
    assert orjson.loads(dry.stdout)["options"]["max_tokens"] == 1024 // 4


def test_a_configured_window_beats_the_server_and_says_so(run_foliko, fake_server):
    llama_cpp_alias(fake_server)
    with Path("foliko.toml").open("a") as config:
        config.write("context_window = 600\n")
    trust(Path("foliko.toml"))

    smol = listing(run_foliko, {"OLLAMA_HOST": f"127.0.0.1:{free_port()}"})["smol"]

    assert (smol["context_window"], smol["window_source"]) == (600, "config")


def test_a_served_model_no_name_reaches_says_how_to_reach_it(run_foliko, fake_server):
    fake_server.metadata["/v1/models"] = {
        "data": [{"id": "big", "max_model_len": 32768}, {"id": "other", "max_model_len": 4096}]
    }
    trust(
        Path("foliko.toml"),
        f'[models.big]\nmodel = "openai:big"\nbase_url = "{fake_server.url}/v1"\n'
        'api_key_env = "MY_KEY"\n',
    )

    rows = listing(run_foliko, {"OLLAMA_HOST": f"127.0.0.1:{free_port()}", "MY_KEY": "k1"})

    assert rows["big"]["context_window"] == 32768 and rows["big"]["served"] is True
    assert (rows["big"]["key_needed"], rows["big"]["key"]) == (True, "MY_KEY set")
    assert "openai:big" not in rows, "the alias stands for it"
    other = rows["openai:other"]
    assert other["base_url"] == f"{fake_server.url}/v1", "where it is, not api.openai.com"
    assert other["usable"] is False and other["context_window"] == 4096
    assert "goes to https://api.openai.com/v1" in other["problem"]
    assert f'base_url = "{fake_server.url}/v1"' in other["problem"]
    assert (other["key_needed"], other["key_present"]) == (True, True)


def test_a_missing_key_is_said_per_model(run_foliko):
    rows = listing(run_foliko, {"OLLAMA_HOST": f"127.0.0.1:{free_port()}"})

    assert rows["openai:MODEL"]["key"] == "OPENAI_API_KEY missing"
    assert rows["openai:MODEL"]["key_needed"] is True and rows["openai:MODEL"]["usable"] is False
    assert rows["echo"]["key"] == "not needed"


def test_an_unreachable_alias_server_is_not_usable(run_foliko, tmp_path: Path):
    trust(
        tmp_path / "foliko.toml",
        f'[models.gone]\nmodel = "openai:x"\nbase_url = "http://127.0.0.1:{free_port()}/v1"\n',
    )

    rows = listing(run_foliko, {"OLLAMA_HOST": f"127.0.0.1:{free_port()}"})

    assert rows["gone"]["usable"] is False
    assert rows["gone"]["problem"].startswith("server unreachable")


def test_servers_are_probed_in_parallel_within_the_timeout():
    release = asyncio.Event()
    seen: list[str] = []

    async def slow(sent):
        seen.append(sent.headers["host"])
        await release.wait()

    script = Script()
    script.on("/v1/models", slow)
    env = {"OPENAI_API_KEY": "k"}
    specs = [
        model_spec(f"s{i}", {f"s{i}": {"model": "openai:m", "base_url": f"http://h{i}/v1"}}, env)
        for i in range(3)
    ]

    async def probe():
        return await served_models(specs, env, timeout=0.2, transport=script.transport)

    reports = asyncio.run(probe())

    assert sorted(seen) == ["h0", "h1", "h2"], "all three were asked at once"
    assert all(r.problem == "no answer in 0.2s" for r in reports.values())


class EndlessStream(httpx2.AsyncByteStream):
    """Server-sent deltas forever; ``closed`` says the client hung up."""

    def __init__(self) -> None:
        self.closed = asyncio.Event()

    async def __aiter__(self):
        chunk = {"choices": [{"index": 0, "delta": {"content": "word "}, "finish_reason": None}]}
        while True:
            yield b"data: " + orjson.dumps(chunk) + b"\n\n"
            await asyncio.sleep(0.01)

    async def aclose(self) -> None:
        self.closed.set()


def test_a_timed_out_stream_closes_the_connection(foliko_home: Path):
    stream = EndlessStream()
    script = Script()
    script.on(
        "/v1/chat/completions",
        httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=stream),
    )
    env = {"OPENAI_BASE_URL": "http://llm.test/v1", "OPENAI_API_KEY": "k"}
    model = build_model(model_spec("openai:m", {}, env), env, transport=script.transport)
    deltas: list[dict] = []

    with Foliko("sqlite", model, home=foliko_home, timeout=0.5) as foliko:
        with pytest.raises(TurnTimeoutError):
            foliko.chat("s", "go on forever", on_event=deltas.append)
        assert foliko.session_ids() == []

    assert deltas, "the reply was streaming"
    assert stream.closed.is_set(), "the response was closed, so the server can stop"


def test_a_listing_with_nothing_to_probe_asks_nobody():
    assert asyncio.run(served_models([model_spec("echo")], {})) == {}
