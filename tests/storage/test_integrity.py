"""The shared integrity checks (storage/integrity.py): what they call damage and
how they say it; a writer that races a creation is not taken for damage."""

from __future__ import annotations

import pytest

from foliko_cli.errors import ConflictError, CorruptSessionError
from foliko_cli.storage import integrity
from foliko_cli.storage.sql import writes
from foliko_cli.storage.sql.dialect import PostgresDialect
from foliko_cli.storage.sql.executor import run_now

from .services import state, turn


@pytest.mark.parametrize(
    ("seqs", "start", "count", "reason"),
    [
        ([0, 2, 3], 0, 4, "it counts 4 messages but seq 1 is missing"),
        ([0, 3], 0, 6, "it counts 6 messages but seq 1-2, 4-5 are missing"),
        ([0, 1, 2], 0, 2, "it counts 2 messages but seq 2 is stored beyond them"),
        ([5, 7, 8], 5, 10, "it counts 10 messages but seq 6, 9 are missing"),
        (
            [0, 2, 4, 6, 8, 9, 10],
            0,
            10,
            "it counts 10 messages but seq 1, 3, 5, … are missing and seq 10 is stored beyond them",
        ),
        ([], 0, 1, "it counts 1 message but seq 0 is missing"),
    ],
)
def test_a_sequence_with_holes_says_which_positions(seqs, start, count, reason):
    with pytest.raises(CorruptSessionError) as raised:
        integrity.check_sequence("s", "here", seqs, count=count, start=start)
    assert raised.value.reason == reason


@pytest.mark.parametrize(
    ("seqs", "start", "count"), [([], 0, 0), ([0, 1, 2], 0, 3), ([8, 9], 8, 10), ([], 4, 4)]
)
def test_a_whole_sequence_passes(seqs, start, count):
    integrity.check_sequence("s", "here", seqs, count=count, start=start)
    first, last = (seqs[0], seqs[-1]) if seqs else (None, None)
    integrity.check_span(
        "s", "here", count=count, found=len(seqs), first=first, last=last, start=start
    )


def test_an_absurd_count_is_described_without_walking_it():
    with pytest.raises(CorruptSessionError) as raised:
        integrity.check_sequence("s", "here", [0, 1], count=10**15)
    assert raised.value.reason == f"it counts {10**15} messages but seq 2-{10**15 - 1} are missing"


class Replies:
    """An executor that answers each query with the next of ``answers``."""

    def __init__(self, *answers):
        self.answers = list(answers)

    async def fetchone(self, sql, params=()):
        return self.answers.pop(0)


def test_a_session_another_writer_created_meanwhile_is_a_conflict_not_damage():
    """PostgreSQL reads each statement from a new snapshot: the session row was
    not there, the messages a concurrent creation committed since are."""
    db = Replies(None, (2, 0, 1), (1_700_000_000_000_000, 2, "hi"))
    with pytest.raises(ConflictError) as raised:
        run_now(
            writes.append_messages(
                db, PostgresDialect("s"), "shared", turn("x"), state(), 0, where="there"
            )
        )
    assert (raised.value.expected, raised.value.found) == (0, 1_700_000_000_000_000)


def test_messages_without_their_session_row_are_damage():
    db = Replies(None, (2, 0, 1), None)
    with pytest.raises(CorruptSessionError) as raised:
        run_now(
            writes.append_messages(
                db, PostgresDialect("s"), "shared", turn("x"), state(), 0, where="there"
            )
        )
    assert raised.value.reason == "its row in the sessions table is gone but 2 messages remain"
