"""`foliko storage migrate` through the real CLI: seed files, corruption, interruption."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

FOLIKO = Path(sys.executable).with_name("foliko")
HANG = 120


def foliko(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(FOLIKO), *args], capture_output=True, env=env, stdin=subprocess.DEVNULL, timeout=HANG
    )


@pytest.fixture
def env(tmp_path: Path) -> dict:
    return {**os.environ, "FOLIKO_HOME": str(tmp_path / "home"), "FOLIKO_MODEL": "echo"}


def seed_document(session_id: str, turns: int) -> dict:
    """A session file as the original foliko wrote it (AI-SDK messages, camelCase)."""
    messages = []
    for i in range(turns):
        messages.append({"role": "user", "content": f"{session_id} question {i}"})
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"answer {i}"}]})
    return {
        "sessionId": session_id,
        "messages": messages,
        "variables": {"lang": "fr", "n": turns},
        "metadata": {
            "createdAt": 1_700_000_000_000,
            "lastActive": 1_700_000_100_000,
            "messageCount": len(messages),
            "compressionCount": 0,
        },
        "savedAt": 1_700_000_100_000,
    }


def write_seed_files(directory: Path, count: int, turns: int = 2) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    ids = [f"s{i:05d}" for i in range(count)]
    for session_id in ids:
        (directory / f"{session_id}.json").write_bytes(
            orjson.dumps(seed_document(session_id, turns), option=orjson.OPT_INDENT_2)
        )
    return ids


def test_seed_files_migrate_to_sqlite_and_show_the_same(tmp_path, env):
    ids = [*write_seed_files(tmp_path / "seed", 5), "Mixed Case.v1"]
    (tmp_path / "seed" / "Mixed Case.v1.json").write_bytes(
        orjson.dumps(seed_document("Mixed Case.v1", 3))
    )
    source, target = f"json:///{tmp_path}/seed", f"sqlite:///{tmp_path}/out.db"
    before = {p.name: p.read_bytes() for p in (tmp_path / "seed").iterdir()}

    result = foliko("storage", "migrate", source, target, "--json", env=env)
    assert result.returncode == 0, result.stderr.decode()
    assert orjson.loads(result.stdout)["copied"] == len(ids)
    for session_id in ids:
        shown = [
            orjson.loads(
                foliko("--storage", url, "sessions", "show", session_id, "--json", env=env).stdout
            )
            for url in (source, target)
        ]
        assert shown[0] == shown[1]
        assert shown[1]["messages"][1]["content"] == "answer 0"
    after = {p.name: p.read_bytes() for p in (tmp_path / "seed").iterdir() if p.is_file()}
    assert after == before, "the source is never changed"


def test_a_corrupt_source_session_is_reported_and_the_rest_copied(tmp_path, env):
    ids = write_seed_files(tmp_path / "seed", 3)
    broken = tmp_path / "seed" / "broken.json"
    broken.write_bytes(b'{"sessionId": "broken", "messages": [')
    result = foliko(
        "storage",
        "migrate",
        f"json:///{tmp_path}/seed",
        f"sqlite:///{tmp_path}/out.db",
        "--json",
        env=env,
    )
    assert result.returncode == 3
    summary = orjson.loads(result.stdout)
    assert summary["copied"] == len(ids)
    assert [f["session_id"] for f in summary["failed"]] == ["broken"]
    assert b"broken" in result.stderr
    assert broken.read_bytes() == b'{"sessionId": "broken", "messages": ['


def test_an_interrupted_migration_finishes_when_run_again(tmp_path, env):
    ids = write_seed_files(tmp_path / "seed", 4000, turns=1)
    database = tmp_path / "out.db"
    source, target = f"json:///{tmp_path}/seed", f"sqlite:///{database}"
    process = subprocess.Popen(
        [str(FOLIKO), "storage", "migrate", source, target],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def copied() -> int:
        try:
            with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
                return db.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
        except sqlite3.Error:
            return 0

    deadline = time.monotonic() + HANG
    while process.poll() is None and copied() == 0 and time.monotonic() < deadline:
        time.sleep(0.001)  # polling the database, not waiting out a race
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=HANG)
    partial = copied()
    if process.returncode != -signal.SIGKILL or partial == len(ids):
        pytest.skip("the migration finished before it could be interrupted")
    assert 0 < partial < len(ids)

    again = foliko("storage", "migrate", source, target, "--json", env=env)
    assert again.returncode == 0, again.stderr.decode()
    summary = orjson.loads(again.stdout)
    assert summary["skipped"] == partial
    assert summary["copied"] == len(ids) - partial
    assert copied() == len(ids)
    with sqlite3.connect(database) as db:
        counts = db.execute(
            "SELECT COUNT(*), COUNT(DISTINCT session_id || ':' || seq) FROM messages"
        ).fetchone()
    assert counts == (2 * len(ids), 2 * len(ids)), "no message twice"
