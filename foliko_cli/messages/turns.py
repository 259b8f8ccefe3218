"""Turns within a stored history: counting them and cutting a history at one.

A turn is a user message and everything after it up to the next user
message (the replies, tool calls and tool results it caused). Messages
before the first user message (an imported system note, say) belong to no
turn and are always kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from foliko_cli.errors import UsageError


def turn_starts(messages: list[dict[str, Any]]) -> list[int]:
    """The position of each turn's user message."""
    return [i for i, message in enumerate(messages) if message.get("role") == "user"]


def keep_turns(messages: list[dict[str, Any]], turns: int, *, session_id: str) -> int:
    """How many messages make up the first ``turns`` turns (0 <= turns <= the count)."""
    starts = turn_starts(messages)
    if not 0 <= turns <= len(starts):
        raise UsageError(
            f"session {session_id!r} has {len(starts)} turn(s); cannot keep {turns}",
            fix=f"give a number from 0 to {len(starts)}",
        )
    return starts[turns] if turns < len(starts) else len(messages)


def drop_turns(messages: list[dict[str, Any]], turns: int, *, session_id: str) -> int:
    """How many messages are left after removing the last ``turns`` turns (>= 1)."""
    total = len(turn_starts(messages))
    if not 1 <= turns <= total:
        raise UsageError(
            f"session {session_id!r} has {total} turn(s); cannot remove {turns}",
            fix=f"give a number from 1 to {total}" if total else "it has no turn to remove",
        )
    return keep_turns(messages, total - turns, session_id=session_id)


def turns_before(messages: list[dict[str, Any]], position: int) -> int:
    """How many turns begin before ``position``: the number of the turn (from 1)
    that holds the message there."""
    return sum(1 for message in messages[:position] if message.get("role") == "user")


def cut_compression(
    state: dict[str, Any], kept: int, dropped: Iterable[dict[str, Any]] = ()
) -> dict[str, Any]:
    """The compression state for a history cut to its first ``kept`` messages
    (``dropped``: the messages that went): a summary standing for messages
    that are gone no longer applies. The compactions still in effect that a
    dropped reply kept, and those waiting for a reply, wait for the next one
    (``compactions``)."""
    covered = state.get("covered", 0)
    if not (isinstance(covered, int) and covered <= kept):
        return {}
    state = dict(state)
    carried = [m.get("compactions") for m in dropped if m.get("role") == "assistant"]
    waiting = [
        entry
        for entries in [*carried, state.get("compactions")]
        if isinstance(entries, list)
        for entry in entries
        if isinstance(entry, dict) and _at_most(entry.get("covered"), kept)
    ]
    state.pop("compactions", None)
    if waiting:
        state["compactions"] = waiting
    return state


def _at_most(value: Any, limit: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value <= limit
