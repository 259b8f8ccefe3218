"""A fragment is stored once however often it is used: a 1 MB file used in 100
turns (over 20 sessions of 5 turns) leaves a store of little more than 1 MB,
measured on the disk for SQLite and JSON files."""

from __future__ import annotations

from pathlib import Path

import pytest

from foliko_cli import Foliko
from foliko_cli.messages.fragments import Fragment, digest

from .test_conformance import QuietModel

MB = 1024 * 1024
TEXT = ("0123456789abcdef" * 4 + "\n") * (MB // 65)  # about 1 MB of text


def disk_size(path: Path) -> int:
    """The bytes of ``path``'s files (the file, its -wal and -shm, or a tree)."""
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())


@pytest.mark.slow  # 100 synced writes
@pytest.mark.parametrize("kind", ["sqlite", "json"])
def test_a_1_mb_fragment_used_in_100_turns_is_stored_once(kind, tmp_path):
    where = tmp_path / ("sessions.db" if kind == "sqlite" else "sessions")
    model = QuietModel()
    fragment = Fragment(TEXT, "big.txt")
    with Foliko(f"{kind}:///{where}", model, home=tmp_path / "home") as foliko:
        for turn in range(100):
            foliko.chat(f"s{turn // 5}", f"question {turn}", fragments=[fragment])
        stored = foliko.get_session("s19")
    size = disk_size(where)
    assert len(TEXT.encode()) > MB - 1024
    assert size < 2 * MB, f"{size:,} bytes for 100 uses of a {len(TEXT):,}-byte fragment"
    assert [m["fragments"][0]["sha256"] for m in stored.messages if m["role"] == "user"] == [
        digest(TEXT)
    ] * 5
    sent = model.requests[-1].messages
    assert sent[-1]["content"] == f"{TEXT}\nquestion 99"
