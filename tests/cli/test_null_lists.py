"""Safe pipelines: every list that takes ``-q`` takes ``-0/--null`` (its ids, each
ended by NUL); ids that begin with ``-`` work after ``--``. The command tree is
walked, so a new list is covered without being listed here."""

from __future__ import annotations

import pytest

from .commands import LEAVES

TRICKY_IDS = ["my notes", 'it\'s "quoted"', "-draft", "plain"]
LISTS = [path for path, command in LEAVES.items() if "quiet" in {p.name for p in command.params}]
NEEDS = {("sessions", "vars"): ["-s", "plain"]}


@pytest.fixture
def tricky(invoke):
    for session_id in TRICKY_IDS:
        assert invoke("chat", "-s", session_id, "--var", "k=v", "hi").exit_code == 0
    return TRICKY_IDS


def test_the_lists_are_found():
    assert ("sessions", "list") in LISTS and ("models", "list") in LISTS and len(LISTS) >= 7


@pytest.mark.parametrize("path", LISTS, ids=[" ".join(p) for p in LISTS])
def test_every_quiet_list_takes_null(invoke, tricky, path, monkeypatch):
    monkeypatch.setenv("OLLAMA_HOST", "127.0.0.1:9")
    words = [*path, *NEEDS.get(path, [])]

    quiet = invoke(*words, "-q")
    null = invoke(*words, "-0")
    long = invoke(*words, "--null")

    assert quiet.exit_code == null.exit_code == long.exit_code == 0, null.stderr
    assert null.stdout == long.stdout
    ids = quiet.stdout.splitlines()
    assert null.stdout == "".join(f"{i}\0" for i in ids)


def test_session_ids_come_out_whole(invoke, tricky):
    listed = invoke("sessions", "list", "-0").stdout
    assert sorted(listed.split("\0")[:-1]) == sorted(TRICKY_IDS)


@pytest.mark.parametrize(
    "words",
    [
        ("sessions", "show", "--", "-draft"),
        ("sessions", "export", "--", "-draft", "my notes"),
        ("sessions", "vars", "--", "-draft", "get", "k"),
        ("sessions", "rewind", "--", "-draft"),
        ("sessions", "clear", "--", "-draft"),
        ("chat", "-s", "-draft", "--", "-- a message that starts with dashes"),
    ],
    ids=lambda w: " ".join(w[:2]),
)
def test_an_id_that_begins_with_a_dash_works_after_double_dash(invoke, tricky, words):
    result = invoke(*words)
    assert result.exit_code == 0, result.stderr


def test_renaming_and_deleting_dash_ids_after_double_dash(invoke, tricky):
    assert invoke("sessions", "rename", "--", "-draft", "-final").exit_code == 0
    assert invoke("sessions", "delete", "--", "-final").exit_code == 0
    assert "-final" not in invoke("sessions", "list", "-q").stdout.splitlines()
