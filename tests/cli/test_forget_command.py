"""`foliko sessions forget`: sessions, or messages of one, removed for good with
their trash copies, a server's journals and their search index entries, and a
receipt; what storage check says of a copy a forget should have removed."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest

from foliko_cli.messages.record import SessionRecord, new_metadata
from foliko_cli.service import AsyncFoliko

ECHO = {"FOLIKO_MODEL": "echo"}


@pytest.fixture
def chat(invoke):
    def run(session_id: str, message: str):
        result = invoke("chat", "-s", session_id, message, env=ECHO)
        assert result.exit_code == 0, result.stderr

    return run


def ok(invoke, *args: str) -> str:
    result = invoke(*args, env=ECHO)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def found(invoke, word: str) -> list[tuple[str, int]]:
    hits = orjson.loads(ok(invoke, "sessions", "search", word, "--json"))
    return sorted((hit["session_id"], hit["seq"]) for hit in hits)


def trashed(invoke) -> list[str]:
    rows = orjson.loads(ok(invoke, "sessions", "trash", "list", "--json"))
    return [row["session_id"] for row in rows]


def test_forgetting_messages_removes_them_their_trash_copies_and_their_search_hits(invoke, chat):
    chat("work", "my zebracorn password")
    chat("work", "plain weather")
    chat("work", "more weather")
    ok(invoke, "sessions", "rewind", "work")  # a copy of all of it in the trash
    chat("other", "zebracorn too")
    assert ("work", 0) in found(invoke, "zebracorn") and trashed(invoke) == ["work"]
    receipt = orjson.loads(
        ok(invoke, "sessions", "forget", "work", "--message", "0..1", "-y", "--json")
    )
    assert receipt["sessions"] == [
        {
            "session_id": "work",
            "whole": False,
            "messages": 2,
            "positions": [[0, 1]],
            "trash_copies": 1,
            "server_records": 0,
        }
    ]
    assert receipt["dry_run"] is False and receipt["backend"] == "sqlite"
    assert receipt["indexes"] == ["SQLite FTS5 index messages_fts"]
    assert "zebracorn" not in orjson.dumps(receipt).decode()
    assert found(invoke, "zebracorn") == [("other", 0), ("other", 1)]
    assert trashed(invoke) == []
    shown = orjson.loads(ok(invoke, "sessions", "show", "work", "--json"))
    assert [m["role"] for m in shown["messages"]] == ["user", "assistant"]
    assert shown["messages"][0]["content"] == "plain weather"
    assert [m["item"] for m in shown["messages"]] == [2, 3]  # each keeps its number
    assert ok(invoke, "storage", "check", "--json") == "[]\n"


def test_forgetting_a_session_removes_it_and_every_copy_and_stores_the_receipt(
    invoke, chat, foliko_home
):
    chat("gone", "walrusish secret")
    ok(invoke, "sessions", "clear", "gone")
    chat("gone", "walrusish again")
    ok(invoke, "sessions", "delete", "gone")
    result = invoke("sessions", "forget", "gone", "--yes")
    assert result.exit_code == 0, result.stderr
    assert "the whole session, 2 message(s)\t2\t0" in result.stdout
    assert "receipt fg" in result.stderr and "messages_fts" in result.stderr
    assert found(invoke, "walrusish") == [] and trashed(invoke) == []

    async def receipts():
        async with AsyncFoliko(home=foliko_home) as service:
            return await service.forget_receipts()

    import asyncio

    (stored,) = asyncio.run(receipts())
    assert stored.sessions[0]["session_id"] == "gone" and stored.sessions[0]["trash_copies"] == 2
    assert "gone" not in ok(invoke, "sessions", "list", "--ids")
    (listed,) = orjson.loads(ok(invoke, "sessions", "forget", "--receipts", "--json"))
    assert listed == {**stored.to_dict(), "dry_run": False}
    assert "'gone': the whole session, 2 message(s)" in ok(
        invoke, "sessions", "forget", "--receipts"
    )


def test_a_dry_run_says_what_would_go_and_removes_nothing(invoke, chat):
    chat("s1", "keep me")
    receipt = orjson.loads(ok(invoke, "sessions", "forget", "s1", "--dry-run", "--json"))
    assert receipt["dry_run"] is True and receipt["sessions"][0]["messages"] == 2
    assert found(invoke, "keep") == [("s1", 0), ("s1", 1)]
    assert ok(invoke, "storage", "check", "--json") == "[]\n"


def test_a_server_journal_naming_the_session_goes_with_it(foliko_home):
    import asyncio

    async def scenario():
        async with AsyncFoliko(home=foliko_home, storage="memory", model="echo") as service:
            await service.chat("s1", "hi there")
            journal = SessionRecord(
                ".foliko/background/r1",
                variables={"events": ["hi there"]},
                metadata={**new_metadata(), "session": "s1"},
            )
            unrelated = SessionRecord(
                ".foliko/background/r2", metadata={**new_metadata(), "session": "s2"}
            )
            await service.storage.save(journal)
            await service.storage.save(unrelated)
            receipt = await service.forget(["s1"])
            return receipt, await service.storage.session_ids()

    receipt, left = asyncio.run(scenario())
    assert receipt.sessions[0]["server_records"] == 1
    assert ".foliko/background/r1" not in left and ".foliko/background/r2" in left


def test_a_summary_and_a_title_taken_from_a_forgotten_message_go_too():
    from foliko_cli.service.forgetting import without

    messages = [
        {"role": "user", "content": "secret plan for the heist", "created_at": 1},
        {"role": "assistant", "content": "ok", "created_at": 2},
        {
            "role": "user",
            "content": "later",
            "created_at": 3,
            "compactions": [{"covered": 2, "summary": "they planned a heist"}],
        },
        {"role": "assistant", "content": "fine", "created_at": 4},
    ]
    record = SessionRecord(
        "s1",
        messages=messages,
        metadata={**new_metadata(), "title": "secret plan for the…"},
        compression_state={"summary": "a heist was planned", "covered": 2},
    )
    rewritten, count = without(record, [(0, 0)])
    assert count == 1
    assert "title" not in rewritten.metadata and rewritten.compression_state == {}
    assert all("compactions" not in m for m in rewritten.messages)
    assert [m["item"] for m in rewritten.messages] == [1, 2, 3]
    kept, _ = without(record, [(3, 3)])  # a summary of earlier messages stays
    assert kept.compression_state["covered"] == 2 and kept.metadata["title"]


def test_storage_check_reports_a_copy_a_forget_should_have_removed_and_repair_removes_it(
    invoke, chat, foliko_home
):
    import asyncio

    from foliko_cli.storage import trash

    chat("s1", "zebracorn")
    ok(invoke, "sessions", "forget", "s1", "-y")

    async def plant():  # a copy made before the forget, left behind (a bug, a restore)
        async with AsyncFoliko(home=foliko_home) as service:
            await trash.keep_copy(
                service.storage, SessionRecord("s1", metadata=new_metadata()), "delete", now=1000
            )

    asyncio.run(plant())
    result = invoke("storage", "check", "--json")
    assert result.exit_code == 3
    (problem,) = orjson.loads(result.stdout)
    assert problem["kind"] == "forgotten" and "forgotten before" in problem["reason"]
    repaired = invoke("storage", "check", "--repair")
    assert repaired.exit_code == 0, repaired.stderr
    assert "removed" in repaired.stderr
    assert ok(invoke, "storage", "check", "--json") == "[]\n"


# the error paths: one line naming the problem and the fix, exit 2, nothing forgotten


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("nope", "-y"), "session 'nope' not found"),
        (("s1", "--messages", "3..1", "-y"), "bad message range '3..1'"),
        (("s1", "--message", "x", "-y"), "bad message range 'x'"),
        (("s1", "--message", "-1", "-y"), "bad message range '-1'"),
        (("s1", "--messages", "1..9", "-y"), "has messages 0..1; 1..9 is not among them"),
        (("s1", "s2", "--message", "0", "-y"), "name one session"),
        ((".foliko/trash", "-y"), "foliko's own"),
        (("s1",), "stdin is not a terminal; pass --yes"),
        ((), "name the sessions to forget"),
        (("s1", "--receipts"), "give it no ID"),
    ],
)
def test_bad_input_is_exit_2_on_one_line_and_forgets_nothing(invoke, chat, args, says):
    chat("s1", "still here")
    result = invoke("sessions", "forget", *args)
    assert result.exit_code == 2, result.stderr
    assert result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    assert says in result.stderr
    assert found(invoke, "still") == [("s1", 0), ("s1", 1)]


@pytest.mark.slow
def test_on_a_terminal_it_asks_first(foliko_home, run_foliko):
    pexpect = pytest.importorskip("pexpect")
    assert run_foliko("chat", "-s", "s1", "hello", env=ECHO).returncode == 0
    foliko = str(Path(sys.executable).with_name("foliko"))
    child = pexpect.spawn(foliko, ["sessions", "forget", "s1"], encoding="utf-8", timeout=30)
    child.expect_exact("will forget 's1': the whole session, 2 message(s)")
    child.expect_exact("Forget for good? It cannot be undone [y/N]: ")
    child.sendline("n")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1 and "nothing was forgotten" in child.before
    assert b"s1" in run_foliko("sessions", "list", "--ids").stdout
    child = pexpect.spawn(foliko, ["sessions", "forget", "s1"], encoding="utf-8", timeout=30)
    child.expect_exact("[y/N]: ")
    child.sendline("y")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0 and "receipt fg" in child.before
    assert b"s1" not in run_foliko("sessions", "list", "--ids").stdout
