"""Continuing the latest session, forking at a turn, rewinding and regenerating."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import orjson
import pytest

ECHO = {"FOLIKO_MODEL": "echo"}


@pytest.fixture
def chat(invoke):
    def run(*args: str):
        return invoke("chat", *args, env=ECHO)

    return run


@pytest.fixture
def contents(show):
    def load(session_id: str) -> list[str]:
        return [m["content"] for m in show(session_id)["messages"]]

    return load


def three_turns(chat, session_id="src"):
    for word in ("one", "two", "three"):
        assert chat("-s", session_id, word).exit_code == 0


def test_continue_picks_the_most_recently_active_session(chat, contents):
    assert chat("-s", "old", "first").exit_code == 0
    assert chat("-s", "recent", "second").exit_code == 0
    result = chat("-c", "again")
    assert result.exit_code == 0, result.stderr
    assert contents("recent") == ["second", "second", "again", "again"]
    assert contents("old") == ["first", "first"]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["-c", "-s", "x", "hi"], "one of them"),
        (["hi"], "-s/--session"),
    ],
)
def test_continue_and_session_are_one_or_the_other(chat, args, fragment):
    result = chat(*args)
    assert result.exit_code == 2
    assert fragment in result.stderr


def test_continue_with_no_session_yet_exits_2(chat):
    result = chat("-c", "hi")
    assert result.exit_code == 2
    assert "no session to continue" in result.stderr


@pytest.mark.parametrize("turns", [0, 1, 2, 3])
def test_fork_at_each_turn(chat, contents, show, turns):
    three_turns(chat)
    result = chat("-s", f"fork{turns}", "--from", "src", "--turns", str(turns), "new")
    assert result.exit_code == 0, result.stderr
    kept = ["one", "one", "two", "two", "three", "three"][: 2 * turns]
    assert contents(f"fork{turns}") == [*kept, "new", "new"]
    assert show(f"fork{turns}")["metadata"]["forked_from"] == "src"
    assert len(contents("src")) == 6


def test_fork_past_the_last_turn_exits_2_and_creates_nothing(chat, invoke):
    three_turns(chat)
    result = chat("-s", "fork", "--from", "src", "--turns", "4", "new")
    assert result.exit_code == 2
    assert "has 3 turn(s); cannot keep 4" in result.stderr
    assert invoke("sessions", "show", "fork").exit_code == 2


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["-s", "x", "--turns", "1", "hi"], "--turns needs --from"),
        (["-s", "x", "--from", "src", "--turns", "-1", "hi"], "-1"),
    ],
)
def test_turns_errors(chat, args, fragment):
    three_turns(chat)
    result = chat(*args)
    assert result.exit_code == 2
    assert fragment in result.stderr


def test_rewind_removes_the_last_turns(chat, invoke, contents, show):
    three_turns(chat)
    assert invoke("sessions", "vars", "src", "set", "k", "v").exit_code == 0
    result = invoke("sessions", "rewind", "src")
    assert result.exit_code == 0, result.stderr
    assert contents("src") == ["one", "one", "two", "two"]
    assert invoke("sessions", "rewind", "src", "--turns", "2").exit_code == 0
    assert contents("src") == []
    assert show("src")["variables"] == {"k": "v"}


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["src", "--turns", "4"], "cannot remove 4"),
        (["src", "--turns", "0"], "0"),
        (["ghost"], "'ghost' not found"),
    ],
)
def test_rewind_errors_change_nothing(chat, invoke, contents, args, fragment):
    three_turns(chat)
    result = invoke("sessions", "rewind", *args)
    assert result.exit_code == 2
    assert fragment in result.stderr
    assert len(contents("src")) == 6


def test_rewind_drops_a_summary_that_stood_for_removed_messages(foliko_home):
    from foliko_cli import Foliko, SessionRecord

    messages = [
        {"role": role, "content": f"{role} {i}", "created_at": 1}
        for i in range(3)
        for role in ("user", "assistant")
    ]
    with Foliko(storage="sqlite", model="echo", home=foliko_home) as foliko:
        record = SessionRecord(
            "s", messages=messages, compression_state={"summary": "all of it", "covered": 4}
        )
        foliko.import_sessions([record])
        kept = foliko.rewind_session("s")
        assert len(kept.messages) == 4 and kept.compression_state["covered"] == 4
        assert foliko.rewind_session("s").compression_state == {}
        record = foliko.get_session("s")
        assert len(record.messages) == 2 and record.compression_state == {}


def test_regenerate_replaces_the_last_turn_in_one_write(chat, contents, show):
    three_turns(chat)
    before = show("src")["messages"]
    result = chat("-s", "src", "--regenerate", "--json")
    assert result.exit_code == 0, result.stderr
    reply = orjson.loads(result.stdout)
    after = show("src")["messages"]
    assert [m["content"] for m in after] == ["one", "one", "two", "two", "three", "three"]
    # the kept messages are as they were, their item numbers written on them
    # (messages/item_numbers.py): the new reply is not given the old one's
    assert [{k: v for k, v in m.items() if k != "item"} for m in after[:4]] == before[:4]
    assert [m["item"] for m in after[:4]] == [0, 1, 2, 3]
    assert after[4]["request_id"] == reply["request_id"] != before[4]["request_id"]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["-s", "src", "--regenerate", "hi"], "give no MESSAGE"),
        (["-s", "empty", "--regenerate"], "'empty' not found"),
    ],
)
def test_regenerate_errors(chat, args, fragment):
    three_turns(chat)
    result = chat(*args)
    assert result.exit_code == 2
    assert fragment in result.stderr


def test_two_forks_racing_into_one_new_session_keep_exactly_one(foliko_home):
    """Both start before either commits; the loser fails, nothing is overwritten."""
    env = {**os.environ, **ECHO, "FOLIKO_HOME": str(foliko_home)}
    foliko = [sys.executable, "-m", "foliko_cli"]
    subprocess.run([*foliko, "chat", "-s", "src", "base"], env=env, check=True)
    barrier = threading.Barrier(2)
    outcomes = []

    def fork(word: str) -> None:
        barrier.wait()
        done = subprocess.run(
            [*foliko, "chat", "-s", "dst", "--from", "src", word],
            env=env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        outcomes.append((word, done.returncode, done.stderr))

    threads = [threading.Thread(target=fork, args=(w,)) for w in ("left", "right")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    shown = subprocess.run(
        [*foliko, "sessions", "show", "dst", "--json"], env=env, capture_output=True, check=True
    )
    stored = [m["content"] for m in orjson.loads(shown.stdout)["messages"]]
    winners = [word for word, code, _ in outcomes if code == 0]
    assert len(winners) == 1, outcomes
    assert stored == ["base", "base", winners[0], winners[0]]
    loser = next(o for o in outcomes if o[1] != 0)
    assert loser[1] == 2 and "already exists" in loser[2]


def test_waiting_for_a_busy_session_says_who_holds_it(invoke, foliko_home):
    from .locks import HOLDER, held

    with held(foliko_home, "busy"):
        result = invoke("chat", "-s", "busy", "hi", "--timeout", "1.5", env=ECHO)
    assert result.exit_code == 4
    waiting, busy = result.stderr.strip().splitlines()[-2:]
    assert waiting == f"foliko: waiting for session 'busy' (held by {HOLDER.decode()})…"
    assert "is busy" in busy and "--timeout" in busy


def test_a_short_wait_says_nothing(invoke):
    result = invoke("chat", "-s", "free", "hi", env=ECHO)
    assert result.exit_code == 0
    assert "waiting" not in result.stderr


def test_renames_a_to_b_and_b_to_a_at_once_never_deadlock(foliko_home):
    """Both sessions are locked in one global order, so the two renames queue
    instead of each holding one and waiting for the other (which would end in
    exit 4 at the timeout); each then finds its target taken."""
    env = {**os.environ, **ECHO, "FOLIKO_HOME": str(foliko_home)}
    foliko = [sys.executable, "-m", "foliko_cli"]
    for sid in ("a", "b"):
        subprocess.run([*foliko, "chat", "-s", sid, f"in {sid}"], env=env, check=True)
    barrier = threading.Barrier(2)
    outcomes = {}

    def rename(old: str, new: str) -> None:
        barrier.wait()
        done = subprocess.run(
            [*foliko, "sessions", "rename", old, new],
            env=env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=60,
        )
        outcomes[old] = (done.returncode, done.stderr)

    threads = [threading.Thread(target=rename, args=pair) for pair in (("a", "b"), ("b", "a"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(code for code, _ in outcomes.values()) == [2, 2], outcomes
    assert all("already exists" in err for _, err in outcomes.values())
    listed = subprocess.run(
        [*foliko, "sessions", "list", "-q"], env=env, capture_output=True, text=True, check=True
    )
    assert sorted(listed.stdout.split()) == ["a", "b"]
