"""The installed `foliko` as a real process: pipes, exit codes, stdout/stderr."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson

from foliko_cli.service.facade import Foliko


def test_done_means_scenario(run_foliko):
    first = run_foliko("chat", "-s", "s1", "hi")
    assert first.returncode == 0
    assert b"hi" in first.stdout
    assert b"echo" in first.stderr
    assert run_foliko("chat", "-s", "s1", "more").returncode == 0
    shown = run_foliko("sessions", "show", "s1", "--json")
    roles = [m["role"] for m in orjson.loads(shown.stdout)["messages"]]
    assert roles == ["user", "assistant", "user", "assistant"]


def test_piped_message(run_foliko):
    result = run_foliko("chat", "-s", "p", input="piped\n")
    assert result.returncode == 0
    assert result.stdout == b"piped\n\n"


def test_only_the_answer_goes_to_stdout(run_foliko):
    result = run_foliko("chat", "-s", "s", "answer only")
    assert result.stdout == b"answer only\n"
    assert b"answer only" not in result.stderr


def test_list_json_feeds_another_program(run_foliko, foliko_home):
    run_foliko("chat", "-s", "a", "x")
    run_foliko("chat", "-s", "b", "y")
    listing = run_foliko("sessions", "list", "--json")
    counted = subprocess.run(
        [sys.executable, "-c", "import json,sys; print(len(json.load(sys.stdin)))"],
        input=listing.stdout,
        capture_output=True,
        check=True,
    )
    assert counted.stdout == b"2\n"


def test_bad_storage_exits_2_with_one_line(run_foliko):
    result = run_foliko("--storage", "nonsense", "chat", "-s", "s1", "hi")
    assert result.returncode == 2
    assert result.stdout == b""
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith(b"foliko: error: unknown storage 'nonsense'")


def test_storage_from_environment(run_foliko, tmp_path):
    env = {"FOLIKO_STORAGE": f"sqlite:///{tmp_path}/env.db", "FOLIKO_MODEL": "echo"}
    assert run_foliko("chat", "-s", "e", "hi", env=env).returncode == 0
    assert (tmp_path / "env.db").exists()
    assert run_foliko("sessions", "show", "e", env={"FOLIKO_STORAGE": "nope"}).returncode == 2


def test_unknown_session_exit_code(run_foliko):
    result = run_foliko("sessions", "show", "missing")
    assert result.returncode == 2
    assert b"not found" in result.stderr


def test_unwritable_home_is_a_storage_error(run_foliko, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = run_foliko("chat", "-s", "s1", "hi", env={"FOLIKO_HOME": str(blocker / "home")})
    assert result.returncode == 3
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(b"foliko: error: cannot") and str(blocker).encode() in last


def test_files_are_owner_only(run_foliko, foliko_home):
    run_foliko("chat", "-s", "s1", "hi")
    assert (foliko_home / "sessions.db").stat().st_mode & 0o777 == 0o600
    assert foliko_home.stat().st_mode & 0o777 == 0o700


def test_python_dash_m(foliko_home):
    result = subprocess.run(
        [sys.executable, "-m", "foliko_cli", "chat", "-s", "m", "via -m"],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "FOLIKO_MODEL": "echo"},
    )
    assert result.returncode == 0
    assert result.stdout == b"via -m\n"


def test_closed_stdout_pipe_is_not_an_error(run_foliko, foliko_home):
    with Foliko("sqlite", "echo", home=foliko_home) as foliko:
        for i in range(30):
            foliko.chat(f"s{i}", "x" * 200)
    executable = run_foliko("--version").args[0]
    pipeline = subprocess.run(
        f"'{executable}' sessions list | head -c 10",
        shell=True,
        capture_output=True,
        env={**os.environ, "FOLIKO_HOME": str(foliko_home)},
    )
    assert b"Traceback" not in pipeline.stderr
