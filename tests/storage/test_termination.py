"""SIGTERM (systemd, `timeout`, a CI cancel) is handled like Ctrl-C on every backend:
the turn is cancelled unsaved, every lock and lease is released, exit 143."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from trusting import trust

from . import services

FOLIKO = str(Path(sys.executable).with_name("foliko"))
STUCK_TOOL = '''
import os, pathlib, threading


def stuck() -> str:
    """Blocks until the test is over."""
    pathlib.Path(os.environ["STUCK_MARKER"]).touch()
    threading.Event().wait(120)
    return "too late"
'''


def wait_for(path: Path, process: subprocess.Popen, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the tool never started"
        time.sleep(0.02)  # polling observable state, bounded


@pytest.mark.parametrize("name", ["sqlite", "json", "postgres", "redis"])
def test_sigterm_mid_turn_saves_nothing_and_releases_the_session(name, tmp_path, foliko_home):
    (tmp_path / "stucktool.py").write_text(STUCK_TOOL)
    (tmp_path / "foliko.toml").write_text('tools = ["stucktool:stuck"]\n')
    trust(tmp_path / "foliko.toml")
    marker = tmp_path / "started"
    with services.backend_url(name, tmp_path) as url:
        env = {**os.environ, "FOLIKO_MODEL": "echo", "FOLIKO_STORAGE": url}
        turn = subprocess.Popen(
            [FOLIKO, "chat", "-s", "s", "/tool stuck {}"],
            cwd=tmp_path,
            env={**env, "STUCK_MARKER": str(marker)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for(marker, turn)
        turn.send_signal(signal.SIGTERM)
        out, err = turn.communicate(timeout=60)
        assert turn.returncode == 143, err
        assert out == ""
        assert err.strip().endswith("interrupted; the turn was not saved")
        after = subprocess.run(
            [FOLIKO, "chat", "-s", "s", "next", "--timeout", "5", "--json"],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert after.returncode == 0, after.stderr  # a held lease would make this exit 4
        shown = subprocess.run(
            [FOLIKO, "sessions", "show", "s", "--json"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            check=True,
        )
    messages = orjson.loads(shown.stdout)["messages"]
    assert [m["content"] for m in messages] == ["next", "next"]
