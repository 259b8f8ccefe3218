"""What ``chat --dry-run`` shows is what is sent: its ``request`` is the HTTP request
the fake server then receives for the same command, over every option and
provider (OpenAI-compatible llama.cpp, Anthropic, Ollama)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from urllib.parse import urlsplit

import orjson
import pytest
from trusting import trust

from .fake_servers import (
    ANTHROPIC_KEY,
    OPENAI_KEY,
    FakeServer,
    Recorded,
    anthropic_stream,
    openai_stream,
)
from .images import png

SCHEMA = '{"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}'
SAMPLING = [
    *("-o", "temperature=0.2", "-o", "top_p=0.9", "-o", "seed=7", "-o", "max_tokens=100"),
    *("-o", 'stop=["END"]', "-o", "presence_penalty=0.1", "-o", "frequency_penalty=0.2"),
    *("-o", "top_k=40", "-o", "min_p=0.05"),
]
OPTIONS = {
    "defaults": [],
    "sampling": SAMPLING,
    "stop as text": ["-o", "stop=END"],
    "system": ["--system", "Be terse."],
    "schema": ["--schema", SCHEMA],
    "forced tool": ["-o", "tool_choice=get_variable"],
    "no tools": ["-o", "tool_choice=none", "-o", "parallel_tool_calls=false"],
    "streamed": ["--stream"],
    "streamed sampling": ["--stream", *SAMPLING],
    "text attachment": ["-a", "notes.txt"],
    "image": ["-a", "dot.png"],
    "variables": ["--var", "k=v", "--var-json", "n=3"],
    "alias": ["-m", "fast", "-o", "seed=4"],
    "agent": ["--agent", "helper"],
    "template": ["-t", "trip.yaml", "-p", "mood", "calm"],
    "turn tool": ["-T", "triptools:forecast"],
    "functions": ["--functions", "triptools.py"],
    "compact schema": ["--schema", "city: where to go"],
}


def llama_cpp(server: FakeServer) -> tuple[dict[str, str], str]:
    """A llama.cpp server with a 1,024-token window (so a reply gets 256 by default)."""
    server.metadata["/v1/models"] = {"data": [{"id": "smol.gguf", "meta": {"n_ctx": 1024}}]}
    server.metadata["/props"] = {"default_generation_settings": {"n_ctx": 1024}}
    env = {"OPENAI_BASE_URL": f"{server.url}/v1", "OPENAI_API_KEY": OPENAI_KEY}
    return {**env, "FOLIKO_MODEL": "openai:smol.gguf"}, "openai:smol.gguf"


def anthropic(server: FakeServer) -> tuple[dict[str, str], str]:
    env = {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": ANTHROPIC_KEY}
    return {**env, "FOLIKO_MODEL": "anthropic:claude-x"}, "anthropic:claude-x"


def ollama(server: FakeServer) -> tuple[dict[str, str], str]:
    server.metadata["/api/show"] = {"model_info": {"llama.context_length": 2048}}
    env = {"OLLAMA_HOST": f"127.0.0.1:{server.port}"}
    return {**env, "FOLIKO_MODEL": "ollama:llama3.2"}, "ollama:llama3.2"


PROVIDERS = {"llama.cpp": llama_cpp, "anthropic": anthropic, "ollama": ollama}


def reply_for(provider: str, words: list[str]):
    """A reply the turn accepts: text, or (with a schema) what follows it."""
    stream = anthropic_stream if provider == "anthropic" else openai_stream
    if "--schema" not in words:
        return stream(["fine"])
    if provider == "anthropic":
        return stream(tool_uses=[("toolu_1", "reply", {"city": "Lyon"})])
    return stream(['{"city": "Lyon"}'])


def project(model: str) -> None:
    Path("notes.txt").write_text("remember the milk\n")
    Path("dot.png").write_bytes(png())
    Path("foliko.toml").write_text(
        "[models.fast]\n"
        f'model = "{model}"\n'
        "max_tokens = 77\n"
        "options = {temperature = 0.5, seed = 3}\n"
        "[agents.helper]\n"
        'system_prompt = "You help."\n'
        "tools = []\n"
    )
    trust(Path("foliko.toml"))
    Path("trip.yaml").write_text(
        f"model: {model}\nsystem: Be $mood.\nprompt: 'Plan it: $input'\n"
        "options: {temperature: 0.3}\nfunctions: triptools.py\n"
    )
    Path("triptools.py").write_text(
        'def forecast(city: str) -> str:\n    "The forecast."\n    return "sun"\n'
    )
    trust(Path("trip.yaml"))


def received(shown: dict, recorded: Recorded) -> None:
    """The shown request is the recorded one: method, path, the provider's headers
    (secrets as ***) and, byte for byte as JSON, the body."""
    assert shown["method"] == recorded.method
    assert urlsplit(shown["url"]).path == recorded.path
    secrets = (OPENAI_KEY, ANTHROPIC_KEY)
    for name, value in shown["headers"].items():
        sent = recorded.headers[name]
        for secret in secrets:
            sent = sent.replace(secret, "***")
        assert value == sent, name
    assert shown["body"] == recorded.body
    assert orjson.loads(recorded.raw) == shown["body"]


@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_the_dry_run_shows_the_request_the_server_receives(
    run_foliko, fake_server: FakeServer, provider, option
):
    env, model = PROVIDERS[provider](fake_server)
    project(model)
    words = OPTIONS[option]
    fake_server.queue(reply_for(provider, words))

    dry = run_foliko("chat", "-s", "s", "--dry-run", *words, "where to?", env=env)
    real = run_foliko("chat", "-s", "s", *words, "where to?", env=env)

    assert dry.returncode == 0, dry.stderr
    assert real.returncode == 0, real.stderr
    (recorded,) = fake_server.requests
    shown = orjson.loads(dry.stdout)
    if option in RUNS_CODE:  # a dry run imports no code: its tool stands in, by name
        stand_in = code_tool(shown["request"]["body"])
        assert "not loaded in a dry run" in str(stand_in)
        assert code_tool(recorded.body) != stand_in
        shown["request"]["body"] = without_code_tool(shown["request"]["body"])
        body = without_code_tool(recorded.body)
        recorded = dataclasses.replace(recorded, body=body, raw=orjson.dumps(body))
    received(shown["request"], recorded)
    assert shown["model"] == model


RUNS_CODE = {"template", "turn tool", "functions"}
"""The options whose tool is Python code (triptools.forecast)."""


def _tool_name(tool: dict) -> str | None:
    return tool.get("name") or tool.get("function", {}).get("name")


def code_tool(body: dict) -> dict:
    (tool,) = [t for t in body.get("tools", ()) if _tool_name(t) == "forecast"]
    return tool


def without_code_tool(body: dict) -> dict:
    tools = [t for t in body.get("tools", ()) if _tool_name(t) != "forecast"]
    return {**body, "tools": tools} if tools else {k: v for k, v in body.items() if k != "tools"}


def test_the_reply_bound_is_the_one_the_discovered_window_gives(run_foliko, fake_server):
    env, _ = llama_cpp(fake_server)
    fake_server.queue(openai_stream(["fine"]))

    dry = orjson.loads(run_foliko("chat", "-s", "s", "--dry-run", "hi", env=env).stdout)
    assert run_foliko("chat", "-s", "s", "hi", env=env).returncode == 0

    assert dry["options"]["max_tokens"] == dry["request"]["body"]["max_tokens"] == 256
    assert fake_server.requests[0].body["max_tokens"] == 256


def test_openai_own_service_is_shown_max_completion_tokens(run_foliko):
    env = {"OPENAI_API_KEY": OPENAI_KEY, "FOLIKO_MODEL": "openai:gpt-4o-mini"}

    result = run_foliko("chat", "-s", "s", "--dry-run", "-o", "max_tokens=9", "hi", env=env)

    assert result.returncode == 0, result.stderr
    request = orjson.loads(result.stdout)["request"]
    assert request["url"] == "https://api.openai.com/v1/chat/completions"
    assert request["headers"]["authorization"] == "Bearer ***"
    assert request["body"]["max_completion_tokens"] == 9 and "max_tokens" not in request["body"]
    assert OPENAI_KEY not in result.stdout.decode()


def test_a_provider_that_sends_no_http_shows_no_request(run_foliko):
    shown = orjson.loads(run_foliko("chat", "-s", "s", "--dry-run", "hi").stdout)
    assert "request" not in shown and shown["model"] == "echo"
