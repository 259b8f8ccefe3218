"""Provider failures: retries, fail-fast errors, timeouts, cut-off streams (SPEC F9, R1, R4, R6).

Exit codes (SPEC §4): 1 model/provider failure, 2 usage, 130 interrupted. A
failed turn leaves the session exactly as it was (R1). Subprocess tests get
``Retry-After: 0`` from the server so that retries cost no time; in-process
tests shrink the random backoff instead.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
from pathlib import Path

import orjson
import pytest
from trusting import trust

from foliko_cli.errors import ModelError, SessionNotFoundError
from foliko_cli.models import build_model, model_spec
from foliko_cli.models.base import ModelRequest
from foliko_cli.models.http import MAX_ATTEMPTS
from foliko_cli.service.facade import Foliko

from .fake_servers import (
    ANTHROPIC_KEY,
    OPENAI_KEY,
    Reply,
    anthropic_stream,
    anthropic_stream_events,
    error_reply,
    foliko_executable,
    free_port,
    openai_message,
    openai_stream,
    openai_stream_events,
    run_in,
)

PROVIDERS = {
    "openai": {
        "env": "openai_env",
        "stream": openai_stream,
        "events": openai_stream_events,
        "key": OPENAI_KEY,
        "key_env": "OPENAI_API_KEY",
    },
    "anthropic": {
        "env": "anthropic_env",
        "stream": anthropic_stream,
        "events": anthropic_stream_events,
        "key": ANTHROPIC_KEY,
        "key_env": "ANTHROPIC_API_KEY",
    },
}


@pytest.fixture(params=sorted(PROVIDERS))
def provider(request):
    """(name, its settings, the env that points foliko at the fake server)."""
    settings = PROVIDERS[request.param]
    return request.param, settings, request.getfixturevalue(settings["env"])


def one_line(stderr: bytes) -> str:
    lines = stderr.decode().strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("foliko: error: ")
    return lines[0]


def stored_session(home: Path, session_id: str):
    with Foliko("sqlite", "echo", home=home) as foliko:
        try:
            return foliko.get_session(session_id)
        except SessionNotFoundError:
            return None


@pytest.fixture
def snapshot(foliko_home: Path):
    """A stored session with one turn, and a check that it is still exactly that."""

    def take(session_id: str = "kept"):
        with Foliko("sqlite", "echo", home=foliko_home) as foliko:
            foliko.chat(session_id, "before")
        before = stored_session(foliko_home, session_id)
        return lambda: stored_session(foliko_home, session_id) == before

    return take


@pytest.fixture
def session_ids(foliko_home: Path):
    def names() -> list[str]:
        with Foliko("sqlite", "echo", home=foliko_home) as foliko:
            return [s.session_id for s in foliko.list_sessions()]

    return names


# retried


def test_429_with_retry_after_then_success(run_foliko, fake_server, provider):
    name, settings, env = provider
    fake_server.queue(
        error_reply(429, "rate limited", headers={"Retry-After": "0"}, protocol=name),
        settings["stream"](["after the wait"]),
    )

    result = run_foliko("chat", "-s", "r", "hi", env=env)

    assert result.returncode == 0, result.stderr
    assert result.stdout == b"after the wait\n"
    assert len(fake_server.requests) == 2
    first, second = fake_server.requests
    assert first.body == second.body, "the same request is sent again"


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_server_errors_are_retried_with_backoff(
    fake_server, monkeypatch, fast_retries, foliko_home: Path, status
):
    monkeypatch.setenv("OPENAI_BASE_URL", f"{fake_server.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    fake_server.queue(error_reply(status, "try again"), openai_stream(["recovered"]))

    with Foliko("memory", "openai:some-model", home=foliko_home) as foliko:
        result = foliko.chat("s", "hi")
        stored = foliko.get_session("s").messages

    assert result.message == "recovered"
    assert len(fake_server.requests) == 2
    assert [m["role"] for m in stored] == ["user", "assistant"]


def test_500_then_success_through_the_cli(run_foliko, fake_server, openai_env):
    fake_server.queue(
        error_reply(500, "boom", headers={"Retry-After": "0"}), openai_stream(["fine now"])
    )

    result = run_foliko("chat", "-s", "r", "hi", env=openai_env)

    assert result.returncode == 0, result.stderr
    assert result.stdout == b"fine now\n"
    assert len(fake_server.requests) == 2


def test_connection_errors_are_retried(fake_server, monkeypatch, fast_retries, foliko_home):
    """A connection that drops before any answer is retried like a 5xx."""
    monkeypatch.setenv("OPENAI_BASE_URL", f"{fake_server.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    fake_server.queue(Reply(drop=True), openai_stream(["second try"]))

    with Foliko("memory", "openai:some-model", home=foliko_home) as foliko:
        assert foliko.chat("s", "hi").message == "second try"
    assert len(fake_server.requests) == 2


def test_anthropic_overloaded_529_is_retried(run_foliko, fake_server, anthropic_env):
    fake_server.queue(
        error_reply(529, "Overloaded", headers={"Retry-After": "0"}, protocol="anthropic"),
        anthropic_stream(["back"]),
    )

    result = run_foliko("chat", "-s", "r", "hi", env=anthropic_env)

    assert result.returncode == 0, result.stderr
    assert len(fake_server.requests) == 2


# retries end


def test_503_until_the_deadline_fails_and_changes_nothing(
    run_foliko, fake_server, openai_env, snapshot
):
    """The waits the server asks for add up past --timeout before the attempts
    run out, so the deadline ends it: however slow the machine, fewer than
    MAX_ATTEMPTS requests are made."""
    unchanged = snapshot()
    fake_server.default = error_reply(503, "busy", headers={"Retry-After": "0.5"})
    assert 0.5 * (MAX_ATTEMPTS - 1) > 2

    result = run_foliko("chat", "-s", "kept", "--timeout", "2", "hi", env=openai_env)

    assert result.returncode == 1
    assert result.stdout == b""
    line = one_line(result.stderr)
    assert "503" in line and OPENAI_KEY not in line
    assert 1 <= len(fake_server.requests) < MAX_ATTEMPTS
    assert unchanged()


def test_retry_after_past_the_deadline_gives_up_at_once(run_foliko, fake_server, openai_env):
    """Waiting an hour would overrun --timeout 5, so foliko reports the 503 instead."""
    fake_server.queue(
        error_reply(503, "busy", headers={"Retry-After": "0"}),
        error_reply(503, "busy", headers={"Retry-After": "3600"}),
    )

    result = run_foliko("chat", "-s", "r", "--timeout", "5", "hi", env=openai_env)

    assert result.returncode == 1
    line = one_line(result.stderr)
    assert "503" in line
    assert "busy" in line
    assert len(fake_server.requests) == 2


def test_retries_are_bounded(run_foliko, fake_server, openai_env, session_ids):
    fake_server.default = error_reply(502, "bad gateway", headers={"Retry-After": "0"})

    result = run_foliko("chat", "-s", "r", "hi", env=openai_env)

    assert result.returncode == 1
    assert "502" in one_line(result.stderr)
    assert len(fake_server.requests) == MAX_ATTEMPTS
    assert session_ids() == []


# fail at once


def test_401_fails_at_once_naming_the_provider_and_the_variable(
    run_foliko, fake_server, provider, session_ids
):
    name, settings, env = provider
    key = settings["key"]
    fake_server.queue(error_reply(401, f"Incorrect API key provided: {key}.", protocol=name))

    result = run_foliko("chat", "-s", "s", "hi", env=env)

    assert result.returncode == 1
    assert result.stdout == b""
    line = one_line(result.stderr)
    assert name in line
    assert "401" in line
    assert settings["key_env"] in line
    assert key not in line, "the key the server echoed is hidden"
    assert len(fake_server.requests) == 1
    assert session_ids() == []


@pytest.mark.parametrize(
    ("name", "status", "hint"),
    [
        ("openai", 400, "check the model's options"),
        ("anthropic", 403, "permissions"),
        ("openai", 404, "check the model name"),
        ("anthropic", 404, "check the model name"),
    ],
)
def test_other_client_errors_fail_at_once(
    run_foliko, fake_server, request, snapshot, name, status, hint
):
    env = request.getfixturevalue(f"{name}_env")
    unchanged = snapshot()
    fake_server.queue(error_reply(status, "no such thing", protocol=name))

    result = run_foliko("chat", "-s", "kept", "hi", env=env)

    assert result.returncode == 1
    line = one_line(result.stderr)
    assert f"({status}: no such thing)" in line
    assert hint in line
    assert name in line
    assert len(fake_server.requests) == 1
    assert unchanged()


def test_connection_refused_names_the_base_url(invoke, monkeypatch, fast_retries):
    base_url = f"http://127.0.0.1:{free_port()}/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)

    result = invoke("chat", "-s", "s", "-m", "openai:some-model", "hi")

    assert result.exit_code == 1
    assert result.stdout == ""
    line = one_line(result.stderr.encode())
    assert base_url in line
    assert "cannot reach openai" in line
    assert OPENAI_KEY not in line
    assert invoke("sessions", "list", "--json").stdout.strip() == "[]"


# timeouts and interruptions


@pytest.mark.parametrize(
    ("name", "stall_after"),
    [("openai", None), ("anthropic", 4)],
    ids=["openai-before-the-answer", "anthropic-mid-stream"],
)
def test_a_server_stalling_past_the_timeout(
    run_foliko, fake_server, request, snapshot, name, stall_after
):
    """The process gives up on its own: the stall is only released after it exited."""
    settings = PROVIDERS[name]
    env = request.getfixturevalue(settings["env"])
    unchanged = snapshot()
    stalled = Reply(
        events=settings["events"](["never", " finished"]),
        stall=threading.Event(),
        stall_after=stall_after,
    )
    fake_server.queue(stalled)

    result = run_foliko("chat", "-s", "kept", "--stream", "--timeout", "2", "hi", env=env)
    still_stalled = not stalled.stall.is_set()
    stalled.stall.set()

    assert still_stalled
    assert result.returncode == 1
    line = one_line(result.stderr)
    assert "timeout" in line.lower() or "in time" in line
    assert settings["key"] not in line
    assert len(fake_server.requests) >= 1
    assert unchanged()


def test_ctrl_c_aborts_the_request_exits_130_and_saves_nothing(
    run_foliko, fake_server, openai_env, snapshot
):
    unchanged = snapshot()
    stall = threading.Event()
    fake_server.queue(Reply(events=openai_stream_events(["x"]), stall=stall))
    process = subprocess.Popen(
        [foliko_executable(), "chat", "-s", "kept", "hi"],
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # even under nohup
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **openai_env},
    )
    try:
        assert fake_server.wait_for_requests(1), "the request reached the server"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        released_after_exit = not stall.is_set()
        stall.set()

    assert released_after_exit
    assert process.returncode == 130
    assert out == b""
    assert "interrupted" in one_line(err)
    assert unchanged()


# cut off


@pytest.mark.parametrize(
    "cut",
    ["openai-abort", "openai-no-done", "anthropic-abort", "anthropic-no-stop"],
)
def test_a_stream_cut_off_half_way(run_foliko, fake_server, request, session_ids, cut):
    name, how = cut.split("-", 1)
    env = request.getfixturevalue(f"{name}_env")
    if name == "openai":
        full = openai_stream_events(["one ", "two ", "three"])
        partial = openai_stream_events(["one ", "two "], usage=None, finish=False, done=False)
    else:
        full = anthropic_stream_events(["one ", "two ", "three"])
        partial = anthropic_stream_events(["one ", "two "], stop=False)
    if how == "abort":
        reply = Reply(events=full, cut_after=len(full) // 2)
    else:
        reply = Reply(events=partial)
    fake_server.queue(reply)

    result = run_foliko("chat", "-s", "cut", "--stream", "hi", env=env)

    assert result.returncode == 1
    line = one_line(result.stderr)
    assert "ended before the reply was complete" in line
    assert "not saved" in line
    assert session_ids() == []


def test_a_failure_inside_the_tool_loop_keeps_nothing_of_the_turn(
    run_foliko, fake_server, openai_env, snapshot
):
    unchanged = snapshot()
    call = ("call_1", "set_variable", {"key": "leak", "value": True})
    full = openai_stream_events(["never"])
    fake_server.queue(openai_stream([], [call]), Reply(events=full, cut_after=3))

    result = run_foliko("chat", "-s", "kept", "hi", env=openai_env)

    assert result.returncode == 1
    assert len(fake_server.requests) == 2
    assert unchanged(), "neither the messages nor the variable set by the tool were kept"


def test_a_truncated_json_answer_is_a_cut_off(fake_server):
    env = {"OPENAI_BASE_URL": f"{fake_server.url}/v1", "OPENAI_API_KEY": OPENAI_KEY}
    model = build_model(model_spec("openai:some-model", env=env), env)
    reply = openai_message("a complete answer that is never completed")
    reply.cut_after = 40
    fake_server.queue(reply)

    with pytest.raises(ModelError, match="ended before the reply was complete"):
        asyncio.run(model.generate(ModelRequest([{"role": "user", "content": "hi"}])))


# configuration


@pytest.mark.parametrize(
    ("model", "variable"),
    [("openai:gpt-4o-mini", "OPENAI_API_KEY"), ("anthropic:claude-x", "ANTHROPIC_API_KEY")],
)
def test_missing_key_for_the_real_service_is_a_usage_error(
    run_foliko, fake_server, session_ids, model, variable
):
    """Exit 2 before any request: even through a proxy, nothing goes out."""
    proxy = {"HTTPS_PROXY": fake_server.url, "HTTP_PROXY": fake_server.url}

    result = run_foliko("chat", "-s", "s", "-m", model, "hi", env=proxy)

    assert result.returncode == 2
    assert variable in one_line(result.stderr)
    assert fake_server.requests == []
    assert session_ids() == []


@pytest.mark.parametrize("model", ["foo:bar", "openai", "openai:", "gpt-4o"])
def test_unknown_model_or_provider_is_a_usage_error(run_foliko, session_ids, model):
    result = run_foliko("chat", "-s", "s", "-m", model, "hi")

    assert result.returncode == 2
    assert "unknown model" in one_line(result.stderr)
    assert session_ids() == []


def test_models_list_reflects_keys_and_config_aliases(fake_server, tmp_path: Path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "foliko.toml").write_text(
        "[models.fast]\n"
        'model = "openai:gpt-4o-mini"\n'
        f'base_url = "{fake_server.url}/v1"\n'
        'api_key_env = "MY_KEY"\n'
        "context_window = 1000\n"
        "\n"
        "[models.cloud]\n"
        'model = "anthropic:claude-x"\n'
        'api_key_env = "MY_KEY"\n'
    )
    trust(project / "foliko.toml")

    def listing(env: dict[str, str]) -> dict[str, dict]:
        result = run_in(project, "models", "list", "--json", env=env)
        assert result.returncode == 0, result.stderr
        for secret in ("my-secret-1", "sk-secret-2"):
            assert secret.encode() not in result.stdout + result.stderr
        return {row["name"]: row for row in orjson.loads(result.stdout)}

    bare = listing({"OLLAMA_HOST": f"127.0.0.1:{free_port()}"})
    assert bare["echo"]["usable"] is True
    assert bare["echo"]["default"] is True
    assert bare["ollama:MODEL"]["usable"] is False, "nothing listens there"
    assert "unreachable" in bare["ollama:MODEL"]["problem"]
    assert bare["openai:MODEL"]["usable"] is False
    assert "OPENAI_API_KEY" in bare["openai:MODEL"]["problem"]
    assert bare["anthropic:MODEL"]["usable"] is False
    assert "ANTHROPIC_API_KEY" in bare["anthropic:MODEL"]["problem"]
    fast = bare["fast"]
    assert fast["provider"] == "openai"
    assert fast["model"] == "gpt-4o-mini"
    assert fast["base_url"] == f"{fake_server.url}/v1"
    assert fast["key_env"] == "MY_KEY"
    assert fast["context_window"] == 1000
    assert bare["cloud"]["usable"] is False
    assert "MY_KEY" in bare["cloud"]["problem"]
    assert bare["cloud"]["context_window"] == 200_000

    keyed = listing(
        {
            "MY_KEY": "my-secret-1",
            "OPENAI_API_KEY": "sk-secret-2",
            "OPENAI_BASE_URL": f"{fake_server.url}/v1",
            "FOLIKO_MODEL": "fast",
        }
    )
    assert keyed["openai:MODEL"]["usable"] is True
    assert keyed["cloud"]["usable"] is True
    assert keyed["cloud"]["problem"] is None
    assert keyed["anthropic:MODEL"]["usable"] is False
    assert keyed["fast"]["default"] is True
    assert keyed["echo"]["default"] is False
