"""A message's item number: what names it (``msg_N_…`` over HTTP) for its whole life.

A message without an ``item`` key is numbered by its position plus the
session's ``item_offset`` (metadata; 0 until a rewrite removed messages), so a
session written before numbers existed keeps the ids it always had. Numbers
grow with the position. A rewrite that may remove messages first writes each
message's number on it (``pinned``) and then moves the offset past every
number given so far (``offset_after``): no message changes its number, and no
message added later takes a removed one's. Backends and migrations keep both
as they keep any key, so numbers survive a restart and a move.
"""

from __future__ import annotations

from typing import Any

ITEM = "item"
OFFSET = "item_offset"


def offset_of(metadata: dict[str, Any]) -> int:
    offset = metadata.get(OFFSET, 0)
    return offset if type(offset) is int and offset >= 0 else 0


def number_of(message: dict[str, Any], position: int, offset: int) -> int:
    number = message.get(ITEM)
    return number if type(number) is int else position + offset


def position_of(messages: list[dict[str, Any]], number: int, offset: int) -> int | None:
    """Where the message numbered ``number`` is in ``messages`` (a whole history)."""
    guess = number - offset
    if 0 <= guess < len(messages) and number_of(messages[guess], guess, offset) == number:
        return guess
    for position, message in enumerate(messages):
        if message.get(ITEM) == number:
            return position
    return None


def pinned(
    messages: list[dict[str, Any]], metadata: dict[str, Any]
) -> tuple[list[dict[str, Any]], int]:
    """``messages`` each with its number written on it (copies where it was not),
    and the next number: what a rewrite starts from."""
    offset = offset_of(metadata)
    out = [
        m if ITEM in m else {**m, ITEM: position + offset} for position, m in enumerate(messages)
    ]
    return out, len(messages) + offset


def offset_after(next_number: int, length: int) -> dict[str, int]:
    """The metadata of a rewritten history of ``length`` pinned messages whose next
    number is ``next_number``."""
    return {OFFSET: max(0, next_number - length)}
