"""Where a SQLite or JSON store may be: a storage URL that cannot be right is
refused (exit 2, naming the path and the right form), a mistyped path is never
created and never looks like a store without sessions, ``storage init``
creates one on purpose, and a full disk is named as one (exit 3, one line).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from foliko_cli.cli.main import cli
from foliko_cli.errors import ExitCode, StorageConfigError, StoreNotFoundError
from foliko_cli.storage import open_storage

from .services import sample_records


@pytest.fixture
def invoke(foliko_home):
    runner = CliRunner()

    def run(*args: str, input: str | None = None):
        return runner.invoke(cli, list(args), input=input, catch_exceptions=False)

    return run


def one_error_line(result) -> str:
    (line,) = result.stderr.splitlines()
    assert line.startswith("foliko: error: "), line
    return line


# URLs of a form that cannot be right


@pytest.mark.parametrize("url", ["sqlite:/x.db", "sqlite:x.db", "json:/dir", "json:dir"])
def test_a_file_url_without_its_three_slashes_is_refused_with_the_right_form(url, tmp_path):
    with pytest.raises(StorageConfigError) as raised:
        open_storage(url, tmp_path)
    kind = url.partition(":")[0]
    assert f"{kind}:///relative/path or {kind}:////absolute/path" in str(raised.value)
    assert raised.value.exit_code == ExitCode.USAGE


def test_the_cli_refuses_one_slash_and_writes_nothing(invoke, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("--storage", "sqlite:/x.db", "chat", "-s", "s", "hi")
    assert result.exit_code == ExitCode.USAGE
    assert "sqlite:////absolute/path" in one_error_line(result)
    assert not (tmp_path / "x.db").exists() and not Path("/x.db").exists()


# a place whose directory does not exist


@pytest.mark.parametrize(
    ("url", "what"),
    [
        ("sqlite:///{tmp}/missing/dir/x.db", "SQLite database"),
        ("json:///{tmp}/missing/dir/sessions", "JSON session directory"),
    ],
)
@pytest.mark.parametrize(
    "command", [("sessions", "list"), ("chat", "-s", "s", "hi"), ("storage", "info")]
)
def test_a_store_in_a_directory_that_does_not_exist_is_exit_2_naming_it(
    invoke, tmp_path, url, what, command
):
    url = url.format(tmp=tmp_path)
    result = invoke("--storage", url, *command)
    assert (result.exit_code, result.stdout) == (ExitCode.USAGE, "")
    line = one_error_line(result)
    assert f"the directory {tmp_path}/missing/dir of the {what} {tmp_path}/missing/dir/" in line
    assert "does not exist" in line and "foliko storage init" in line
    assert not (tmp_path / "missing").exists()  # nothing created


def test_a_directory_that_is_a_file_is_refused_too(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(StoreNotFoundError, match="is not a directory"):
        open_storage(f"sqlite:///{tmp_path}/file/x.db", tmp_path)


def test_a_config_table_path_is_checked_like_a_url(tmp_path):
    with pytest.raises(StoreNotFoundError, match="missing"):
        open_storage({"type": "json", "path": str(tmp_path / "missing" / "s")}, tmp_path)


def test_the_default_home_is_still_made_on_first_use(invoke, foliko_home):
    assert not foliko_home.exists()
    listed = invoke("sessions", "list", "--json")
    assert (listed.exit_code, listed.stdout) == (0, "[]\n")
    assert invoke("chat", "-s", "s", "hi").exit_code == 0
    assert (foliko_home / "sessions.db").exists()


# a store that does not exist (its directory does)


@pytest.mark.parametrize(
    ("url", "what"),
    [
        ("sqlite:///{tmp}/typo.db", "SQLite database"),
        ("json:///{tmp}/typo", "JSON session directory"),
    ],
)
def test_listing_a_named_store_that_does_not_exist_says_so(invoke, tmp_path, url, what):
    url = url.format(tmp=tmp_path)
    for command in (("sessions", "list"), ("sessions", "export", "--all"), ("storage", "info")):
        result = invoke("--storage", url, *command)
        assert (result.exit_code, result.stdout) == (ExitCode.USAGE, ""), command
        line = one_error_line(result)
        assert f"the {what} {tmp_path}/typo" in line and "does not exist" in line
    assert not (tmp_path / "typo.db").exists() and not (tmp_path / "typo").exists()
    assert invoke("--storage", url, "chat", "-s", "s", "hi").exit_code == 0  # a write creates it
    listed = invoke("--storage", url, "sessions", "list", "--json")
    assert [row["session_id"] for row in orjson.loads(listed.stdout)] == ["s"]


def test_a_library_or_server_lists_a_new_named_store_as_empty(run, tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path}/new.db", tmp_path)
    assert storage.named and not storage.strict_reads
    assert run(storage.list_summaries()) == []
    assert not (tmp_path / "new.db").exists()


# storage init


def test_storage_init_creates_the_place_owner_only_and_is_safe_to_repeat(invoke, tmp_path):
    url = f"sqlite:///{tmp_path}/a/b/sessions.db"
    made = invoke("storage", "init", url, "--json")
    assert made.exit_code == 0, made.stderr
    info = orjson.loads(made.stdout)
    assert (info["location"], info["sessions"]) == (f"{tmp_path}/a/b/sessions.db", 0)
    for path, mode in ((tmp_path / "a", 0o700), (tmp_path / "a" / "b", 0o700)):
        assert path.stat().st_mode & 0o777 == mode
    assert (tmp_path / "a" / "b" / "sessions.db").stat().st_mode & 0o777 == 0o600
    assert invoke("--storage", url, "chat", "-s", "s", "hi").exit_code == 0
    again = invoke("--storage", url, "storage", "init", "--json")  # the --storage one
    assert again.exit_code == 0 and orjson.loads(again.stdout)["sessions"] == 1


def test_storage_init_makes_a_json_directory(invoke, tmp_path):
    made = invoke("storage", "init", f"json:///{tmp_path}/x/sessions")
    assert made.exit_code == 0, made.stderr
    assert (tmp_path / "x" / "sessions").is_dir()
    listed = invoke("--storage", f"json:///{tmp_path}/x/sessions", "sessions", "list", "--json")
    assert (listed.exit_code, listed.stdout) == (0, "[]\n")


def test_storage_init_refuses_a_malformed_url(invoke, tmp_path):
    result = invoke("storage", "init", "sqlite:/x.db")
    assert result.exit_code == ExitCode.USAGE
    assert "three slashes" in one_error_line(result)


def test_storage_init_where_nothing_can_be_created_is_exit_3(invoke, tmp_path):
    (tmp_path / "file").write_text("")
    result = invoke("storage", "init", f"sqlite:///{tmp_path}/file/sub/x.db")
    assert result.exit_code == ExitCode.STORAGE
    assert f"cannot create {tmp_path}/file/sub/x.db" in one_error_line(result)


# a full disk


@contextlib.contextmanager
def small_disk(directory: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``directory`` (root only; skipped otherwise,
    except under FOLIKO_REQUIRE_SERVICES=1, where it must work)."""
    directory.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(directory)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        why = f"cannot mount a tmpfs to fill: {mounted.stderr.strip() or 'mount failed'}"
        if os.environ.get("FOLIKO_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{why} (FOLIKO_REQUIRE_SERVICES=1)")
        pytest.skip(why)
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


def big_seed_sessions(directory: Path, count: int) -> None:
    """Seed-format session files of ~40 kB each: a batch of them is more than
    SQLite's page cache, so a full disk hits it while it spills pages."""
    directory.mkdir()
    for i in range(count):
        text = f"word{i} " * 2500
        document = {
            "sessionId": f"big-{i:04d}",
            "messages": [
                {"role": r, "content": text, "createdAt": 1} for r in ("user", "assistant")
            ],
            "variables": {},
            "metadata": {"createdAt": 1, "lastActive": 1, "messageCount": 2},
            "savedAt": 1,
        }
        (directory / f"big-{i:04d}.json").write_bytes(orjson.dumps(document))


def test_migrate_into_a_full_disk_says_disk_full_and_leaves_the_copy_consistent(invoke, tmp_path):
    source = tmp_path / "src"
    big_seed_sessions(source, 600)
    with small_disk(tmp_path / "disk", "4m") as disk:
        target = f"sqlite:///{disk}/copy.db"
        result = invoke("storage", "migrate", f"json:///{source}", target)
        assert (result.exit_code, result.stdout) == (ExitCode.STORAGE, "")
        line = one_error_line(result)
        assert "the disk is full" in line and f"{disk}/copy.db" in line
        assert "rollback" not in line
        checked = invoke("--storage", target, "storage", "check")
        assert checked.exit_code == 0, checked.stderr  # every session in it whole
        subprocess.run(["mount", "-o", "remount,size=200m", str(disk)], check=True)
        again = invoke("storage", "migrate", f"json:///{source}", target, "--json")
        assert again.exit_code == 0, again.stderr  # resumed: the rest copied
        report = orjson.loads(again.stdout)
        assert report["copied"] + report["skipped"] == 600 and report["failed"] == []


def test_a_json_store_on_a_full_disk_says_disk_full(run, tmp_path):
    with small_disk(tmp_path / "disk", "64k") as disk:
        storage = open_storage(f"json:///{disk}/sessions", tmp_path)
        records = sample_records()
        for record in records:
            record.messages = record.messages * 200
        with pytest.raises(Exception) as raised:
            for record in records:
                run(storage.save(record))
        assert raised.value.exit_code == ExitCode.STORAGE
        assert "the disk is full" in str(raised.value)


def test_a_url_of_the_default_place_is_the_default_one(invoke, foliko_home):
    url = f"sqlite:///{foliko_home}/sessions.db"  # the home does not exist yet
    assert invoke("--storage", url, "chat", "-s", "s", "hi").exit_code == 0
    assert (foliko_home / "sessions.db").exists()
