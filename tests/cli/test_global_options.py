"""``--storage`` and ``--user`` work before or after every subcommand. The command
tree is walked, so a new command is covered without being listed here."""

from __future__ import annotations

from pathlib import Path

import click
import orjson
import pytest

from .commands import LEAF_IDS, LEAVES


def filler(param: click.Parameter) -> list[str]:
    """Words that satisfy a required parameter (the command body never runs)."""
    value = "1d" if param.name == "older_than" else "x"
    if isinstance(param.type, click.Choice):
        value = str(param.type.choices[0])
    if isinstance(param, click.Option):
        return [param.opts[-1], value]
    return [value]


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch):
    """Every command's body replaced by one that records the global options it got."""
    record: list[dict] = []

    def recorder(**_params):
        record.append(dict(click.get_current_context().find_root().obj or {}))

    for command in LEAVES.values():
        monkeypatch.setattr(command, "callback", recorder)
    return record


@pytest.mark.parametrize("path", list(LEAVES), ids=LEAF_IDS)
def test_every_command_takes_the_global_options_before_or_after_it(invoke, seen, path):
    command = LEAVES[path]
    required = [word for p in command.params if p.required for word in filler(p)]
    given = ["--storage", "json:///elsewhere", "--user", "bob"]

    before = invoke(*given, *path, *required)
    after = invoke(*path, *required, *given)
    mixed = invoke("--storage", "memory", *path, *required, "--user", "bob")

    for result in (before, after, mixed):
        assert result.exit_code == 0, result.stderr
    assert seen[0] == seen[1] == {"storage": "json:///elsewhere", "user": "bob"}
    assert seen[2] == {"storage": "memory", "user": "bob"}
    assert "--storage" in invoke(*path, "--help").stdout


@pytest.fixture
def other_store(invoke, tmp_path: Path) -> str:
    """A json store holding s1 (a variable k) and bob's b1; the default one holds nothing."""
    url = f"json:///{tmp_path / 'other'}"
    assert invoke("--storage", url, "chat", "-s", "s1", "--var", "k=v", "hello").exit_code == 0
    assert invoke("--storage", url, "--user", "bob", "chat", "-s", "b1", "bob's").exit_code == 0
    return url


READERS = [
    ("sessions", "list", "-q"),
    ("sessions", "show", "s1", "--json"),
    ("sessions", "search", "hello"),
    ("sessions", "export", "s1"),
    ("sessions", "vars", "s1"),
    ("usage", "--json"),
    ("storage", "info", "--json"),
    ("chat", "-s", "s1", "--dry-run", "again"),
]


@pytest.mark.parametrize("words", READERS, ids=[" ".join(w[:2]) for w in READERS])
def test_the_storage_after_the_command_is_the_one_used(invoke, other_store, words):
    before = invoke("--storage", other_store, *words)
    after = invoke(*words, "--storage", other_store)

    assert before.exit_code == after.exit_code == 0, (before.stderr, after.stderr)
    assert after.stdout == before.stdout
    default = invoke(*words)
    assert default.stdout != after.stdout, "the default store holds nothing of this"


def test_the_user_after_the_command_is_the_one_used(invoke, other_store):
    mine = invoke("sessions", "list", "-q", "--storage", other_store)
    bobs = invoke("sessions", "list", "-q", "--storage", other_store, "--user", "bob")

    assert sorted(mine.stdout.split()) == ["s1", "~bob~/b1"], "without --user: everyone's"
    assert bobs.stdout.split() == ["b1"]


def test_workflow_validate_takes_the_storage_after_it(invoke, other_store, tmp_path: Path):
    flow = tmp_path / "flow.toml"
    flow.write_text('[[steps]]\nprompt = "hi {{who}}"\n')

    result = invoke("workflow", "validate", str(flow), "--var", "who=me", "--storage", other_store)

    assert result.exit_code == 0, result.stderr


def test_usage_after_the_command_counts_that_store(invoke, other_store):
    totals = orjson.loads(invoke("usage", "--json", "--storage", other_store).stdout)["total"]
    assert totals["replies"] == 2


@pytest.mark.parametrize("door", [["serve"], ["mcp", "serve", "--http"]])
@pytest.mark.parametrize(
    ("storage", "fragment"),
    [
        ("bogus://x", "unknown storage 'bogus://x'"),
        ("sqlite:////nowhere/at/all/s.db", "the directory /nowhere/at/all of the SQLite"),
        ("postgresql://127.0.0.1/db?schema=bad-name", "invalid PostgreSQL schema name"),
    ],
)
def test_serve_refuses_a_bad_storage_in_one_line_before_it_starts(invoke, door, storage, fragment):
    result = invoke("--storage", storage, *door, "--port", "0")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("foliko: error: ") and fragment in line
    assert "listening" not in result.stderr


def test_serve_refuses_a_user_in_one_line(invoke):
    result = invoke("serve", "--user", "bob", "--port", "0")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "foliko: error: foliko serve serves every user of its --api-keys file, not one --user; "
        "leave out --user"
    ]
