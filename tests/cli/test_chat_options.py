"""`foliko chat` options: --new, --from, --system, --var, --timeout, --json, --dry-run,
and R1 (a failed turn leaves the stored session exactly as it was)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import orjson
import pytest

from foliko_cli.errors import ModelError
from foliko_cli.models.echo import EchoModel

from .locks import held


@pytest.fixture
def chat(invoke):
    def run(session_id: str, *args: str, input: str | None = None):
        result = invoke("chat", "-s", session_id, *args, input=input, env={"FOLIKO_MODEL": "echo"})
        assert result.exit_code == 0, result.stderr
        return result

    return run


def contents(session: dict) -> list[str]:
    return [m["content"] for m in session["messages"]]


def listed(invoke) -> list[str]:
    return sorted(
        r["session_id"] for r in orjson.loads(invoke("sessions", "list", "--json").stdout)
    )


def sqlite_rows(home: Path, session_id: str) -> tuple:
    """Every stored byte of one session in the SQLite backend."""
    db = sqlite3.connect(home / "sessions.db")
    try:
        session = db.execute(
            "SELECT * FROM sessions WHERE session_id = ?", (session_id,)
        ).fetchall()
        messages = db.execute(
            "SELECT * FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
        ).fetchall()
    finally:
        db.close()
    return session, messages


def dry_run(invoke, *args: str, input: str | None = None) -> dict:
    result = invoke("chat", "--dry-run", *args, input=input)
    assert result.exit_code == 0, result.stderr
    return orjson.loads(result.stdout)


# --new


def test_new_starts_history_and_variables_over(chat, show):
    chat("s", "one", "--var", "k=1", "--system", "old prompt")
    chat("s", "two")
    result = chat("s", "--new", "fresh")
    assert result.stdout == "fresh\n"
    data = show("s")
    assert contents(data) == ["fresh", "fresh"]
    assert data["variables"] == {}
    assert data["metadata"]["message_count"] == 2


def test_new_forgets_the_old_system_prompt(invoke, chat, show):
    chat("s", "one", "--system", "old prompt")
    chat("s", "--new", "fresh")
    assert "system_prompt" not in show("s")["metadata"]
    assert dry_run(invoke, "-s", "s", "x")["system"] is None


def test_new_after_a_fork_is_no_longer_a_fork(chat, show):
    chat("src", "a")
    chat("dst", "--from", "src", "b")
    chat("dst", "--new", "c")
    assert "forked_from" not in show("dst")["metadata"]


def test_new_on_an_unknown_session_just_creates_it(chat, show):
    chat("brand", "--new", "hi")
    assert contents(show("brand")) == ["hi", "hi"]


def test_new_with_var_and_system_applies_them_after_the_reset(chat, show):
    chat("s", "one", "--var", "old=1")
    chat("s", "--new", "two", "--var", "new=2", "--system", "P")
    data = show("s")
    assert data["variables"] == {"new": "2"}
    assert data["metadata"]["system_prompt"] == "P"
    assert contents(data) == ["two", "two"]


def test_new_session_continues_normally_afterwards(chat, show):
    chat("s", "one")
    chat("s", "--new", "two")
    chat("s", "three")
    assert contents(show("s")) == ["two", "two", "three", "three"]


# --from


def test_from_forks_a_copy_that_diverges(chat, show):
    chat("src", "shared", "--var", "k=1", "--system", "S")
    source_before = show("src")
    chat("dst", "--from", "src", "branch")
    fork = show("dst")
    assert contents(fork) == ["shared", "shared", "branch", "branch"]
    assert fork["variables"] == {"k": "1"}
    assert fork["metadata"]["system_prompt"] == "S"
    assert fork["metadata"]["forked_from"] == "src"
    assert fork["messages"][:2] == source_before["messages"]
    assert show("src") == source_before
    chat("src", "main line")
    chat("dst", "side line", "--var", "k=2")
    assert contents(show("src")) == ["shared", "shared", "main line", "main line"]
    assert contents(show("dst"))[-1] == "side line"
    assert show("src")["variables"] == {"k": "1"}
    assert show("dst")["variables"] == {"k": "2"}


def test_from_onto_an_existing_session_without_new_exits_2(invoke, chat, show):
    chat("src", "a")
    chat("dst", "b")
    before_src, before_dst = show("src"), show("dst")
    result = invoke("chat", "-s", "dst", "--from", "src", "c")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "'dst' already exists" in result.stderr
    assert show("dst") == before_dst
    assert show("src") == before_src


def test_from_with_new_replaces_an_existing_session(chat, show):
    chat("src", "a")
    chat("dst", "b", "--var", "gone=1")
    chat("dst", "--new", "--from", "src", "c")
    data = show("dst")
    assert contents(data) == ["a", "a", "c", "c"]
    assert data["variables"] == {}


def test_fork_over_an_existing_session_takes_the_source_system_prompt(invoke, chat, show):
    chat("src", "a")
    chat("dst", "b", "--system", "dst prompt")
    chat("dst", "--new", "--from", "src", "c")
    assert "system_prompt" not in show("dst")["metadata"]
    assert dry_run(invoke, "-s", "dst", "x")["system"] is None


def test_from_unknown_exits_2_and_creates_nothing(invoke):
    result = invoke("chat", "-s", "dst", "--from", "ghost", "hi")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "'ghost' not found" in result.stderr
    assert listed(invoke) == []


@pytest.mark.parametrize("extra", [[], ["--new"]])
def test_from_itself_exits_2(invoke, chat, show, extra):
    chat("s", "a")
    before = show("s")
    result = invoke("chat", "-s", "s", "--from", "s", *extra, "b")
    assert result.exit_code == 2
    assert "into itself" in result.stderr
    assert show("s") == before


def test_from_an_invalid_id_exits_2(invoke):
    result = invoke("chat", "-s", "dst", "--from", "bad\x07id", "hi")
    assert result.exit_code == 2
    assert "control character" in result.stderr
    assert listed(invoke) == []


# --system


def test_system_is_kept_for_later_turns(invoke, chat, show):
    chat("s", "hi", "--system", "You are terse.")
    assert show("s")["metadata"]["system_prompt"] == "You are terse."
    chat("s", "again")
    assert show("s")["metadata"]["system_prompt"] == "You are terse."
    assert dry_run(invoke, "-s", "s", "third")["system"] == "You are terse."


def test_system_can_be_changed_later(invoke, chat, show):
    chat("s", "hi", "--system", "first")
    chat("s", "hi", "--system", "second")
    assert dry_run(invoke, "-s", "s", "x")["system"] == "second"
    assert dry_run(invoke, "-s", "s", "x", "--system", "only for this dry run")["system"] == (
        "only for this dry run"
    )
    assert show("s")["metadata"]["system_prompt"] == "second"


def test_no_system_prompt_by_default(invoke, chat):
    chat("s", "hi")
    assert dry_run(invoke, "-s", "s", "x")["system"] is None


# --var


def test_var_stores_text_exactly_as_given(chat, show):
    """--var used to parse JSON: version=1.10 became 1.1 and a 24-digit id a float."""
    chat(
        "s",
        "hi",
        "--var",
        "version=1.10",
        "--var",
        "id=123456789012345678901234",
        "--var",
        "n=3",
        "--var",
        "flag=false",
        "--var",
        "city=Paris",
        "--var",
        "eq=a=b",
        "--var",
        "empty=",
        "--var",
        'quoted="7"',
        "--var",
        " spaced =x",
    )
    assert show("s")["variables"] == {
        "version": "1.10",
        "id": "123456789012345678901234",
        "n": "3",
        "flag": "false",
        "city": "Paris",
        "eq": "a=b",
        "empty": "",
        "quoted": '"7"',
        "spaced": "x",
    }


def test_var_json_stores_typed_values(chat, show):
    chat(
        "s",
        "hi",
        "--var-json",
        "n=3",
        "--var-json",
        "pi=3.5",
        "--var-json",
        "flag=false",
        "--var-json",
        'list=[1, "two"]',
        "--var-json",
        'obj={"a": null}',
        "--var-json",
        'quoted="7"',
        "--var-json",
        "big=9223372036854775807",
    )
    assert show("s")["variables"] == {
        "n": 3,
        "pi": 3.5,
        "flag": False,
        "list": [1, "two"],
        "obj": {"a": None},
        "quoted": "7",
        "big": 9223372036854775807,
    }


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        ("id=123456789012345678901234", "beyond 64 bits"),
        ("x=[1, 99999999999999999999]", "beyond 64 bits"),
        ("x=Paris", "not a JSON value"),
        ("x=NaN", "not a JSON value"),
        ("x=1e999", "too large"),
        ("novalue", "KEY=VALUE"),
    ],
)
def test_var_json_refuses_what_it_cannot_store_exactly(invoke, bad, expected):
    result = invoke("chat", "-s", "s", "hi", "--var-json", bad)
    assert result.exit_code == 2
    assert expected in result.stderr
    assert listed(invoke) == []


def test_var_merges_with_existing_variables_and_last_wins(chat, show):
    chat("s", "hi", "--var", "a=1", "--var", "b=1")
    chat("s", "hi", "--var", "b=2", "--var", "b=3")
    assert show("s")["variables"] == {"a": "1", "b": "3"}


def test_var_is_visible_to_tools_in_the_same_turn(chat):
    result = chat("s", '/tool get_variable {"key": "who"}', "--var", "who=Ada")
    assert "Ada" in result.stdout


@pytest.mark.parametrize("bad", ["novalue", "=v", " =v", ""])
def test_var_bad_form_exits_2(invoke, bad):
    result = invoke("chat", "-s", "s", "hi", "--var", bad)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "KEY=VALUE" in result.stderr
    assert listed(invoke) == []


# --timeout


def test_timeout_accepts_seconds(chat, show):
    chat("s", "hi", "--timeout", "30")
    chat("s", "hi", "--timeout", "0.75")
    assert len(show("s")["messages"]) == 4


@pytest.mark.parametrize("bad", ["-1", "abc", "", "0.0"])
def test_timeout_must_be_a_positive_number(invoke, bad):
    result = invoke("chat", "-s", "s", "hi", "--timeout", bad)
    assert result.exit_code == 2
    assert "--timeout" in result.stderr
    assert listed(invoke) == []


def test_timeout_bounds_the_wait_for_a_busy_session(invoke, chat, show, foliko_home):
    chat("s", "hi")
    before = sqlite_rows(foliko_home, "s")
    with held(foliko_home, "s"):
        result = invoke("chat", "-s", "s", "blocked", "--timeout", "0.2")
    assert result.exit_code == 4
    assert result.stdout == ""
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("foliko: error: session 's' is busy: held by pid 4242 on the-test")
    assert "--timeout" in result.stderr
    assert sqlite_rows(foliko_home, "s") == before


def test_busy_message_names_the_timeout_given(invoke, chat, foliko_home):
    chat("s", "hi")
    with held(foliko_home, "s"):
        result = invoke("chat", "-s", "s", "blocked", "--timeout", "0.2")
    assert result.exit_code == 4
    assert "for more than 0.2s;" in result.stderr


def test_turn_timeout_exits_1_and_saves_nothing(invoke, chat, foliko_home, monkeypatch):
    chat("s", "hi")
    before = sqlite_rows(foliko_home, "s")

    async def never(self, request):
        await asyncio.Event().wait()

    monkeypatch.setattr(EchoModel, "generate", never)
    result = invoke("chat", "-s", "s", "hang", "--timeout", "0.2", "--var", "k=1")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "did not finish within 0.2s" in result.stderr
    assert sqlite_rows(foliko_home, "s") == before


# --json


def test_json_reports_the_turn(invoke, chat):
    data = orjson.loads(chat("s", "hi", "--json").stdout)
    assert data["message"] == "hi"
    assert data["model"] == "echo"
    assert data["finish_reason"] == "stop"
    assert data["session_id"] == "s"
    tool = orjson.loads(chat("s", "/tool get_session_info {}", "--json").stdout)
    assert tool["step_count"] == 2
    assert tool["message"].startswith("get_session_info returned:")


def test_json_output_is_one_line(chat):
    out = chat("s", "multi\nline message", "--json").stdout
    assert out.count("\n") == 1
    assert orjson.loads(out)["message"] == "multi\nline message"


# --dry-run


def test_dry_run_on_a_new_session_creates_nothing(invoke):
    data = dry_run(invoke, "-s", "ghost", "hello")
    assert data["model"] == "echo"
    assert data["messages"] == [{"role": "user", "content": "hello"}]
    assert {t["name"] for t in data["tools"]} >= {"get_session_info", "get_variable"}
    assert listed(invoke) == []


def test_dry_run_shows_history_plus_the_new_message_and_saves_nothing(
    invoke, chat, show, foliko_home
):
    chat("s", "one", "--var", "k=1")
    chat("s", '/tool set_variable {"key": "c", "value": 2}')
    before = sqlite_rows(foliko_home, "s")
    shown = show("s")
    data = dry_run(invoke, "-s", "s", "next", "--var", "k=9", "--system", "X")
    expected = [
        {k: m[k] for k in ("role", "content", "tool_calls", "tool_call_id", "name") if k in m}
        for m in shown["messages"]
    ] + [{"role": "user", "content": "next"}]
    assert data["messages"] == expected
    assert data["system"] == "X"
    assert sqlite_rows(foliko_home, "s") == before


def test_dry_run_is_exactly_what_the_model_receives(invoke, chat, monkeypatch):
    chat("s", "one", "--system", "Sys")
    chat("s", '/tool set_variable {"key": "c", "value": [1]}')
    preview = dry_run(invoke, "-s", "s", "and now?", input="piped context")
    seen = []
    original = EchoModel.generate

    async def spy(self, request):
        seen.append((request.system, request.messages, request.tools))
        return await original(self, request)

    monkeypatch.setattr(EchoModel, "generate", spy)
    assert invoke("chat", "-s", "s", "and now?", input="piped context").exit_code == 0
    system, messages, tools = seen[0]
    assert preview["system"] == system
    assert preview["messages"] == messages
    assert preview["tools"] == tools
    assert preview["messages"][-1] == {"role": "user", "content": "and now?\n\npiped context"}


def test_dry_run_with_new_shows_only_the_new_message(invoke, chat, show):
    chat("s", "old")
    before = show("s")
    data = dry_run(invoke, "-s", "s", "--new", "fresh")
    assert data["messages"] == [{"role": "user", "content": "fresh"}]
    assert show("s") == before


def test_dry_run_with_from_shows_the_fork_and_creates_nothing(invoke, chat, show):
    chat("src", "base", "--system", "forked prompt")
    before = show("src")
    data = dry_run(invoke, "-s", "dst", "--from", "src", "branch")
    assert [m["content"] for m in data["messages"]] == ["base", "base", "branch"]
    assert data["system"] == "forked prompt"
    assert listed(invoke) == ["src"]
    assert show("src") == before


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["-s", "s", "x", "-m", "nosuch:model"], "unknown model"),
        (["-s", "t", "--from", "s", "x"], "'t' already exists"),
        (["-s", "u", "--from", "ghost", "x"], "'ghost' not found"),
        (["-s", "s", "--from", "s", "x"], "into itself"),
        (["-s", "s"], "no message"),
    ],
)
def test_dry_run_errors_are_usage_errors(invoke, chat, show, args, fragment):
    chat("s", "a")
    chat("t", "b")
    before = show("s"), show("t")
    result = invoke("chat", "--dry-run", *args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert fragment in result.stderr
    assert listed(invoke) == ["s", "t"]
    assert (show("s"), show("t")) == before


# R1: a failed turn leaves the stored session byte-identical


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["--new"],
        ["--var", "k=2", "--system", "changed"],
        ["--new", "--var", "k=2"],
    ],
)
def test_unknown_model_leaves_the_session_byte_identical(invoke, chat, foliko_home, extra):
    chat("s", "one", "--var", "k=1", "--system", "kept")
    before = sqlite_rows(foliko_home, "s")
    shown = invoke("sessions", "show", "s", "--json").stdout
    result = invoke("chat", "-s", "s", "two", "-m", "nosuch:model", *extra)
    assert result.exit_code == 2
    assert "unknown model" in result.stderr
    assert sqlite_rows(foliko_home, "s") == before
    assert invoke("sessions", "show", "s", "--json").stdout == shown


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["--new"],
        ["--var", "k=2", "--system", "changed"],
        ["--new", "--from", "src"],
    ],
)
def test_model_failure_exits_1_and_leaves_the_session_byte_identical(
    invoke, chat, foliko_home, monkeypatch, extra
):
    chat("src", "source")
    chat("s", "one", "--var", "k=1", "--system", "kept")
    before = sqlite_rows(foliko_home, "s")

    async def broken(self, request):
        raise ModelError("provider said no; try later")

    monkeypatch.setattr(EchoModel, "generate", broken)
    result = invoke("chat", "-s", "s", "two", *extra)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.strip().splitlines()[-1] == "foliko: error: provider said no; try later"
    assert sqlite_rows(foliko_home, "s") == before


def test_failed_turn_on_a_new_session_creates_nothing(invoke, chat, monkeypatch):
    async def broken(self, request):
        raise ModelError("down")

    monkeypatch.setattr(EchoModel, "generate", broken)
    assert invoke("chat", "-s", "new", "hi", "--var", "k=1").exit_code == 1
    assert invoke("chat", "-s", "fork", "--from", "new", "hi").exit_code == 2
    assert listed(invoke) == []


def test_failed_turn_leaves_a_json_file_byte_identical(invoke, foliko_home):
    assert invoke("--storage", "json", "chat", "-s", "s", "one", "--var", "k=1").exit_code == 0
    path = foliko_home / "sessions" / "s.json"
    before = path.read_bytes()
    for extra in ([], ["--new"], ["--var", "k=5"]):
        result = invoke("--storage", "json", "chat", "-s", "s", "two", "-m", "nosuch:model", *extra)
        assert result.exit_code == 2
        assert path.read_bytes() == before


def test_a_tool_choice_naming_no_offered_tool_is_exit_2_and_saves_nothing(invoke, chat, show):
    chat("s", "one")
    before = show("s")
    result = invoke("chat", "-s", "s", "two", "-o", "tool_choice=lookup")
    assert result.exit_code == 2
    (line,) = [line for line in result.stderr.splitlines() if "error:" in line]
    assert "tool_choice names 'lookup', which is not one of this turn's tools" in line
    assert show("s") == before
    forced = invoke("chat", "-s", "s", "two", "-o", "tool_choice=get_session_info")
    assert forced.exit_code == 0, forced.stderr


def test_if_busy_reject_fails_at_once_on_a_held_session_in_one_line(invoke, chat, foliko_home):
    chat("s", "hi")
    before = sqlite_rows(foliko_home, "s")
    with held(foliko_home, "s"):
        result = invoke("chat", "-s", "s", "--if-busy", "reject", "not now")
    assert (result.exit_code, result.stdout) == (4, "")
    line = result.stderr.strip().splitlines()[-1]  # after the note on the echo model
    assert line == (
        "foliko: error: session 's' is busy with another turn (pid 4242 on the-test); "
        "this message was not sent; send it again to wait for that turn, or to interrupt "
        "it (--if-busy wait, --if-busy interrupt)"
    )
    assert sqlite_rows(foliko_home, "s") == before


def test_an_unknown_if_busy_is_a_usage_error(invoke):
    result = invoke("chat", "-s", "s", "--if-busy", "later", "hi")
    assert result.exit_code == 2
    assert "--if-busy" in result.stderr and "'later' is not one of" in result.stderr
    assert listed(invoke) == []
