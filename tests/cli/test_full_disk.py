"""Every output checked to its end (SPEC R11): on a disk that is full, or that
fills up during the write, every command that writes standard output or a file
says so in one line and exits 3, never 0 with half a file.

Python's own buffered writer takes a short write for a whole one and drops the
rest silently; these run on a small tmpfs (mounting one needs root: the tests
skip without it, except under FOLIKO_REQUIRE_SERVICES=1).
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from filesystems import small_filesystem

pytestmark = pytest.mark.slow  # dozens of processes: in `make test`, not test-fast

FOLIKO = str(Path(sys.executable).with_name("foliko"))
BIG = "x" * 300_000  # more than the free room left for the "fills up" case
FREE_ROOM = 64 * 1024


def fill(disk: Path, leave: int = 0) -> None:
    """Fill ``disk`` up to its last ``leave`` bytes (tmpfs counts whole pages)."""
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with open(disk / "filler", "wb") as filler:
        try:
            filler.write(b"\0" * max(free - leave, 0))
            filler.flush()
            while leave == 0:
                os.write(filler.fileno(), b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


@pytest.fixture(scope="module")
def disk(tmp_path_factory) -> Iterator[Path]:
    with small_filesystem(tmp_path_factory.mktemp("full") / "disk") as mounted:
        yield mounted


@pytest.fixture
def env(foliko_home, tmp_path):
    environment = {**os.environ, "FOLIKO_HOME": str(foliko_home), "FOLIKO_MODEL": "echo"}
    sessions = [
        {"session_id": "big", "messages": [{"role": "user", "content": BIG}]},
        {"session_id": "s1", "messages": [{"role": "user", "content": "hello"}]},
    ]
    data = b"".join(orjson.dumps(s) + b"\n" for s in sessions)
    (tmp_path / "sessions.ndjson").write_bytes(data)
    loaded = subprocess.run(
        [FOLIKO, "sessions", "import", "-"], input=data, env=environment, capture_output=True
    )
    assert loaded.returncode == 0, loaded.stderr
    (tmp_path / "flow.toml").write_text('[[steps]]\nprompt = "hi"\n')
    return environment


def run(command: list[str], env: dict, out: Path | None) -> subprocess.CompletedProcess:
    with open(out, "wb") if out is not None else contextlib.nullcontext() as stdout:
        return subprocess.run(
            [FOLIKO, *command],
            stdout=stdout if out is not None else subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
            timeout=120,
        )


def one_error_line(result: subprocess.CompletedProcess) -> str:
    text = result.stderr.decode()
    assert "Traceback" not in text, text
    lines = [line for line in text.splitlines() if not line.startswith("foliko: warning")]
    assert len(lines) == 1, lines
    assert lines[0].startswith("foliko: error: "), lines
    return lines[0]


def emptied(disk: Path) -> None:
    for child in disk.iterdir():
        child.unlink()


STDOUT = [
    "sessions list",
    "sessions list --json",
    "sessions list --ndjson",
    "sessions show big",
    "sessions show big --json",
    "sessions export big",
    "sessions export --all",
    "sessions export big --format ndjson",
    "sessions export big --format markdown",
    "sessions export big --format openai",
    "sessions export big --format chatgpt",
    "sessions search hello --json",
    "sessions tree",
    "sessions vars s1",
    "sessions trash list",
    "sessions prune --older-than 9999d --dry-run --json",
    "sessions import {tmp}/sessions.ndjson --json",
    "storage info",
    "storage check --json",
    "storage migrate sqlite json:///{tmp}/copy --dry-run --json",
    "config show",
    "config path",
    "config trusted --json",
    "templates list --json",
    "templates path",
    "models list",
    "tools list",
    "agents list",
    "skills list",
    "mcp list",
    "usage",
    "completion bash",
    "workflow validate {tmp}/flow.toml",
    "chat -s new --json hi",
    "chat -s new2 --no-stream hi",
]
LARGE = [c for c in STDOUT if " big" in c or "--all" in c]


@pytest.mark.parametrize("command", STDOUT)
def test_a_full_disk_under_stdout_is_one_line_and_exit_3(disk, env, tmp_path, command):
    emptied(disk)
    fill(disk)
    result = run(command.format(tmp=tmp_path).split(), env, disk / "out")
    assert result.returncode == 3, result.stderr
    assert "No space left on device" in one_error_line(result)


@pytest.mark.parametrize("command", LARGE)
def test_a_disk_that_fills_up_during_the_output_is_exit_3(disk, env, tmp_path, command):
    """Was: `sessions export --all > FILE` exited 0 with the first part of the file."""
    emptied(disk)
    fill(disk, leave=FREE_ROOM)
    result = run(command.format(tmp=tmp_path).split(), env, disk / "out")
    assert result.returncode == 3, result.stderr
    assert "cannot write to standard output (No space left on device)" in one_error_line(result)


@pytest.mark.parametrize("fmt", ["foliko", "ndjson", "markdown", "openai", "chatgpt"])
def test_an_export_file_on_a_full_disk_is_exit_3_and_nothing_is_left(disk, env, fmt):
    emptied(disk)
    fill(disk, leave=FREE_ROOM)
    target = disk / f"export.{fmt}"
    result = run(["sessions", "export", "--all", "--format", fmt, "-o", str(target)], env, None)
    assert result.returncode == 3, result.stderr
    line = one_error_line(result)
    assert str(target) in line and "No space left on device" in line
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]


def test_files_kept_in_the_config_and_home_on_a_full_disk_are_exit_3(disk, env, tmp_path):
    emptied(disk)
    config = disk / "config.toml"
    config.touch()
    (tmp_path / "foliko.toml").write_text('tools = ["x:y"]\n')
    fill(disk)
    on_disk = {**env, "FOLIKO_CONFIG": str(config)}
    saved = run(["chat", "--save", "kit", "--system", "x" * 20_000, "hi"], on_disk, None)
    assert saved.returncode == 3, saved.stderr
    assert "cannot save template 'kit'" in one_error_line(saved)
    trusted = subprocess.run(
        [FOLIKO, "config", "trust", str(tmp_path / "foliko.toml")],
        capture_output=True,
        env={**env, "FOLIKO_HOME": str(disk / "home")},
        timeout=60,
    )
    assert trusted.returncode == 3, trusted.stderr
    assert "cannot write the trust store" in one_error_line(trusted)
