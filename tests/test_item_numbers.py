"""Item numbers (messages/item_numbers.py): every message keeps the number it
was given for its whole life, through every rewrite of the history, and no
message added later is given a removed one's."""

from __future__ import annotations

from foliko_cli import Foliko
from foliko_cli.messages.item_numbers import number_of, offset_of
from foliko_cli.service.values import TurnRequest


def numbered(foliko: Foliko, session_id: str) -> dict[int, str]:
    record = foliko.get_session(session_id)
    offset = offset_of(record.metadata)
    return {
        number_of(m, p, offset): f"{m['role']}:{m['content']}"
        for p, m in enumerate(record.messages)
    }


def test_numbers_are_positions_until_a_rewrite_and_survive_every_one():
    with Foliko("memory", "echo") as foliko:
        for text in ("a", "b", "c"):
            foliko.chat("s", text)
        first = numbered(foliko, "s")
        assert list(first) == [0, 1, 2, 3, 4, 5]  # a session never rewritten: positions
        foliko.splice_messages("s", 0, 1)  # delete the first message
        assert numbered(foliko, "s") == {k: v for k, v in first.items() if k != 0}
        foliko.rewind_session("s")  # the last turn goes
        rewound = numbered(foliko, "s")
        assert rewound == {k: v for k, v in first.items() if k not in (0, 4, 5)}
        foliko.chat("s", "d")
        after = numbered(foliko, "s")
        assert list(after)[-2:] == [6, 7]  # not 4 and 5 again
        foliko.chat(TurnRequest("s", None, regenerate=True))
        regenerated = numbered(foliko, "s")
        assert list(regenerated)[:-2] == list(after)[:-2]
        assert list(regenerated)[-2:] == [8, 9]
        foliko.clear_session("s")
        foliko.chat("s", "e")
        assert list(numbered(foliko, "s")) == [10, 11]


def test_a_fork_keeps_the_numbers_of_what_it_copies_and_adds_after_them():
    with Foliko("memory", "echo") as foliko:
        for text in ("a", "b", "c"):
            foliko.chat("s", text)
        foliko.splice_messages("s", 2, 2)  # the middle turn
        source = numbered(foliko, "s")
        foliko.fork_session("s", "f")
        foliko.chat("f", "d")
        forked = numbered(foliko, "f")
        assert list(forked)[:4] == list(source)
        assert len(set(forked)) == len(forked) == 6
        assert min(list(forked)[4:]) > max(source)
