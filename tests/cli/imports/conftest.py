"""What the import tests share: the fixture files (data/, see data/README.md for
where each format is described), the session list, and exit-code checks."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

DATA = Path(__file__).with_name("data")


def assert_exit(result, code: int, *fragments: str) -> None:
    """The exit status, no traceback, and each fragment on stderr."""
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


def assert_usage_error(result, *fragments: str) -> None:
    assert_exit(result, 2, *fragments)
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def turns(session: dict) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in session["messages"]]


@pytest.fixture
def session_ids(invoke):
    def listed() -> list[str]:
        result = invoke("sessions", "list", "--json")
        assert result.exit_code == 0, result.stderr
        return sorted(row["session_id"] for row in orjson.loads(result.stdout))

    return listed


@pytest.fixture
def copied(tmp_path: Path):
    """A fixture file or directory copied to tmp_path, to change it in a test."""

    def copy(name: str) -> Path:
        source = DATA / name
        target = tmp_path / "copied" / name
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
        return target

    return copy
