"""Say what happened: a reply cut by its token limit or stopped by a content filter,
a turn stopped at the step limit, and (on a terminal) a history compressed to fit
the window each get one line on stderr."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import orjson
import pytest

from foliko_cli.service.facade import Foliko

from .fake_servers import (
    ANTHROPIC_KEY,
    Reply,
    anthropic_message,
    foliko_executable,
    openai_message,
    openai_stream,
)

LLAMA_1024 = {
    "/v1/models": {"data": [{"id": "smol.gguf", "meta": {"n_ctx": 1024}}]},
    "/props": {"default_generation_settings": {"n_ctx": 1024}},
}


def notes(result) -> list[str]:
    return [line for line in result.stderr.decode().splitlines() if line.startswith("foliko: ")]


@pytest.mark.parametrize("stream", ["--no-stream", "--stream"])
def test_a_reply_cut_by_max_tokens_says_so_and_how_to_raise_it(
    run_foliko, fake_server, openai_env, stream
):
    fake_server.metadata.update(LLAMA_1024)
    if stream == "--stream":
        fake_server.queue(openai_stream(["Once upon a"], finish_reason="length"))
    else:
        fake_server.queue(openai_message("Once upon a", finish_reason="length"))

    result = run_foliko("chat", "-s", "s", stream, "tell a story", env=openai_env)

    assert result.returncode == 0, result.stderr
    assert result.stdout == b"Once upon a\n"
    assert notes(result) == [
        "foliko: the reply was cut at its limit of 256 tokens (max_tokens, finish reason "
        "length); raise it with -o max_tokens=512, or with max_tokens in the model's "
        "[models.NAME] alias"
    ]


def test_the_limit_named_is_the_one_given(run_foliko, fake_server, openai_env):
    fake_server.queue(openai_message("Once", finish_reason="length"))

    result = run_foliko("chat", "-s", "s", "-o", "max_tokens=5", "story", env=openai_env)

    assert fake_server.requests[0].body["max_tokens"] == 5
    assert "its limit of 5 tokens" in notes(result)[0] and "-o max_tokens=10" in notes(result)[0]


def test_anthropic_s_max_tokens_stop_is_said_too(run_foliko, fake_server, anthropic_env):
    cut = anthropic_message("Once upon")
    cut.body["stop_reason"] = "max_tokens"
    fake_server.queue(cut)

    result = run_foliko("chat", "-s", "s", "story", env=anthropic_env)

    assert result.returncode == 0, result.stderr
    assert ANTHROPIC_KEY.encode() not in result.stderr
    (line,) = notes(result)
    assert "cut at its limit of 4,096 tokens" in line and "finish reason max_tokens" in line


def test_a_content_filter_stop_is_said(run_foliko, fake_server, openai_env):
    fake_server.queue(openai_message("I can", finish_reason="content_filter"))

    result = run_foliko("chat", "-s", "s", "--json", "hi", env=openai_env)

    assert orjson.loads(result.stdout)["finish_reason"] == "content_filter"
    assert notes(result) == [
        "foliko: the provider's content filter stopped the reply (finish reason "
        "content_filter); what came before it is kept: rephrase the message or use another model"
    ]


def test_a_whole_reply_says_nothing(run_foliko, fake_server, openai_env):
    fake_server.queue(openai_message("done"))
    result = run_foliko("chat", "-s", "s", "hi", env=openai_env)
    assert result.returncode == 0 and notes(result) == []


def test_the_step_limit_is_said(run_foliko):
    result = run_foliko(
        "chat",
        "-s",
        "s",
        "/tool get_session_info",
        env={"FOLIKO_MAX_STEPS": "1", "FOLIKO_MODEL": "echo"},
    )

    assert result.returncode == 0, result.stderr
    assert notes(result) == [
        "foliko: the turn stopped after 1 model calls with the model still calling tools "
        "(the step limit); raise max_steps (FOLIKO_MAX_STEPS) for more"
    ]


def long_history(home: Path) -> dict[str, str]:
    with Foliko("sqlite", "echo", home=home) as foliko:
        for turn in range(12):
            foliko.chat("s", f"turn {turn}: the quick brown fox jumps over the lazy dog")
    return {"FOLIKO_CONTEXT_WINDOW": "600", "FOLIKO_MODEL": "echo"}


def run_with_terminal_stderr(*args: str, env: dict[str, str]) -> tuple[int, bytes, str]:
    """foliko with stderr on a pseudo-terminal (stdout a pipe)."""
    primary, secondary = os.openpty()
    try:
        done = subprocess.run(
            [foliko_executable(), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=secondary,
            env={**os.environ, **env},
            timeout=60,
        )
    finally:
        os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: the terminal's other side is closed and drained
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(primary)
    return done.returncode, done.stdout, b"".join(chunks).decode().replace("\r", "")


def test_a_compressed_history_is_said_on_a_terminal(foliko_home: Path):
    env = long_history(foliko_home)

    status, out, err = run_with_terminal_stderr("chat", "-s", "s", "what next?", env=env)

    assert status == 0, err
    assert out == b"what next?\n"
    (line,) = [line for line in err.splitlines() if "compressed" in line]
    assert line.startswith("foliko: the history was compressed to fit the 600-token window: ")
    assert "messages are summarised for the model (the stored history is whole)" in line


def test_a_compressed_history_is_not_said_in_a_pipe(run_foliko, foliko_home: Path):
    env = long_history(foliko_home)

    result = run_foliko("chat", "-s", "s", "--json", "what next?", env=env)

    assert result.returncode == 0, result.stderr
    assert notes(result) == []
    compressed = orjson.loads(result.stdout)["compressed"]
    assert compressed["method"] == "summary" and compressed["window"] == 600
    assert 0 < compressed["covered"] < 24


def test_reply_limits_are_in_the_json(run_foliko, fake_server, openai_env):
    fake_server.queue(Reply(body=openai_message("x").body))
    result = run_foliko("chat", "-s", "s", "--json", "-o", "max_tokens=33", "hi", env=openai_env)
    data = orjson.loads(result.stdout)
    assert (data["max_tokens"], data["compressed"]) == (33, None)
