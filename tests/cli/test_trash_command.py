"""`foliko sessions trash list|empty`, `sessions restore`, the `[trash] keep`
setting, and what clear, rewind and `chat --new` say on stderr. Every error
path runs the installed foliko as a process and checks its exit code."""

from __future__ import annotations

import orjson
import pytest
from trusting import trust

RESTORE_AS = "foliko sessions restore {} --as NEW"


@pytest.fixture
def chat(invoke):
    def run(session_id: str, message: str, *extra: str, env: dict | None = None):
        result = invoke(
            "chat", "-s", session_id, message, *extra, env={"FOLIKO_MODEL": "echo", **(env or {})}
        )
        assert result.exit_code == 0, result.stderr
        return result

    return run


def listed(invoke, *extra: str) -> list[dict]:
    result = invoke(*extra, "sessions", "trash", "list", "--json")
    assert result.exit_code == 0, result.stderr
    return orjson.loads(result.stdout)


def contents(invoke, session_id: str) -> list[str]:
    result = invoke("sessions", "show", session_id, "--json")
    assert result.exit_code == 0, result.stderr
    return [m["content"] for m in orjson.loads(result.stdout)["messages"]]


def run_ok(run_foliko, *args: str, **kwargs):
    done = run_foliko(*args, env={"FOLIKO_MODEL": "echo", **kwargs.pop("env", {})}, **kwargs)
    assert done.returncode == 0, done.stderr.decode()
    return done


def assert_exit_2(done, *fragments: str) -> None:
    assert done.returncode == 2, done.stderr.decode()
    assert done.stdout == b""
    stderr = done.stderr.decode()
    assert stderr.count("\n") == 1, stderr  # one line
    for fragment in fragments:
        assert fragment in stderr, stderr


# the error paths, through the real CLI


def test_restore_of_a_taken_id_exits_2_and_restores_nothing(run_foliko):
    run_ok(run_foliko, "chat", "-s", "x", "old words")
    run_ok(run_foliko, "sessions", "clear", "x")
    assert_exit_2(
        run_foliko("sessions", "restore", "x"),
        "session 'x' exists; nothing restored",
        RESTORE_AS.format("x"),
    )
    shown = orjson.loads(run_ok(run_foliko, "sessions", "show", "x", "--json").stdout)
    assert shown["messages"] == []
    run_ok(run_foliko, "sessions", "restore", "x", "--as", "x-before")
    shown = orjson.loads(run_ok(run_foliko, "sessions", "show", "x-before", "--json").stdout)
    assert [m["content"] for m in shown["messages"]] == ["old words", "old words"]
    assert_exit_2(run_foliko("sessions", "restore", "x"), "'x' is not in the trash")


def test_restore_of_an_unknown_id_exits_2_and_names_the_listing(run_foliko):
    assert_exit_2(
        run_foliko("sessions", "restore", "nobody"),
        "'nobody' is not in the trash; list what the trash holds (foliko sessions trash list)",
    )


def test_restore_under_an_invalid_name_exits_2(run_foliko):
    run_ok(run_foliko, "chat", "-s", "x", "hi")
    run_ok(run_foliko, "sessions", "delete", "x")
    assert_exit_2(run_foliko("sessions", "restore", "x", "--as", " padded"), "invalid session id")
    assert_exit_2(run_foliko("sessions", "restore", "x", "--as", ".foliko/x"), "foliko's own")
    missing = run_foliko("sessions", "restore")
    assert missing.returncode == 2 and b"missing argument 'ID'" in missing.stderr
    run_ok(run_foliko, "sessions", "restore", "x")


def test_a_bad_duration_exits_2_and_empties_nothing(run_foliko):
    run_ok(run_foliko, "chat", "-s", "x", "hi")
    run_ok(run_foliko, "sessions", "delete", "x")
    for bad in ("soon", "30", "-1d"):
        done = run_foliko("sessions", "trash", "empty", "--older-than", bad)
        assert done.returncode == 2, done.stderr.decode()
        assert b"not a duration" in done.stderr
    listing = orjson.loads(run_ok(run_foliko, "sessions", "trash", "list", "--json").stdout)
    assert [row["session_id"] for row in listing] == ["x"]


@pytest.mark.parametrize(
    ("where", "value", "fragment"),
    [
        ("env", "soon", "setting 'trash.keep' from env FOLIKO_TRASH_KEEP: 'soon' is not a"),
        ("file", '"soon"', "setting 'trash.keep' from project"),
        ("file", "7", "must be a duration such as 30d, or 0"),
    ],
)
def test_a_bad_keep_setting_exits_2_naming_it(run_foliko, tmp_path, where, value, fragment):
    if where == "file":
        (tmp_path / "foliko.toml").write_text(f"[trash]\nkeep = {value}\n")
        done = run_foliko("sessions", "delete", "x")
    else:
        done = run_foliko("sessions", "delete", "x", env={"FOLIKO_TRASH_KEEP": value})
    assert_exit_2(done, fragment)


def test_an_unknown_key_in_the_trash_table_exits_2(run_foliko, tmp_path):
    (tmp_path / "foliko.toml").write_text('[trash]\nkept = "7d"\n')
    assert_exit_2(run_foliko("sessions", "trash", "list"), "unknown setting 'trash.kept'")
    (tmp_path / "foliko.toml").write_text('trash_keep = "7d"\n')
    assert_exit_2(run_foliko("sessions", "trash", "list"), "unknown setting 'trash_keep'")
    (tmp_path / "foliko.toml").write_text('trash = "7d"\n')
    assert_exit_2(run_foliko("sessions", "trash", "list"), "[trash] must be a table")


def test_continue_new_says_which_session_it_started_over(run_foliko):
    run_ok(run_foliko, "chat", "-s", "older", "one")
    run_ok(run_foliko, "chat", "-s", "latest", "two")
    done = run_ok(run_foliko, "chat", "-c", "--new", "three")
    assert done.stdout == b"three\n"
    assert done.stderr.decode() == (
        "foliko: session 'latest' started over; the old history is in the trash: "
        f"{RESTORE_AS.format('latest')}\n"
    )
    run_ok(run_foliko, "sessions", "restore", "latest", "--as", "latest-before")
    shown = orjson.loads(run_ok(run_foliko, "sessions", "show", "latest-before", "--json").stdout)
    assert [m["content"] for m in shown["messages"]] == ["two", "two"]


def test_continue_new_with_the_trash_off_says_the_history_is_gone(run_foliko):
    off = {"FOLIKO_TRASH_KEEP": "0"}
    run_ok(run_foliko, "chat", "-s", "latest", "two", env=off)
    done = run_ok(run_foliko, "chat", "-c", "--new", "three", env=off)
    assert done.stderr.decode() == (
        "foliko: session 'latest' started over; the trash is off, so the old history is gone\n"
    )
    assert run_ok(run_foliko, "sessions", "trash", "list", "--json", env=off).stdout == b"[]\n"


# the commands, in-process


def test_new_on_a_session_that_did_not_exist_says_nothing(chat):
    assert chat("fresh", "hi", "--new").stderr == ""


def test_new_turn_json_names_the_trash_entry(invoke, chat):
    chat("s", "before")
    result = chat("s", "after", "--new", "--json")
    entry = orjson.loads(result.stdout)["trashed"]
    assert [row["id"] for row in listed(invoke)] == [entry]
    assert orjson.loads(chat("s", "more", "--json").stdout)["trashed"] is None


def test_clear_and_rewind_say_what_they_did_and_how_to_undo_it(invoke, chat):
    chat("s", "one")
    chat("s", "two")
    rewound = invoke("sessions", "rewind", "s")
    assert rewound.stderr == (
        "foliko: session 's' now has 2 message(s); the old history is in the trash: "
        f"{RESTORE_AS.format('s')}\n"
    )
    cleared = invoke("sessions", "clear", "s", "--json")
    assert orjson.loads(cleared.stdout) == {"cleared": "s", "variables_cleared": False}
    assert cleared.stderr == (
        "foliko: session 's' was cleared; the old history is in the trash: "
        f"{RESTORE_AS.format('s')}\n"
    )
    rows = listed(invoke)
    assert [(r["session_id"], r["reason"], r["message_count"]) for r in rows] == [
        ("s", "clear", 2),
        ("s", "rewind", 4),
    ]


def test_an_odd_name_is_quoted_for_the_shell_in_the_hint(invoke, chat):
    chat("my notes", "hi")
    assert RESTORE_AS.format("'my notes'") in invoke("sessions", "clear", "my notes").stderr


def test_delete_puts_what_it_removed_in_the_trash_quietly(invoke, chat):
    chat("a", "x")
    chat("b", "y")
    deleted = invoke("sessions", "delete", "a")
    assert (deleted.stdout, deleted.stderr) == ("a\n", "")
    assert [(r["session_id"], r["reason"]) for r in listed(invoke)] == [("a", "delete")]
    live = orjson.loads(invoke("sessions", "list", "--json").stdout)
    assert [row["session_id"] for row in live] == ["b"]
    restored = invoke("sessions", "restore", "a")
    assert restored.stderr == "foliko: restored 'a' (2 message(s)) as 'a'\n"
    assert contents(invoke, "a") == ["x", "x"]


def test_prune_says_how_long_the_trash_keeps_what_it_deleted(invoke, foliko_home):
    from foliko_cli.common.clock import now_ms

    from .test_sessions_manage import DAY, store

    store(foliko_home, "stale", updated_at=now_ms() - 2 * DAY)
    pruned = invoke("sessions", "prune", "--older-than", "1d", env={"FOLIKO_TRASH_KEEP": "12h"})
    assert pruned.stdout == "stale\n"
    assert pruned.stderr == "foliko: deleted 1 session(s); the trash keeps them for 12h\n"
    assert [(r["session_id"], r["reason"]) for r in listed(invoke)] == [("stale", "prune")]


def test_list_rows_and_quiet_ids(invoke, chat):
    chat("s", "x")
    invoke("sessions", "delete", "s")
    (row,) = listed(invoke)
    assert set(row) == {
        "id",
        "session_id",
        "reason",
        "removed_at",
        "expires_at",
        "message_count",
        "last_used",
    }
    assert row["expires_at"] - row["removed_at"] == 30 * 86_400_000
    quiet = invoke("sessions", "trash", "list", "-q")
    assert quiet.stdout == row["id"] + "\n"
    restored = invoke("sessions", "restore", row["id"], "--json")
    assert orjson.loads(restored.stdout) == {"restored": row["id"], "session_id": "s", "as": "s"}


def test_empty_removes_for_good(invoke, chat):
    chat("s", "x")
    invoke("sessions", "delete", "s")
    (row,) = listed(invoke)
    kept = invoke("sessions", "trash", "empty", "--older-than", "1d", "--json")
    assert orjson.loads(kept.stdout) == {"emptied": []}
    emptied = invoke("sessions", "trash", "empty", "--json")
    assert orjson.loads(emptied.stdout) == {"emptied": [row["id"]]}
    assert emptied.stderr == "foliko: emptied 1 session(s) from the trash\n"
    assert listed(invoke) == []


def test_keep_zero_in_the_config_turns_the_trash_off(invoke, chat, tmp_path):
    (tmp_path / "foliko.toml").write_text("[trash]\nkeep = 0\n")
    trust(tmp_path / "foliko.toml")
    chat("s", "x")
    assert invoke("sessions", "clear", "s").stderr == (
        "foliko: session 's' was cleared; the trash is off, so the old history is gone\n"
    )
    invoke("sessions", "delete", "s")
    assert listed(invoke) == []
    shown = orjson.loads(invoke("config", "show", "--json").stdout)
    assert {"key": "trash.keep", "value": "0", "source": f"project {tmp_path}/foliko.toml"} in shown
