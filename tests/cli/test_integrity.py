"""A damaged session through the CLI, on every backend: each hole made behind
foliko's back (tests/storage/damage.py) is reported by show, list, chat and
storage check, never written over, and moved aside by --repair, which goes on
to the end and reports everything. Search works around it. A bad option in a
storage URL is exit 2 naming it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson
import pytest
from storage import damage, services

BACKENDS = ("json", "sqlite", "postgres", "redis")
LISTED_MARKED = {"json", "redis"}  # a SQL listing reads no message (SPEC §5, P3)


def one_line_naming_the_damage(stderr: str) -> str:
    (line,) = stderr.splitlines()
    assert line.startswith("foliko: error: session 'victim' is damaged ("), line
    assert "nothing was written to it" in line
    assert line.endswith("(foliko storage check --repair)"), line
    return line


CASES = [
    (backend, hole)
    for backend in BACKENDS
    for hole in damage.HOLES[backend]
    if hole != "no-content" or backend == "sqlite"
]


@pytest.mark.parametrize(("backend", "hole"), CASES, ids=[f"{b}-{h}" for b, h in CASES])
def test_a_damaged_session_is_reported_everywhere_and_never_written_over(
    invoke, tmp_path, foliko_home, backend, hole
):
    with services.backend_url(backend, tmp_path) as url:

        def foliko(*args: str, input: str | None = None):
            return invoke("--storage", url, *args, input=input)

        for text in ("alpha one", "alpha two", "alpha three"):
            assert foliko("chat", "-s", "victim", text).exit_code == 0
        assert foliko("chat", "-s", "intact", "alpha intact").exit_code == 0
        left = damage.damage_at(url, foliko_home, "victim", hole)

        shown = foliko("sessions", "show", "victim")
        assert shown.exit_code == 3 and shown.stdout == ""
        line = one_line_naming_the_damage(shown.stderr)
        chatted = foliko("chat", "-s", "victim", "lost turn")
        assert (chatted.exit_code, chatted.stdout) == (3, "")
        assert one_line_naming_the_damage(chatted.stderr) == line
        for write in (
            ["chat", "-s", "victim", "--new", "lost"],
            ["chat", "-s", "forked", "--from", "victim", "lost"],
            ["sessions", "rename", "victim", "renamed"],
            ["sessions", "clear", "victim"],
        ):
            assert foliko(*write).exit_code == 3, write
        assert damage.snapshot_at(url, foliko_home, "victim") == left

        listed = foliko("sessions", "list", "--json")
        assert listed.exit_code == 0
        rows = {row["session_id"]: row for row in orjson.loads(listed.stdout)}
        assert "damaged" not in rows["intact"]
        if backend in LISTED_MARKED:
            assert rows["victim"]["damaged"] is True and rows["victim"]["error"]
            assert rows["victim"]["preview"].startswith("DAMAGED: ")
            assert "session 'victim' is damaged (" in listed.stderr

        checked = foliko("storage", "check")
        assert checked.exit_code == 3
        assert [row.split("\t")[0] for row in checked.stdout.splitlines()] == ["victim"]
        repaired = foliko("storage", "check", "--repair")
        assert repaired.exit_code == 0, repaired.stderr
        assert "moved 'victim' aside to " in repaired.stderr
        assert foliko("storage", "check").exit_code == 0
        assert foliko("chat", "-s", "victim", "anew").exit_code == 0  # its name is free again
        assert orjson.loads(foliko("sessions", "show", "intact", "--json").stdout)["messages"]


def test_a_damaged_session_can_be_deleted(invoke, tmp_path, foliko_home):
    url = f"sqlite:///{tmp_path}/sessions.db"
    invoke("--storage", url, "chat", "-s", "victim", "one")
    invoke("--storage", url, "chat", "-s", "victim", "two")
    damage.damage_at(url, foliko_home, "victim", "metadata-gone")
    deleted = invoke("--storage", url, "sessions", "delete", "victim")
    assert (deleted.exit_code, deleted.stdout) == (0, "victim\n")
    assert invoke("--storage", url, "storage", "check").exit_code == 0


def test_chat_on_a_damaged_session_exits_3_with_one_line_as_a_process(run_foliko, foliko_home):
    assert run_foliko("chat", "-s", "victim", "one").returncode == 0
    assert run_foliko("chat", "-s", "victim", "two").returncode == 0
    with sqlite3.connect(foliko_home / "sessions.db") as db:
        db.execute("DELETE FROM messages WHERE session_id = 'victim' AND seq = 1")
    db.close()
    done = run_foliko("chat", "-s", "victim", "three")
    assert (done.returncode, done.stdout) == (3, b"")
    line = one_line_naming_the_damage(done.stderr.decode())
    assert "(it counts 4 messages but seq 1 is missing)" in line


@pytest.fixture
def json_store(invoke, foliko_home) -> Path:
    """Sessions a-e in JSON files: b a symbolic link to a copy, d not JSON."""
    for sid in "abcde":
        assert invoke("--storage", "json", "chat", "-s", sid, f"alpha {sid}").exit_code == 0
    sessions = foliko_home / "sessions"
    copy = foliko_home / "elsewhere.json"
    (sessions / "b.json").rename(copy)
    (sessions / "b.json").symlink_to(copy)
    (sessions / "d.json").write_bytes(b'{"sessionId": "d", "messages": [tru')
    return sessions


def test_repair_moves_a_symlinked_file_aside_among_others_and_reports_each(invoke, json_store):
    checked = invoke("--storage", "json", "storage", "check", "--json")
    assert checked.exit_code == 3
    assert sorted(p["session_id"] for p in orjson.loads(checked.stdout)) == ["b", "d"]
    repaired = invoke("--storage", "json", "storage", "check", "--repair", "--json")
    assert repaired.exit_code == 0
    moved = {p["session_id"]: p["moved_to"] for p in orjson.loads(repaired.stdout)}
    assert set(moved) == {"b", "d"}
    assert all(Path(where).parent == json_store / ".quarantine" for where in moved.values())
    assert Path(moved["b"]).is_symlink()  # the link itself, its target untouched
    assert (json_store.parent / "elsewhere.json").exists()
    ids = [
        row["session_id"]
        for row in orjson.loads(invoke("--storage", "json", "sessions", "list", "--json").stdout)
    ]
    assert sorted(ids) == ["a", "c", "e"]


def test_repair_goes_on_past_a_failure_and_reports_everything(invoke, json_store, monkeypatch):
    from foliko_cli.errors import StorageError
    from foliko_cli.storage.jsonfile import JsonStorage

    quarantine = JsonStorage.quarantine

    async def failing_for_b(self, problem):
        if problem.session_id == "b":
            raise StorageError("cannot move aside /x/b.json: Permission denied")
        return await quarantine(self, problem)

    monkeypatch.setattr(JsonStorage, "quarantine", failing_for_b)
    stray = json_store / ".locks" / "gone.lock"
    stray.write_text("pid 1 on elsewhere")
    repaired = invoke("--storage", "json", "storage", "check", "--repair")
    assert repaired.exit_code == 3
    lines = repaired.stderr.splitlines()
    assert "foliko: error: could not repair 'b': cannot move aside /x/b.json" in lines[0]
    assert any(line.startswith("foliko: moved 'd' aside to ") for line in lines)
    assert f"foliko: stray file {stray} removed" in lines
    assert len(lines) == 3
    assert not (json_store / "d.json").exists() and not stray.exists()


def test_search_goes_on_past_a_bad_file_and_names_it(invoke, json_store):
    found = invoke("--storage", "json", "sessions", "search", "alpha", "--json")
    assert found.exit_code == 0
    assert sorted(hit["session_id"] for hit in orjson.loads(found.stdout)) == [
        "a",
        "a",
        "c",
        "c",
        "e",
        "e",
    ]
    lines = found.stderr.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("foliko: session 'b' was left out of the search: it is damaged (")
    assert lines[1].startswith("foliko: session 'd' was left out of the search: it is damaged (")
    only = invoke("--storage", "json", "sessions", "search", "alpha", "--session", "d")
    assert only.exit_code == 3
    assert only.stderr.startswith("foliko: error: session 'd' is damaged (")


def test_search_of_sqlite_with_a_bad_row_names_it_and_finds_the_rest(invoke, foliko_home):
    for sid in ("victim", "intact"):
        assert invoke("chat", "-s", sid, "alpha one").exit_code == 0
        assert invoke("chat", "-s", sid, "alpha two").exit_code == 0
    damage.damage_at("sqlite", foliko_home, "victim", "message-lost")
    found = invoke("sessions", "search", "alpha", "--json")
    assert found.exit_code == 0, found.stderr
    assert {hit["session_id"] for hit in orjson.loads(found.stdout)} == {"intact"}
    (line,) = found.stderr.splitlines()
    assert line.startswith("foliko: session 'victim' was left out of the search: it is damaged (")
    assert "Traceback" not in found.stderr


def test_search_of_sqlite_reads_the_kept_text_of_a_message_whose_body_lost_its_content(
    invoke, foliko_home
):
    """Search reads the text kept with the index, not the body: a hit in a message
    whose stored body was damaged is still found, and show names the damage."""
    for sid in ("victim", "intact"):
        assert invoke("chat", "-s", sid, "alpha one").exit_code == 0
    damage.damage_at("sqlite", foliko_home, "victim", "no-content")
    found = invoke("sessions", "search", "alpha", "--json")
    assert (found.exit_code, found.stderr) == (0, "")
    assert {hit["session_id"] for hit in orjson.loads(found.stdout)} == {"intact", "victim"}
    assert invoke("sessions", "show", "victim").exit_code == 3


BAD_URLS = [
    ("sqlite:///x.db?mode=ro", "unknown option 'mode' in storage URL"),
    ("sqlite:////tmp/x.db#part", "unknown part 'part' in storage URL"),
    ("json:///dir?pretty=1", "unknown option 'pretty' in storage URL"),
    ("redis://127.0.0.1:6379/0?foo=1", "unknown option 'foo' in the Redis URL"),
    ("redis://127.0.0.1:6379/0?socket_timeout=soon", "'socket_timeout'"),
    ("redis://127.0.0.1:6379/0?lease_ms=long", "lease_ms must be"),
    ("postgresql://u@127.0.0.1:5432/test?sslmode=bogus", "bad option 'sslmode'"),
    ("postgresql://u@127.0.0.1:5432/test?foo=1", "bad option 'foo'"),
    ("postgresql://u@127.0.0.1:5432/test?connect_timeout=x", "bad option 'connect_timeout'"),
    ("postgresql://u@127.0.0.1:5432/test?operation_timeout=0", "bad option 'operation_timeout'"),
    ("postgresql://u@127.0.0.1:5432/test?operation_timeout=x", "bad option 'operation_timeout'"),
]
"""Refused before any connection is made: no server is needed."""


@pytest.mark.parametrize(("url", "named"), BAD_URLS, ids=[url for url, _ in BAD_URLS])
def test_a_bad_option_in_a_storage_url_is_exit_2_naming_it(invoke, url, named):
    for args in (["sessions", "list"], ["chat", "-s", "s", "hi"]):
        result = invoke("--storage", url, *args, env={"FOLIKO_MODEL": "echo"})
        assert result.exit_code == 2, result.stderr
        (line,) = result.stderr.splitlines()
        assert named in line
        assert "is the server running" not in line


@pytest.mark.parametrize(
    "option", ["keepalives=x", "options=-c%20no_such_setting%3D1", "target_session_attrs=x"]
)
def test_an_option_the_server_or_the_connection_refuses_is_exit_2_too(invoke, option):
    url = services.require_postgres()
    result = invoke("--storage", f"{url}?{option}", "sessions", "list")
    assert result.exit_code == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("foliko: error: bad option '")
    assert "is the server running" not in line


def test_a_bad_postgresql_option_is_exit_2_as_a_process(run_foliko):
    pytest.importorskip("psycopg")
    done = run_foliko(
        "--storage", "postgresql://u@127.0.0.1:5432/test?sslmode=bogus", "sessions", "list"
    )
    assert done.returncode == 2
    (line,) = done.stderr.decode().splitlines()
    assert line.startswith("foliko: error: bad option 'sslmode' in the PostgreSQL URL: ")
    assert 'invalid sslmode value: "bogus"' in line
