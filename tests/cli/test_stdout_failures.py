"""A stdout that cannot be written, in real processes: /dev/full, a closed descriptor
(``>&-``), a closed pipe (``| head -1``). Never a traceback, never a silent exit 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

BIN = Path(sys.executable).parent
FOLIKO = BIN / "foliko"
DEV_FULL = Path("/dev/full")

pytestmark = pytest.mark.skipif(not DEV_FULL.exists(), reason="needs /dev/full (Linux)")


@pytest.fixture
def env(foliko_home):
    environment = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "FOLIKO_HOME": str(foliko_home),
        "FOLIKO_MODEL": "echo",
    }
    sessions = b"".join(
        orjson.dumps({"session_id": f"s{n}", "messages": [{"role": "user", "content": "hi"}]})
        + b"\n"
        for n in range(3)
    )
    done = subprocess.run(
        [str(FOLIKO), "sessions", "import", "-"],
        input=sessions,
        env=environment,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return environment


def sh(command: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", command], capture_output=True, env=env, timeout=60, stdin=subprocess.DEVNULL
    )


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert b"Traceback" not in result.stderr, result.stderr.decode()
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("foliko: error: ")
    return lines[0]


COMMANDS = [
    "sessions list",
    "sessions list --json",
    "sessions show s1",
    "sessions show s1 --json",
    "sessions export s1",
    "sessions export --all",
    "config show",
    "storage info",
    "models list",
    "tools list",
    "chat -s new --json hi",
    "chat -s new --no-stream hi",
    "chat -s new --stream hi",
    "chat -s new --stream --json hi",
]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_full_disk_on_stdout_is_one_line_and_exit_3(env, command):
    """Was: an OSError traceback."""
    result = sh(f"foliko {command} > /dev/full", env)
    assert result.returncode == 3, result.stderr
    line = one_error_line(result)
    assert "cannot write to standard output (No space left on device)" in line


@pytest.mark.parametrize("command", COMMANDS)
def test_a_closed_stdout_is_one_line_and_exit_3(env, command):
    """Was: an AttributeError traceback, or exit 0 with nothing written."""
    result = sh(f"foliko {command} >&-", env)
    assert result.returncode == 3, result.stderr
    assert "cannot write to standard output" in one_error_line(result)


def test_a_chat_whose_reply_cannot_be_written_says_the_turn_was_saved(env):
    result = sh("foliko chat -s kept --no-stream 'keep me' > /dev/full", env)
    assert result.returncode == 3
    line = one_error_line(result)
    assert "the turn was saved but the reply could not be written" in line
    shown = sh("foliko sessions show kept --json", env)
    contents = [m["content"] for m in orjson.loads(shown.stdout)["messages"]]
    assert contents == ["keep me", "keep me"]


def test_a_streamed_reply_that_cannot_be_written_still_saves_the_turn(env):
    result = sh("foliko chat -s streamed --stream 'keep me' > /dev/full", env)
    assert result.returncode == 3
    assert "the turn was saved" in one_error_line(result)
    shown = sh("foliko sessions show streamed --json", env)
    assert len(orjson.loads(shown.stdout)["messages"]) == 2


def test_commands_that_print_nothing_succeed_with_stdout_closed(env):
    result = sh("foliko sessions vars s1 set k v >&-", env)
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""


@pytest.mark.parametrize(
    "command",
    [
        "sessions list --ndjson",
        "sessions list",
        "sessions export --all",
        "sessions export --all --format ndjson",
        "sessions show s1",
        "config show",
        "chat -s piped hi",
    ],
)
def test_a_closed_pipe_exits_0_quietly(env, command):
    """Was: `sessions export --all | head -1` differed from `sessions list | head -1`."""
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", f"foliko {command} | head -c 0"],
        capture_output=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""


def test_a_large_export_into_head_exits_0(env):
    big = b"".join(
        orjson.dumps(
            {"session_id": f"big{n}", "messages": [{"role": "user", "content": "x" * 4000}]}
        )
        + b"\n"
        for n in range(40)
    )
    subprocess.run([str(FOLIKO), "sessions", "import", "-"], input=big, env=env, timeout=60)
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", "foliko sessions export --all --format ndjson | head -1"],
        capture_output=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""
    assert orjson.loads(result.stdout)["session_id"]


def test_xargs_over_quiet_ids(env):
    result = subprocess.run(
        [
            "bash",
            "-o",
            "pipefail",
            "-c",
            "foliko sessions list -q | xargs -n1 foliko sessions show",
        ],
        capture_output=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    for number in range(3):
        assert f"session   s{number}".encode() in result.stdout


def test_a_home_that_is_a_file_exits_3_naming_it(env, tmp_path):
    """Was: `sessions list` printed an empty list and exited 0."""
    home = tmp_path / "not-a-dir"
    home.write_text("x")
    for command in ("sessions list", "chat -s s hi", "storage info"):
        result = sh(f"FOLIKO_HOME={home} foliko {command}", env)
        assert result.returncode == 3, (command, result.stderr)
        line = one_error_line(result)
        assert str(home) in line and "not a directory" in line
