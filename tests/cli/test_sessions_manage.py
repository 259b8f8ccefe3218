"""`foliko sessions list|show|delete|rename|clear|export|import|prune|vars` and
`foliko storage migrate|check|info`, every option and error path, through CliRunner."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import orjson
import pytest
from storage.test_sqlite import damage_the_index

from foliko_cli.common.clock import now_ms
from foliko_cli.messages.record import SessionRecord, new_metadata
from foliko_cli.storage.filelock import lock_name
from foliko_cli.storage.sqlite import SQLiteStorage

MINUTE = 60_000
HOUR = 60 * MINUTE
DAY = 24 * HOUR


def store(
    home: Path,
    session_id: str,
    *,
    updated_at: int,
    created_at: int | None = None,
    count: int = 2,
    variables: dict | None = None,
) -> None:
    """Write a session with chosen timestamps straight through the SQLite adapter."""
    messages = [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"{session_id} message {i}",
            "created_at": updated_at,
            "request_id": "r" * 16,
            "trace_id": "t" * 32,
        }
        for i in range(count)
    ]
    record = SessionRecord(
        session_id,
        messages=messages,
        variables=variables or {},
        metadata=new_metadata(created_at if created_at is not None else updated_at),
        saved_at=updated_at,
    )

    async def save() -> None:
        storage = SQLiteStorage(home / "sessions.db")
        try:
            await storage.save(record)
        finally:
            await storage.close()

    asyncio.run(save())


def ids(result) -> list[str]:
    assert result.exit_code == 0, result.stderr
    return [row["session_id"] for row in orjson.loads(result.stdout)]


def assert_usage_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


@pytest.fixture
def chat(invoke):
    def run(session_id: str, message: str, *extra: str) -> None:
        result = invoke("chat", "-s", session_id, message, *extra, env={"FOLIKO_MODEL": "echo"})
        assert result.exit_code == 0, result.stderr

    return run


# list


@pytest.fixture
def three(foliko_home):
    """a: created newest, updated oldest, fewest messages; b: created oldest, most
    messages; c: updated newest. Every sort order differs from the others."""
    now = now_ms()
    store(foliko_home, "a", created_at=now - 1 * DAY, updated_at=now - 2 * DAY, count=2)
    store(foliko_home, "b", created_at=now - 10 * DAY, updated_at=now - 2 * HOUR, count=6)
    store(foliko_home, "c", created_at=now - 3 * DAY, updated_at=now - 10 * MINUTE, count=4)
    return now


@pytest.mark.parametrize(
    ("sort", "expected"),
    [
        (None, ["c", "b", "a"]),
        ("updated", ["c", "b", "a"]),
        ("created", ["a", "c", "b"]),
        ("messages", ["b", "c", "a"]),
        ("name", ["a", "b", "c"]),
    ],
)
def test_list_sort_orders(invoke, three, sort, expected):
    extra = ["--sort", sort] if sort else []
    assert ids(invoke("sessions", "list", "--json", *extra)) == expected


def test_list_rows_carry_counts_and_times(invoke, three):
    rows = orjson.loads(invoke("sessions", "list", "--json", "--sort", "name").stdout)
    assert [(r["session_id"], r["message_count"]) for r in rows] == [("a", 2), ("b", 6), ("c", 4)]
    assert rows[0]["created_at"] == three - DAY
    assert rows[0]["updated_at"] == three - 2 * DAY
    assert rows[0]["preview"] == "a message 0"


@pytest.mark.parametrize(
    ("sort", "limit", "expected"),
    [("updated", "1", ["c"]), ("messages", "2", ["b", "c"]), ("name", "10", ["a", "b", "c"])],
)
def test_list_limit(invoke, three, sort, limit, expected):
    assert ids(invoke("sessions", "list", "--json", "--sort", sort, "--limit", limit)) == expected


@pytest.mark.parametrize(
    ("since", "expected"),
    [
        ("1h", ["c"]),
        ("3h", ["c", "b"]),
        ("1d", ["c", "b"]),
        ("1d12h", ["c", "b"]),
        ("7d", ["c", "b", "a"]),
        ("1w", ["c", "b", "a"]),
        ("1.5d", ["c", "b"]),
        ("2880m", ["c", "b"]),
    ],
)
def test_list_since(invoke, three, since, expected):
    assert ids(invoke("sessions", "list", "--json", "--since", since)) == expected


def test_list_since_one_second_keeps_only_the_fresh_session(invoke, three, foliko_home):
    # stamped a minute ahead so the assertion does not depend on how fast the test runs
    store(foliko_home, "fresh", updated_at=now_ms() + MINUTE)
    assert ids(invoke("sessions", "list", "--json", "--since", "1s")) == ["fresh"]
    assert ids(invoke("sessions", "list", "--json", "--since", "90s")) == ["fresh"]


def test_list_since_limit_and_sort_combine(invoke, three):
    result = invoke("sessions", "list", "--json", "--since", "7d", "--sort", "name", "--limit", "2")
    assert ids(result) == ["a", "b"]


@pytest.mark.parametrize("bad", ["7", "7x", "d", "-1d", "1d-", "", "soon", "1 d"])
def test_list_bad_duration_exits_2(invoke, bad):
    assert_usage_error(invoke("sessions", "list", "--since", bad), "not a duration")


@pytest.mark.parametrize(
    "args",
    [
        ["--limit", "0"],
        ["--limit", "x"],
        ["--sort", "size"],
        ["--format", "xml"],
        ["--bogus"],
    ],
)
def test_list_bad_options_exit_2(invoke, args):
    assert_usage_error(invoke("sessions", "list", *args))


def test_list_json_and_format_json_agree(invoke, three):
    short = invoke("sessions", "list", "--json")
    long = invoke("sessions", "list", "--format", "json")
    assert short.exit_code == long.exit_code == 0
    assert orjson.loads(short.stdout) == orjson.loads(long.stdout)
    assert short.stderr == ""


def test_list_ndjson_one_object_per_line(invoke, three):
    for flag in (["--ndjson"], ["--format", "ndjson"]):
        result = invoke("sessions", "list", *flag)
        assert result.exit_code == 0
        lines = result.stdout.splitlines()
        assert len(lines) == 3
        rows = [orjson.loads(line) for line in lines]
        assert [r["session_id"] for r in rows] == ["c", "b", "a"]
        assert rows == orjson.loads(invoke("sessions", "list", "--json").stdout)


def test_list_tsv_is_the_default_in_a_pipe(invoke, three):
    explicit = invoke("sessions", "list", "--format", "tsv")
    default = invoke("sessions", "list")
    assert explicit.stdout == default.stdout
    lines = explicit.stdout.splitlines()
    header = ["session_id", "message_count", "updated_at", "preview", "title"]
    assert lines[0].split("\t") == header  # the title last: cut -f keeps its columns
    assert lines[1].split("\t") == ["c", "4", str(three - 10 * MINUTE), "c message 2", ""]
    assert len(lines) == 4


def test_list_table_has_headers_and_rows(invoke, three):
    result = invoke("sessions", "list", "--format", "table")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["session", "title", "messages", "updated", "last", "prompt"]
    assert [line.split()[0] for line in lines[2:]] == ["c", "b", "a"]


def test_list_empty_in_every_format(invoke):
    assert invoke("sessions", "list", "--json").stdout == "[]\n"
    assert invoke("sessions", "list", "--ndjson").stdout == ""
    assert invoke("sessions", "list", "--format", "tsv").stdout.splitlines() == [
        "session_id\tmessage_count\tupdated_at\tpreview\ttitle"
    ]


def test_last_format_flag_wins(invoke, three):
    result = invoke("sessions", "list", "--json", "--ndjson")
    assert len(result.stdout.splitlines()) == 3


# show


@pytest.fixture
def four(chat):
    chat("s", "one")
    chat("s", "two")


@pytest.mark.parametrize(
    ("tail", "expected"),
    [("0", []), ("1", ["two"]), ("2", ["two", "two"]), ("3", ["one", "two", "two"]), ("99", None)],
)
def test_show_tail(invoke, four, tail, expected):
    data = orjson.loads(invoke("sessions", "show", "s", "--json", "--tail", tail).stdout)
    everything = ["one", "one", "two", "two"]
    assert [m["content"] for m in data["messages"]] == (
        everything if expected is None else expected
    )
    assert data["metadata"]["message_count"] == 4


def test_show_text_tail_prints_only_the_last_messages(invoke, four):
    result = invoke("sessions", "show", "s", "--tail", "1")
    assert result.exit_code == 0
    assert "messages  4" in result.stdout
    assert result.stdout.count("[user]") == 0
    assert result.stdout.count("[assistant]") == 1


@pytest.mark.parametrize(("fmt", "blocks"), [("text", 1), ("markdown", 2)])
def test_show_tail_reads_only_the_end_of_the_history(invoke, four, monkeypatch, fmt, blocks):
    """The header (with the whole count) and the last messages, numbered as in
    the whole view; ``blocks``: paragraphs a message (and the header) takes."""
    whole = invoke("sessions", "show", "s", "--format", fmt).stdout.split("\n\n")

    def load(*args):
        raise AssertionError("show --tail loaded the whole history")

    monkeypatch.setattr("foliko_cli.storage.sqlite.SQLiteStorage.load", load)
    tail = invoke("sessions", "show", "s", "--format", fmt, "--tail", "3").stdout
    assert tail.split("\n\n") == whole[:blocks] + whole[2 * blocks :]
    none = invoke("sessions", "show", "s", "--format", fmt, "--tail", "0").stdout
    assert none == "\n\n".join(whole[:blocks]) + "\n"


def test_show_text_lists_variables_and_system_prompt(invoke, chat):
    chat("s", "hi", "--var-json", "n=3", "--var", "city=Paris", "--system", "Be brief.")
    out = invoke("sessions", "show", "s").stdout
    assert 'var       city = "Paris"' in out
    assert "var       n = 3" in out
    assert "system    Be brief." in out


@pytest.mark.parametrize("tail", ["-1", "x"])
def test_show_bad_tail_exits_2(invoke, four, tail):
    assert_usage_error(invoke("sessions", "show", "s", "--tail", tail))


def test_show_unknown_with_json_exits_2_and_prints_nothing(invoke):
    assert_usage_error(invoke("sessions", "show", "ghost", "--json"), "'ghost' not found")


def test_show_without_id_exits_2(invoke):
    assert_usage_error(invoke("sessions", "show"))


# delete


def test_delete_several(invoke, chat):
    for sid in ("a", "b", "c"):
        chat(sid, "x")
    result = invoke("sessions", "delete", "a", "c")
    assert result.exit_code == 0
    assert result.stdout == "a\nc\n"
    assert result.stderr == ""
    assert ids(invoke("sessions", "list", "--json")) == ["b"]


def test_delete_reports_unknown_ids_and_still_deletes_the_known_ones(invoke, chat):
    chat("a", "x")
    chat("b", "y")
    chat("keep", "z")
    result = invoke("sessions", "delete", "a", "nope", "b", "gone")
    assert result.exit_code == 2
    assert result.stdout == "a\nb\n"
    errors = result.stderr.splitlines()
    assert errors == [
        "foliko: error: session 'nope' not found",
        "foliko: error: session 'gone' not found",
    ]
    assert ids(invoke("sessions", "list", "--json")) == ["keep"]


def test_delete_never_prompts(invoke, chat):
    chat("a", "x")
    # no input at all: a prompt would read EOF and abort
    result = invoke("sessions", "delete", "a", input="")
    assert result.exit_code == 0
    assert result.stdout == "a\n"
    assert "?" not in result.stderr and "[y/N]" not in result.stdout


def test_delete_a_repeated_id_once(invoke, chat):
    chat("a", "x")
    result = invoke("sessions", "delete", "a", "a")
    assert result.exit_code == 0
    assert result.stdout == "a\n"


def test_delete_needs_an_id(invoke):
    assert_usage_error(invoke("sessions", "delete"))


def test_delete_invalid_id_exits_2_and_deletes_nothing(invoke, chat):
    chat("a", "x")
    result = invoke("sessions", "delete", "a", "bad\x01id")
    assert result.exit_code == 2
    assert "control character" in result.stderr
    assert ids(invoke("sessions", "list", "--json")) == ["a"]


# rename


def test_rename_moves_everything(invoke, chat, show):
    chat("old", "hello", "--var-json", "k=1", "--system", "sys")
    before = show("old")
    result = invoke("sessions", "rename", "old", "new")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    after = show("new")
    assert after["messages"] == before["messages"]
    assert after["variables"] == {"k": 1}
    assert after["metadata"]["system_prompt"] == "sys"
    assert_usage_error(invoke("sessions", "show", "old"), "not found")


def test_rename_refuses_to_overwrite(invoke, chat, show):
    chat("a", "alpha")
    chat("b", "beta")
    a, b = show("a"), show("b")
    result = invoke("sessions", "rename", "a", "b")
    assert_usage_error(result, "'b' already exists")
    assert show("a") == a
    assert show("b") == b


def test_rename_unknown_source_exits_2(invoke):
    assert_usage_error(invoke("sessions", "rename", "ghost", "new"), "'ghost' not found")
    assert ids(invoke("sessions", "list", "--json")) == []


def test_rename_onto_itself_exits_2(invoke, chat, show):
    chat("a", "x")
    before = show("a")
    assert_usage_error(invoke("sessions", "rename", "a", "a"), "already has that name")
    assert show("a") == before


def test_rename_to_an_invalid_id_exits_2(invoke, chat):
    chat("a", "x")
    assert_usage_error(invoke("sessions", "rename", "a", " padded"), "whitespace")
    assert ids(invoke("sessions", "list", "--json")) == ["a"]


@pytest.mark.parametrize("args", [[], ["only-one"], ["a", "b", "c"]])
def test_rename_wrong_arity_exits_2(invoke, args):
    assert_usage_error(invoke("sessions", "rename", *args))


def test_renamed_session_continues_with_chat(invoke, chat, show):
    chat("draft", "first")
    invoke("sessions", "rename", "draft", "final")
    chat("final", "second")
    messages = show("final")["messages"]
    assert [m["content"] for m in messages] == ["first", "first", "second", "second"]
    chat("draft", "fresh")
    assert [m["content"] for m in show("draft")["messages"]] == ["fresh", "fresh"]


# clear


def test_clear_drops_history_keeps_variables(invoke, chat, show):
    chat("s", "hi", "--var", "k=v", "--var-json", "n=2")
    result = invoke("sessions", "clear", "s")
    assert result.exit_code == 0
    assert result.stdout == ""
    data = show("s")
    assert data["messages"] == []
    assert data["variables"] == {"k": "v", "n": 2}
    assert data["metadata"]["message_count"] == 0
    rows = orjson.loads(invoke("sessions", "list", "--json").stdout)
    assert [(r["session_id"], r["message_count"]) for r in rows] == [("s", 0)]


def test_clear_all_drops_variables_too(invoke, chat, show):
    chat("s", "hi", "--var", "k=v")
    assert invoke("sessions", "clear", "s", "--all").exit_code == 0
    data = show("s")
    assert data["messages"] == [] and data["variables"] == {}


def test_cleared_session_continues(invoke, chat, show):
    chat("s", "before")
    invoke("sessions", "clear", "s")
    chat("s", "after")
    assert [m["content"] for m in show("s")["messages"]] == ["after", "after"]


def test_clear_unknown_exits_2(invoke):
    assert_usage_error(invoke("sessions", "clear", "ghost"), "'ghost' not found")
    assert_usage_error(invoke("sessions", "clear", "ghost", "--all"), "'ghost' not found")
    assert ids(invoke("sessions", "list", "--json")) == []


# export


@pytest.fixture
def pair(chat):
    chat("b", "bee", "--var-json", "x=[1,2]")
    chat("a", '/tool set_variable {"key": "k", "value": true}')


def test_export_named_sessions_in_order(invoke, pair, show):
    result = invoke("sessions", "export", "b", "a")
    assert result.exit_code == 0
    assert result.stderr == ""
    assert orjson.loads(result.stdout) == [show("b"), show("a")]


def test_export_all(invoke, pair, show):
    result = invoke("sessions", "export", "--all")
    assert orjson.loads(result.stdout) == [show("a"), show("b")]


def test_export_all_of_nothing_is_an_empty_array(invoke):
    result = invoke("sessions", "export", "--all")
    assert result.exit_code == 0
    assert orjson.loads(result.stdout) == []


def test_export_ndjson(invoke, pair, show):
    for args in (["--all"], ["a", "b"]):
        result = invoke("sessions", "export", *args, "--format", "ndjson")
        lines = result.stdout.splitlines()
        assert [orjson.loads(line) for line in lines] == [show("a"), show("b")]


def test_export_to_a_file(invoke, pair, show, tmp_path):
    target = tmp_path / "backup.json"
    result = invoke("sessions", "export", "--all", "-o", str(target))
    assert result.exit_code == 0
    assert result.stdout == ""
    assert orjson.loads(target.read_bytes()) == [show("a"), show("b")]
    target_nd = tmp_path / "backup.ndjson"
    invoke("sessions", "export", "a", "--format", "ndjson", "--output", str(target_nd))
    assert [orjson.loads(x) for x in target_nd.read_text().splitlines()] == [show("a")]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_export_to_an_unwritable_place_exits_2(invoke, pair, tmp_path):
    result = invoke("sessions", "export", "a", "-o", str(tmp_path / "no" / "dir" / "x.json"))
    assert_usage_error(result, "cannot write")


def test_export_needs_ids_or_all_but_not_both(invoke, pair):
    assert_usage_error(invoke("sessions", "export"), "--all")
    assert_usage_error(invoke("sessions", "export", "a", "--all"), "--all")


@pytest.mark.parametrize("fmt", ["foliko", "ndjson", "markdown", "openai", "chatgpt"])
def test_export_unknown_id_exits_2_and_writes_nothing(invoke, pair, tmp_path, fmt):
    target = tmp_path / "out.json"
    result = invoke("sessions", "export", "a", "ghost", "--format", fmt, "-o", str(target))
    assert_usage_error(result, "'ghost'")
    assert not target.exists()
    assert_usage_error(invoke("sessions", "export", "a", "ghost", "--format", fmt), "'ghost'")


def test_export_bad_format_exits_2_naming_the_formats(invoke, pair):
    result = invoke("sessions", "export", "a", "--format", "tsv")
    assert_usage_error(result, "foliko: error: ", "'tsv'")
    assert len(result.stderr.splitlines()) == 1
    for name in ("foliko", "json", "ndjson", "markdown", "openai", "chatgpt"):
        assert f"'{name}'" in result.stderr


def test_export_json_is_the_foliko_format_and_the_default(invoke, pair):
    default = invoke("sessions", "export", "a", "b")
    assert default.exit_code == 0
    for fmt in ("foliko", "json"):
        assert invoke("sessions", "export", "a", "b", "--format", fmt).stdout == default.stdout


# import


def assert_imported(shown: dict, original: dict) -> None:
    """``shown`` is ``original`` as an import of its export wrote it: the same,
    ``saved_at`` (when foliko last used it) included."""
    assert shown == original


@pytest.fixture
def exported(invoke, pair, tmp_path):
    path = tmp_path / "export.json"
    assert invoke("sessions", "export", "--all", "-o", str(path)).exit_code == 0
    return path


def test_import_file_restores_sessions(invoke, exported, show):
    originals = {sid: show(sid) for sid in ("a", "b")}
    invoke("sessions", "delete", "a", "b")
    result = invoke("sessions", "import", str(exported))
    assert result.exit_code == 0, result.stderr
    assert result.stderr.endswith("foliko: imported 2, unchanged 0, skipped 0\n")
    for sid in ("a", "b"):
        assert_imported(show(sid), originals[sid])


def test_import_from_stdin(invoke, exported, show):
    original = show("a")
    invoke("sessions", "delete", "a", "b")
    result = invoke("sessions", "import", "-", input=exported.read_bytes())
    assert result.stderr.endswith("foliko: imported 2, unchanged 0, skipped 0\n")
    assert_imported(show("a"), original)


def test_import_ndjson(invoke, pair, show, tmp_path):
    path = tmp_path / "all.ndjson"
    invoke("sessions", "export", "--all", "--format", "ndjson", "-o", str(path))
    originals = [show("a"), show("b")]
    invoke("sessions", "delete", "a", "b")
    assert invoke("sessions", "import", str(path)).stderr.startswith("foliko: imported 2,")
    assert_imported(show("a"), originals[0])
    assert_imported(show("b"), originals[1])


def test_import_a_single_session_object(invoke, pair, show):
    single = invoke("sessions", "show", "a", "--json").stdout
    original = show("a")
    invoke("sessions", "delete", "a")
    assert invoke("sessions", "import", "-", input=single).stderr.startswith("foliko: imported 1,")
    assert_imported(show("a"), original)


def test_reimport_is_unchanged(invoke, exported, show):
    before = {sid: show(sid) for sid in ("a", "b")}
    first = invoke("sessions", "import", str(exported))
    assert first.stderr.endswith("foliko: imported 0, unchanged 2, skipped 0\n")
    again = invoke("sessions", "import", str(exported))
    assert again.stderr.endswith("foliko: imported 0, unchanged 2, skipped 0\n")
    assert {sid: show(sid) for sid in ("a", "b")} == before


def test_import_conflict_skip_is_the_default(invoke, exported, chat, show):
    chat("a", "changed since")
    changed = show("a")
    invoke("sessions", "delete", "b")
    for extra in ([], ["--on-conflict", "skip"]):
        result = invoke("sessions", "import", str(exported), *extra)
        assert result.exit_code == 0
        assert "skipped 'a'" in result.stderr
        assert show("a") == changed
    assert result.stderr.endswith("foliko: imported 0, unchanged 1, skipped 1\n")


def test_import_conflict_replace(invoke, exported, chat, show):
    original = orjson.loads(exported.read_bytes())[0]
    chat("a", "changed since")
    result = invoke("sessions", "import", str(exported), "--on-conflict", "replace")
    assert result.stderr.endswith("foliko: imported 1, unchanged 1, skipped 0\n")
    assert show("a")["messages"] == original["messages"]
    assert show("a")["variables"] == original["variables"]


def test_import_conflict_fail_imports_nothing(invoke, exported, chat, show):
    chat("a", "changed since")
    changed = show("a")
    invoke("sessions", "delete", "b")
    result = invoke("sessions", "import", str(exported), "--on-conflict", "fail")
    assert_usage_error(result, "nothing imported", "'a'")
    assert show("a") == changed
    assert ids(invoke("sessions", "list", "--json")) == ["a"]


def test_import_bad_on_conflict_value_exits_2(invoke, exported):
    assert_usage_error(invoke("sessions", "import", str(exported), "--on-conflict", "merge"))


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"[{", "not JSON or NDJSON"),
        (b"not json at all", "not JSON or NDJSON"),
        (b'{"session_id": "a"}\n{broken\n', "not JSON or NDJSON"),
        (b"[1]", "session #1 is invalid"),
        (b'[{"messages": []}]', "session #1 is invalid"),
        (b'[{"session_id": 3}]', "session #1 is invalid"),
        (
            b'[{"session_id": "ok"}, {"session_id": "x", "messages": [{"role": "god"}]}]',
            "session #2 is invalid",
        ),
        (b'[{"session_id": "x", "messages": {}}]', "session #1 is invalid"),
        (b'[{"session_id": "x", "variables": "text"}]', "session #1 is invalid"),
        (b'[{"session_id": "x", "messages": [{"role": "user", "content": 3}]}]', "invalid"),
        (b"caf\xe9", "not valid UTF-8"),
        (b'[{"session_id": "caf\xe9"}]', "not valid UTF-8"),
    ],
)
def test_import_bad_input_exits_2_and_stores_nothing(invoke, tmp_path, content, fragment):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    assert_usage_error(invoke("sessions", "import", str(path)), fragment)
    assert_usage_error(invoke("sessions", "import", "-", input=content), fragment)
    assert ids(invoke("sessions", "list", "--json")) == []


def test_import_invalid_session_id_exits_2(invoke, tmp_path):
    path = tmp_path / "bad.json"
    path.write_bytes(orjson.dumps([{"session_id": "ok"}, {"session_id": "bad\x00id"}]))
    assert_usage_error(invoke("sessions", "import", str(path)), "control character")
    assert ids(invoke("sessions", "list", "--json")) == []


def test_import_missing_file_exits_2(invoke, tmp_path):
    assert_usage_error(invoke("sessions", "import", str(tmp_path / "nope.json")), "cannot read")


def test_import_empty_input_imports_nothing(invoke):
    result = invoke("sessions", "import", "-", input=b"")
    assert result.exit_code == 0
    assert result.stderr.endswith("foliko: imported 0, unchanged 0, skipped 0\n")


def test_export_import_round_trip_into_another_backend(invoke, chat, show, tmp_path):
    chat("t", '/tool set_variable {"key": "colour", "value": "blue"}', "--system", "S")
    chat("t", "second turn", "--var", 'n=[1, {"a": null}]')
    chat("u", "ünïcødé ✓ \t tab")
    dump = invoke("sessions", "export", "--all")
    assert dump.exit_code == 0
    imported = invoke("--storage", "json", "sessions", "import", "-", input=dump.stdout)
    assert imported.stderr.endswith("foliko: imported 2, unchanged 0, skipped 0\n")
    assert (tmp_path / "home" / "sessions" / "t.json").exists()
    for sid in ("t", "u"):
        sqlite_view = orjson.loads(invoke("sessions", "show", sid, "--json").stdout)
        json_view = orjson.loads(
            invoke("--storage", "json", "sessions", "show", sid, "--json").stdout
        )
        assert_imported(json_view, sqlite_view)
    again = invoke("--storage", "json", "sessions", "import", "-", input=dump.stdout)
    assert again.stderr.endswith("foliko: imported 0, unchanged 2, skipped 0\n")


def test_import_the_same_id_twice_with_different_content_is_a_conflict(invoke):
    data = orjson.dumps(
        [
            {"session_id": "d", "messages": [{"role": "user", "content": "v1"}]},
            {"session_id": "d", "messages": [{"role": "user", "content": "v2"}]},
        ]
    )
    result = invoke("sessions", "import", "-", "--on-conflict", "fail", input=data)
    assert result.exit_code == 2
    assert ids(invoke("sessions", "list", "--json")) == []


def test_import_a_document_written_by_the_original_foliko(invoke, show):
    seed = {
        "sessionId": "seed1",
        "messages": [
            {"role": "user", "content": "hello", "createdAt": 1_700_000_000_000},
            {"role": "assistant", "content": [{"type": "text", "text": "hi there"}]},
        ],
        "variables": {"x": 1},
        "metadata": {"createdAt": 1_690_000_000_000, "messageCount": 2},
        "savedAt": 1_700_000_000_500,
    }
    before = now_ms()
    result = invoke("sessions", "import", "-", input=orjson.dumps(seed))
    assert result.stderr.endswith("foliko: imported 1, unchanged 0, skipped 0\n")
    data = show("seed1")
    assert [(m["role"], m["content"]) for m in data["messages"]] == [
        ("user", "hello"),
        ("assistant", "hi there"),
    ]
    assert data["messages"][0]["created_at"] == 1_700_000_000_000
    assert data["variables"] == {"x": 1}
    assert data["metadata"]["created_at"] == 1_690_000_000_000
    rows = orjson.loads(invoke("sessions", "list", "--json").stdout)
    assert rows[0]["updated_at"] >= before  # used when imported, whatever savedAt says


# the same commands on the JSON-file backend


def test_management_on_the_json_backend(invoke, show, foliko_home):
    def run(*args: str, input=None):
        return invoke("--storage", "json", *args, input=input, env={"FOLIKO_MODEL": "echo"})

    def shown(sid: str) -> dict:
        return orjson.loads(run("sessions", "show", sid, "--json").stdout)

    for sid in ("a", "b"):
        assert run("chat", "-s", sid, f"hello {sid}", "--var-json", "k=1").exit_code == 0
    a, b = shown("a"), shown("b")
    assert_usage_error(run("sessions", "rename", "a", "b"), "already exists")
    assert (shown("a"), shown("b")) == (a, b)
    assert run("sessions", "rename", "a", "c").exit_code == 0
    assert shown("c")["messages"] == a["messages"]
    assert run("sessions", "clear", "c").exit_code == 0
    assert shown("c")["messages"] == [] and shown("c")["variables"] == {"k": 1}
    assert run("sessions", "vars", "c", "set", "n", "[2]").exit_code == 0
    assert run("sessions", "vars", "c", "get", "n").stdout == "[2]\n"
    dump = run("sessions", "export", "--all").stdout
    result = run("sessions", "delete", "b", "c", "nope")
    assert result.exit_code == 2 and result.stdout == "b\nc\n"
    assert run("sessions", "import", "-", input=dump).stderr.startswith("foliko: imported 2,")
    assert_imported(shown("b"), b)
    files = (foliko_home / "sessions").glob("*.json")
    assert sorted(p.name for p in files if not p.name.startswith("%2Efoliko")) == [
        "b.json",
        "c.json",
    ]
    assert not (foliko_home / "sessions.db").exists()


@pytest.fixture
def corrupt(invoke, foliko_home):
    for sid in ("good", "bad"):
        assert invoke("--storage", "json", "chat", "-s", sid, "x").exit_code == 0
    path = foliko_home / "sessions" / "bad.json"
    path.write_bytes(b'{"sessionId": "bad", "messages": [tru')
    return path


def test_list_reports_an_unreadable_session_and_lists_the_rest(invoke, corrupt):
    result = invoke("--storage", "json", "sessions", "list", "--json")
    assert result.exit_code == 0
    rows = {r["session_id"]: r for r in orjson.loads(result.stdout)}
    assert set(rows) == {"good", "bad"}
    assert "invalid JSON" in rows["bad"]["error"]
    assert "error" not in rows["good"]
    assert rows["bad"]["damaged"] is True and "damaged" not in rows["good"]
    assert "session 'bad' is damaged (" in result.stderr and "invalid JSON" in result.stderr
    assert "foliko storage check --repair moves it aside" in result.stderr


def test_a_corrupt_session_fails_show_and_export_with_3_and_is_left_alone(invoke, corrupt):
    for args in (["show", "bad"], ["export", "--all"], ["export", "bad"], ["vars", "bad"]):
        result = invoke("--storage", "json", "sessions", *args)
        assert result.exit_code == 3, args
        assert result.stdout == ""
        assert "session 'bad' is damaged" in result.stderr
    assert corrupt.read_bytes() == b'{"sessionId": "bad", "messages": [tru'


def test_a_corrupt_session_can_be_deleted_as_the_error_suggests(invoke, corrupt):
    result = invoke("--storage", "json", "sessions", "delete", "bad")
    assert result.exit_code == 0
    assert result.stdout == "bad\n"
    assert not corrupt.exists()
    assert ids(invoke("--storage", "json", "sessions", "list", "--json")) == ["good"]


# prune


@pytest.fixture
def aged(foliko_home, chat):
    now = now_ms()
    store(foliko_home, "ancient", updated_at=now - 400 * DAY)
    store(foliko_home, "old", updated_at=now - 30 * DAY - MINUTE)
    store(foliko_home, "edge", updated_at=now - 30 * DAY + HOUR)
    store(foliko_home, "recent", updated_at=now - 1 * DAY)
    chat("fresh", "just now")


def test_prune_dry_run_lists_and_deletes_nothing(invoke, aged):
    before = invoke("sessions", "list", "--json").stdout
    result = invoke("sessions", "prune", "--older-than", "30d", "--dry-run")
    assert result.exit_code == 0
    assert sorted(result.stdout.split()) == ["ancient", "old"]
    assert "would delete 2 session(s)" in result.stderr
    assert invoke("sessions", "list", "--json").stdout == before


def test_prune_deletes_only_sessions_past_the_boundary(invoke, aged):
    result = invoke("sessions", "prune", "--older-than", "30d")
    assert result.exit_code == 0
    assert sorted(result.stdout.split()) == ["ancient", "old"]
    assert "deleted 2 session(s)" in result.stderr
    assert sorted(ids(invoke("sessions", "list", "--json"))) == ["edge", "fresh", "recent"]


@pytest.mark.parametrize(
    ("duration", "pruned"),
    [
        ("1000d", []),
        ("52w", ["ancient"]),
        ("29d", ["ancient", "edge", "old"]),
        ("2d", ["ancient", "edge", "old"]),
        ("12h", ["ancient", "edge", "old", "recent"]),
    ],
)
def test_prune_boundaries(invoke, aged, duration, pruned):
    result = invoke("sessions", "prune", "--older-than", duration)
    assert result.exit_code == 0
    assert sorted(result.stdout.split()) == pruned
    remaining = {"ancient", "old", "edge", "recent", "fresh"} - set(pruned)
    assert sorted(ids(invoke("sessions", "list", "--json"))) == sorted(remaining)


def test_prune_covering_sessions_just_created(invoke, foliko_home, chat):
    chat("new1", "x")
    chat("new2", "y")
    # the same sessions as seen by a clock an hour later: prune 30m covers them
    store(foliko_home, "new1", updated_at=now_ms() - HOUR)
    store(foliko_home, "new2", updated_at=now_ms() - HOUR)
    chat("kept", "z")
    result = invoke("sessions", "prune", "--older-than", "30m")
    assert sorted(result.stdout.split()) == ["new1", "new2"]
    assert ids(invoke("sessions", "list", "--json")) == ["kept"]


def test_prune_nothing_to_do(invoke, chat):
    chat("fresh", "x")
    result = invoke("sessions", "prune", "--older-than", "30d")
    assert result.exit_code == 0
    assert result.stdout == ""
    assert "deleted 0 session(s)" in result.stderr


def test_prune_needs_a_valid_duration(invoke, aged):
    assert_usage_error(invoke("sessions", "prune"), "--older-than")
    assert_usage_error(invoke("sessions", "prune", "--older-than", "30"), "not a duration")
    assert_usage_error(invoke("sessions", "prune", "--older-than", "month"), "not a duration")
    assert len(ids(invoke("sessions", "list", "--json"))) == 5


# vars


@pytest.mark.parametrize(
    ("raw", "stored", "printed"),
    [
        ("3", 3, "3"),
        ("2.5", 2.5, "2.5"),
        ("true", True, "true"),
        ("null", None, "null"),
        ("[1,2]", [1, 2], "[1,2]"),
        ('{"a": {"b": 1}}', {"a": {"b": 1}}, '{"a":{"b":1}}'),
        ('"3"', "3", '"3"'),
        ("9223372036854775807", 9223372036854775807, "9223372036854775807"),
    ],
)
def test_vars_set_json_stores_typed_values(invoke, chat, show, raw, stored, printed):
    chat("v", "hi")
    result = invoke("sessions", "vars", "v", "set", "--json", "k", raw)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert show("v")["variables"] == {"k": stored}
    got = invoke("sessions", "vars", "v", "get", "k", "--json")
    assert got.exit_code == 0
    assert got.stdout == printed + "\n"


@pytest.mark.parametrize(
    "raw", ["3", "1.10", "true", "[1,2]", "123456789012345678901234", "Paris", "two words", ""]
)
def test_vars_set_stores_text_exactly(invoke, chat, show, raw):
    """vars set used to parse JSON: 1.10 became 1.1 and a 24-digit id a float."""
    chat("v", "hi")
    assert invoke("sessions", "vars", "v", "set", "k", raw).exit_code == 0
    assert show("v")["variables"] == {"k": raw}
    assert invoke("sessions", "vars", "v", "get", "k").stdout == raw + "\n"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("123456789012345678901234", "beyond 64 bits"), ("Paris", "not a JSON value")],
)
def test_vars_set_json_refuses_what_it_cannot_store_exactly(invoke, chat, show, raw, expected):
    chat("v", "hi")
    invoke("sessions", "vars", "v", "set", "k", "before")
    assert_usage_error(invoke("sessions", "vars", "v", "set", "--json", "k", raw), expected)
    assert show("v")["variables"] == {"k": "before"}


def test_vars_take_the_session_as_s_too(invoke, chat, show):
    chat("v", "hi")
    assert invoke("sessions", "vars", "-s", "v", "set", "k", "x").exit_code == 0
    assert invoke("sessions", "vars", "-s", "v", "get", "k").stdout == "x\n"
    assert invoke("sessions", "vars", "-s", "v").stdout == "key\tvalue\nk\tx\n"


def test_vars_set_on_an_unknown_session_exits_2_and_creates_nothing(invoke):
    assert_usage_error(invoke("sessions", "vars", "typo", "set", "k", "1"), "'typo' not found")
    assert_usage_error(invoke("sessions", "show", "typo"))


def test_vars_set_keeps_history_and_other_variables(invoke, chat, show):
    chat("s", "hi", "--var-json", "a=1")
    invoke("sessions", "vars", "s", "set", "--json", "b", "2")
    invoke("sessions", "vars", "s", "set", "a", "overwritten")
    data = show("s")
    assert data["variables"] == {"a": "overwritten", "b": 2}
    assert [m["content"] for m in data["messages"]] == ["hi", "hi"]


def test_vars_list_formats(invoke, chat):
    chat("s", "hi")
    invoke("sessions", "vars", "s", "set", "--json", "b", "[1]")
    invoke("sessions", "vars", "s", "set", "a", "text")
    assert orjson.loads(invoke("sessions", "vars", "s", "list", "--json").stdout) == [
        {"key": "a", "value": "text"},
        {"key": "b", "value": [1]},
    ]
    # list is the default action, TSV the default format in a pipe
    assert invoke("sessions", "vars", "s").stdout == "key\tvalue\na\ttext\nb\t[1]\n"
    ndjson = invoke("sessions", "vars", "s", "--ndjson").stdout.splitlines()
    assert [orjson.loads(line)["key"] for line in ndjson] == ["a", "b"]
    table = invoke("sessions", "vars", "s", "--format", "table").stdout
    assert table.splitlines()[0].split() == ["key", "value"]


def test_vars_list_of_a_session_without_variables(invoke, chat):
    chat("s", "hi")
    assert invoke("sessions", "vars", "s", "--json").stdout == "[]\n"


def test_vars_unset(invoke, chat, show):
    chat("s", "hi")
    invoke("sessions", "vars", "s", "set", "--json", "a", "1")
    invoke("sessions", "vars", "s", "set", "--json", "b", "2")
    result = invoke("sessions", "vars", "s", "unset", "a")
    assert result.exit_code == 0
    assert show("s")["variables"] == {"b": 2}


def test_vars_get_or_unset_missing_key_exits_2(invoke, chat, show):
    chat("s", "hi")
    invoke("sessions", "vars", "s", "set", "--json", "a", "1")
    assert_usage_error(invoke("sessions", "vars", "s", "get", "zz"), "'zz' is not set")
    assert_usage_error(invoke("sessions", "vars", "s", "unset", "zz"), "'zz' is not set")
    assert show("s")["variables"] == {"a": 1}


@pytest.mark.parametrize(
    "args",
    [
        ["list"],
        ["get", "k"],
        ["unset", "k"],
        ["set", "k", "v"],
    ],
)
def test_vars_on_an_unknown_session_exits_2(invoke, args):
    assert_usage_error(invoke("sessions", "vars", "ghost", *args), "'ghost' not found")
    assert ids(invoke("sessions", "list", "--json")) == []


@pytest.mark.parametrize(
    "args",
    [
        ["get"],
        ["unset"],
        ["set"],
        ["set", "k"],
        ["list", "k"],
        ["list", "k", "v"],
        ["get", "k", "v"],
        ["unset", "k", "v"],
        ["set", "k", "v", "extra"],
        ["frobnicate"],
        [],
    ],
)
def test_vars_wrong_arity_exits_2(invoke, chat, args):
    if not args:
        assert_usage_error(invoke("sessions", "vars"))
        return
    chat("s", "hi")
    invoke("sessions", "vars", "s", "set", "--json", "k", "1")
    assert_usage_error(invoke("sessions", "vars", "s", *args))
    assert orjson.loads(invoke("sessions", "show", "s", "--json").stdout)["variables"] == {"k": 1}


def test_vars_are_seen_by_the_model_tools(invoke, chat):
    chat("s", "hi")
    invoke("sessions", "vars", "s", "set", "city", "Paris")
    result = invoke("chat", "-s", "s", '/tool get_variable {"key": "city"}')
    assert result.exit_code == 0
    assert "Paris" in result.stdout


# storage migrate / check / info


@pytest.fixture
def json_sessions(invoke):
    for sid, text in (("j1", "one"), ("j2", "two")):
        result = invoke("--storage", "json", "chat", "-s", sid, text, "--var-json", "k=1")
        assert result.exit_code == 0


def test_migrate_dry_run_writes_nothing(invoke, json_sessions, foliko_home):
    result = invoke("storage", "migrate", "json", "sqlite", "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("would copy 2 of 2 sessions")
    assert ids(invoke("sessions", "list", "--json")) == []
    report = orjson.loads(
        invoke("storage", "migrate", "json", "sqlite", "--dry-run", "--json").stdout
    )
    assert report == {"total": 2, "copied": 2, "skipped": 0, "failed": [], "dry_run": True}


def test_migrate_dry_run_creates_no_destination_file(invoke, json_sessions, foliko_home):
    assert not (foliko_home / "sessions.db").exists()
    assert invoke("storage", "migrate", "json", "sqlite", "--dry-run").exit_code == 0
    assert not (foliko_home / "sessions.db").exists()


def test_migrate_copies_and_is_idempotent(invoke, json_sessions):
    result = invoke("storage", "migrate", "json", "sqlite")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("copied 2 of 2 sessions")
    assert result.stderr == ""  # no progress bar when stderr is not a terminal
    assert "2 already there" not in result.stdout
    for sid in ("j1", "j2"):
        json_view = invoke("--storage", "json", "sessions", "show", sid, "--json").stdout
        assert invoke("sessions", "show", sid, "--json").stdout == json_view
    again = invoke("storage", "migrate", "json", "sqlite", "--json")
    assert again.exit_code == 0
    assert orjson.loads(again.stdout) == {
        "total": 2,
        "copied": 0,
        "skipped": 2,
        "failed": [],
        "dry_run": False,
    }
    # the source is never changed
    assert sorted(ids(invoke("--storage", "json", "sessions", "list", "--json"))) == ["j1", "j2"]


def test_migrate_conflict_fails_with_3_unless_overwrite(invoke, json_sessions):
    invoke("chat", "-s", "j1", "different content in sqlite")
    result = invoke("storage", "migrate", "json", "sqlite")
    assert result.exit_code == 3
    assert "'j1'" in result.stderr and "--overwrite" in result.stderr
    assert "1 failed" in result.stdout
    forced = invoke("storage", "migrate", "json", "sqlite", "--overwrite")
    assert forced.exit_code == 0
    json_view = invoke("--storage", "json", "sessions", "show", "j1", "--json").stdout
    assert invoke("sessions", "show", "j1", "--json").stdout == json_view


@pytest.mark.parametrize(
    ("src", "dst"),
    [("sqlite", "sqlite"), ("json", "json"), ("sqlite:///{home}/sessions.db", "sqlite")],
)
def test_migrate_same_source_and_destination_exits_2(invoke, foliko_home, src, dst):
    src = src.format(home=foliko_home)
    assert_usage_error(invoke("storage", "migrate", src, dst), "same storage")


def test_migrate_bad_backend_exits_2(invoke):
    assert_usage_error(invoke("storage", "migrate", "json", "nowhere"), "unknown storage")
    assert_usage_error(invoke("storage", "migrate", "json"))


def test_check_healthy_store(invoke, chat):
    chat("s", "hi")
    result = invoke("storage", "check")
    assert result.exit_code == 0
    assert result.stdout == ""
    assert "0 damaged session(s)" in result.stderr
    assert invoke("storage", "check", "--json").stdout == "[]\n"
    assert invoke("--storage", "json", "storage", "check").exit_code == 0


def test_check_reports_a_corrupt_session_and_repair_moves_it_aside(invoke, chat, foliko_home):
    chat("good", "fine")
    chat("bad", "soon broken")
    with sqlite3.connect(foliko_home / "sessions.db") as db:
        db.execute("UPDATE messages SET body = 'not json' WHERE session_id = 'bad'")
    db.close()
    result = invoke("storage", "check")
    assert result.exit_code == 3
    assert result.stdout.startswith("bad\t")
    problems = orjson.loads(invoke("storage", "check", "--json").stdout)
    assert [(p["session_id"], p["kind"]) for p in problems] == [("bad", "session")]
    repaired = invoke("storage", "check", "--repair")
    assert repaired.exit_code == 0
    assert "moved 'bad' aside" in repaired.stderr
    assert invoke("storage", "check").exit_code == 0
    assert ids(invoke("sessions", "list", "--json")) == ["good"]


def test_repair_of_a_damaged_database_says_it_cannot_and_exits_3(invoke, chat, foliko_home):
    chat("s", "kept")
    invoke("sessions", "list")  # the database is closed, its WAL checkpointed
    damage_the_index(foliko_home / "sessions.db")
    (problem,) = orjson.loads(invoke("storage", "check", "--json").stdout)
    assert problem["kind"] == "store" and "quick_check" in problem["reason"]
    repaired = invoke("storage", "check", "--repair")
    assert repaired.exit_code == 3
    (line,) = repaired.stderr.splitlines()
    assert "cannot be repaired in place: restore it from a backup" in line
    assert "moved" not in line
    assert invoke("sessions", "show", "s", "--json").exit_code == 0


def test_repair_removes_a_stray_lock_file_and_says_so(invoke, chat, foliko_home):
    chat("s", "kept")
    (locks,) = {path.parent for path in foliko_home.rglob("*.lock")}
    orphan = locks / lock_name("killed-mid-turn")
    orphan.write_text("pid 1 on elsewhere")
    (problem,) = orjson.loads(invoke("storage", "check", "--json").stdout)
    assert problem["kind"] == "stray" and problem["where"] == str(orphan)
    repaired = invoke("storage", "check", "--repair")
    assert repaired.exit_code == 0
    assert repaired.stderr.strip() == f"foliko: stray file {orphan} removed"
    assert not orphan.exists()


def test_info(invoke, chat, foliko_home):
    chat("s", "hi")
    chat("t", "there")
    data = orjson.loads(invoke("storage", "info", "--json").stdout)
    assert data["backend"] == "sqlite"
    assert data["location"] == str(foliko_home / "sessions.db")
    assert data["sessions"] == 2 and data["messages"] == 4
    text = invoke("storage", "info").stdout
    assert text.splitlines()[0].split() == ["backend", "sqlite"]
    json_info = orjson.loads(invoke("--storage", "json", "storage", "info", "--json").stdout)
    assert json_info["backend"] == "json" and json_info["sessions"] == 0


def test_migrate_names_a_corrupt_session_once(invoke, corrupt):
    """Was: "session 'bad': session 'bad' is damaged ..."."""
    result = invoke("storage", "migrate", "json", "sqlite")
    assert result.exit_code == 3
    [line] = [line for line in result.stderr.splitlines() if "'bad'" in line]
    assert line.count("'bad'") == 1, line
    assert line.startswith("foliko: error: session 'bad' is damaged")


def test_reading_variables_reads_no_message(invoke, chat, monkeypatch):
    """``vars`` reads the session's row: its cost does not grow with the history."""
    chat("v", "hi")
    assert invoke("sessions", "vars", "v", "set", "k", "x").exit_code == 0

    def whole(*args):
        raise AssertionError("reading variables loaded the history")

    monkeypatch.setattr("foliko_cli.storage.sqlite.SQLiteStorage.load", whole)
    assert invoke("sessions", "vars", "v", "get", "k").stdout == "x\n"
    assert invoke("sessions", "vars", "v").stdout == "key\tvalue\nk\tx\n"
    assert_usage_error(invoke("sessions", "vars", "nobody", "get", "k"), "'nobody' not found")
