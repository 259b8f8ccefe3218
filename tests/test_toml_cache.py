"""A config file is parsed once per content: later reads use the cached parse."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from foliko_cli.common import toml_cache
from foliko_cli.common.settings import cache_dir
from foliko_cli.errors import UsageError

TEXT = b'model = "echo"\n[mcp_servers.one]\ncommand = "x"\nargs = ["a", "b"]\n'


def entries() -> list[Path]:
    return sorted((cache_dir() / "toml").glob("*.marshal"))


def no_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(text: str) -> dict[str, object]:
        raise AssertionError("parsed again")

    monkeypatch.setattr(tomllib, "loads", refuse)


def test_the_second_read_of_the_same_bytes_is_not_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config.toml"
    first = toml_cache.load_toml(path, TEXT, cache_dir())
    assert first == tomllib.loads(TEXT.decode())
    assert len(entries()) == 1
    no_parser(monkeypatch)
    assert toml_cache.load_toml(path, TEXT, cache_dir()) == first


def test_an_edit_is_parsed_afresh_and_replaces_the_entry(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    toml_cache.load_toml(path, TEXT, cache_dir())
    edited = TEXT.replace(b'"echo"', b'"echo2"')
    assert toml_cache.load_toml(path, edited, cache_dir())["model"] == "echo2"
    assert len(entries()) == 1


def test_dates_are_not_cached(tmp_path: Path) -> None:
    table = toml_cache.load_toml(tmp_path / "c.toml", b"when = 2026-12-03\n", cache_dir())
    assert str(table["when"]) == "2026-12-03"
    assert entries() == []


def test_a_damaged_entry_is_a_miss_and_is_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config.toml"
    toml_cache.load_toml(path, TEXT, cache_dir())
    (entry,) = entries()
    entry.write_bytes(b"\x00not marshal")
    assert toml_cache.load_toml(path, TEXT, cache_dir())["model"] == "echo"
    no_parser(monkeypatch)
    assert toml_cache.load_toml(path, TEXT, cache_dir())["model"] == "echo"


def test_an_unwritable_cache_is_no_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # a file: nothing can be made under it
    assert toml_cache.load_toml(tmp_path / "c.toml", TEXT, cache_dir())["model"] == "echo"


def test_invalid_toml_is_one_line_and_not_cached(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"is not valid TOML .*; fix the file"):
        toml_cache.load_toml(tmp_path / "c.toml", b"model = \n", cache_dir())
    assert entries() == []


def test_a_process_with_a_cached_config_imports_no_toml_parser() -> None:
    Path(os.environ["FOLIKO_CONFIG"]).write_text('model = "echo"\n')
    probe = (
        "import sys; from foliko_cli.common.settings import load_settings; load_settings();"
        "print('tomllib' in sys.modules)"
    )
    runs = [
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
        for _ in range(2)
    ]
    assert [run.stdout.strip() for run in runs] == ["True", "False"]
