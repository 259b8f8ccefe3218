"""``foliko audit`` and ``foliko audit prune``: the log of what MCP hosts and API
keys read, filtered and listed like every list, pruned to a bound; each bad
input one line and exit 2."""

from __future__ import annotations

import asyncio
import datetime

import orjson
import pytest

from foliko_cli.storage import capabilities
from foliko_cli.storage.base import AuditEntry
from foliko_cli.storage.sqlite import SQLiteStorage

DAY = 86_400_000
JAN = int(datetime.datetime(2026, 1, 10, tzinfo=datetime.UTC).timestamp() * 1000)
ENTRIES = [
    AuditEntry(JAN, "mcp:Claude Code", "tools/call read_session", ("proj-a",), "a" * 64),
    AuditEntry(JAN + DAY, "key:ann/0123abcd", "GET /v1/sessions/{session_id}", ("b",), "b" * 64),
    AuditEntry(JAN + 2 * DAY, "key:ci", "POST /v1/responses", ("proj-a",), "c" * 64, "403"),
]


@pytest.fixture
def logged(foliko_home):
    async def write():
        storage = SQLiteStorage(foliko_home / "sessions.db")
        try:
            await capabilities.audit_append(storage, ENTRIES)
        finally:
            await storage.close()

    foliko_home.mkdir(parents=True, exist_ok=True)
    asyncio.run(write())
    return foliko_home


def _listed(invoke, *args: str) -> list[dict]:
    result = invoke("audit", *args, "--json")
    assert result.exit_code == 0, result.stderr
    return orjson.loads(result.stdout)


def test_audit_lists_every_entry_and_filters_by_time_session_and_client(logged, invoke):
    rows = _listed(invoke)
    assert [row["call"] for row in rows] == [entry.call for entry in ENTRIES]
    assert rows[2] == {
        "at": JAN + 2 * DAY,
        "client": "key:ci",
        "call": "POST /v1/responses",
        "session_ids": ["proj-a"],
        "outcome": "403",
        "result_sha256": "c" * 64,
    }
    assert [r["client"] for r in _listed(invoke, "--session", "proj-a")] == [
        "mcp:Claude Code",
        "key:ci",
    ]
    assert [r["client"] for r in _listed(invoke, "--key", "ann")] == ["key:ann/0123abcd"]
    assert [r["client"] for r in _listed(invoke, "--key", "ci")] == ["key:ci"]
    assert [r["client"] for r in _listed(invoke, "--key", "mcp:Claude Code")] == ["mcp:Claude Code"]
    assert len(_listed(invoke, "--since", "2026-01-11")) == 2
    assert _listed(invoke, "--since", "1d") == []
    table = invoke("audit", "--format", "table", "--session", "b")
    assert table.exit_code == 0 and "GET /v1/sessions/{session_id}" in table.stdout
    assert "bbbbbbbbbbbb" in table.stdout and "b" * 13 not in table.stdout


def test_audit_prune_keeps_a_count_or_drops_before_a_date(logged, invoke):
    result = invoke("audit", "prune", "--before", "2026-01-11", "--json")
    assert result.exit_code == 0, result.stderr
    assert orjson.loads(result.stdout) == {"pruned": 1}
    assert "pruned 1 audit entry" in result.stderr
    assert invoke("audit", "prune", "--keep", "1").exit_code == 0
    assert [r["client"] for r in _listed(invoke)] == ["key:ci"]
    assert invoke("audit", "prune").exit_code == 0  # to the default bound: nothing to drop
    assert len(_listed(invoke)) == 1


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("audit", "--since", "someday"), "'someday' is neither a duration nor a date"),
        (("audit", "prune", "--before", "later"), "'later' is neither a duration nor a date"),
        (("audit", "prune", "--keep", "-1"), "'--keep'"),
        (("audit", "prune", "--keep", "1", "--before", "1d"), "give a date or a count"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(logged, run_foliko, args, fragment):
    done = run_foliko(*args)
    assert done.returncode == 2, done.stderr.decode()
    assert done.stdout == b""
    stderr = done.stderr.decode()
    assert stderr.count("\n") == 1 and fragment in stderr, stderr
    assert stderr.startswith("foliko: error: ")
