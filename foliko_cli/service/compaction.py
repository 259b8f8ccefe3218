"""Compaction you can see and steer: compress now, list the compactions, undo them.

A compaction is written down where compression.py says (on the reply of the
turn that made or followed it); this module reads them back in order, with
the turns each stands for, and says which one the model's view starts from.
Uncompacting drops the summary from the view (never a message: the history
is always stored whole), so the next turn sends the whole history again; it
is compressed anew only if that passes the window's threshold.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from foliko_cli.common.clock import now_ms
from foliko_cli.errors import SessionNotFoundError, UsageError
from foliko_cli.messages.ids import check_session_id
from foliko_cli.messages.record import SessionRecord, SessionState, covered_messages
from foliko_cli.messages.turns import turns_before
from foliko_cli.service.base import ServiceBase
from foliko_cli.storage import capabilities

if TYPE_CHECKING:
    from foliko_cli.models.base import ModelProvider

ACTIVE, FOLDED, UNDONE = "active", "folded", "undone"


class CompactionMixin(ServiceBase):
    """``compact``, ``compactions`` and ``uncompact``."""

    async def compact(
        self,
        session_id: str,
        *,
        keep: int | None = None,
        model: str | ModelProvider | None = None,
        agent: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Compress the session's history now with ``model``'s summaries: all but its
        last ``keep`` turns, or (None) as a full context window would. The messages
        themselves stay. Returns the compaction as ``compactions`` lists it;
        NothingToCompactError (and nothing saved) when no message is left to fold
        into the summary."""
        check_session_id(session_id)
        if keep is not None and (type(keep) is not int or keep < 0):
            raise UsageError(
                f"cannot keep {keep!r} turns", fix="give a whole number of turns, 0 or more"
            )
        if await self.storage.revision(session_id) is None:
            raise SessionNotFoundError(session_id)
        handler = await self.handler(model, agent)
        entry = await handler.compact(session_id, request=self.request(timeout), keep=keep)
        listed = await self.compactions(session_id)
        return next((e for e in listed if e["number"] == entry["number"]), listed[-1])

    async def compactions(self, session_id: str) -> list[dict[str, Any]]:
        """Every compaction of the session, oldest first: as compression.py writes
        them, plus ``turns`` (the first and last turn, from 1, that the summary
        stands for; None when none), ``new_turns`` (those it folded in itself)
        and ``status``: ``active`` (the model's view starts after it), ``folded``
        (a later compaction took it over) or ``undone`` (by ``uncompact``). A
        summary from before foliko listed compactions is one entry whose
        ``number`` is None."""
        record = await self.get_session(session_id)
        return described(record)

    async def uncompact(self, session_id: str) -> SessionRecord:
        """Let the model see the whole history again from the next turn: the summary
        leaves the view (every compaction stays listed, as ``undone``). The history
        is not read or rewritten; the returned record holds no messages."""
        check_session_id(session_id)

        async def work() -> SessionRecord:
            record = await capabilities.load_state(self.storage, session_id)
            if record is None:
                raise SessionNotFoundError(session_id)
            state = record.compression_state
            if not covered_messages(record, record.first_seq):
                raise UsageError(
                    f"session {session_id!r} is not compacted: the model sees its whole "
                    "history already",
                    fix="compact it first",
                )
            for key in ("summary", "covered", "method"):
                state.pop(key, None)
            state["uncompacted_at"] = now_ms()
            state["undone_through"] = record.metadata.get("compression_count", 0)
            record.metadata["last_active"] = now_ms()
            record.revision = await self.storage.append(
                session_id,
                [],
                SessionState(record.variables, record.metadata, state),
                expected_revision=record.revision,
            )
            return record

        record = await self._held(session_id, work)
        self.framework.destroy_session_context(session_id)
        return record


def described(record: SessionRecord) -> list[dict[str, Any]]:
    """The compactions of ``record`` as ``AsyncFoliko.compactions`` gives them."""
    messages = record.messages
    state = record.compression_state
    entries = [
        entry
        for message in messages
        if message.get("role") == "assistant"
        for entry in _entries(message.get("compactions"))
    ]
    entries += _entries(state.get("compactions"))
    covered = covered_messages(record, len(messages))
    if covered and not any(_in_effect(entry, state) for entry in entries[-1:]):
        entries.append(
            {
                "number": None,
                "at": state.get("last_compressed_at"),
                "trigger": None,
                "method": state.get("method"),
                "model": None,
                "from": 0,
                "covered": covered,
                "summary": state.get("summary"),
                "usage": None,
            }
        )
    undone = state.get("undone_through")
    shown = []
    for index, entry in enumerate(entries):
        number = entry.get("number")
        if index == len(entries) - 1 and covered and _in_effect(entry, state):
            status = ACTIVE
        elif isinstance(undone, int) and isinstance(number, int) and number <= undone:
            status = UNDONE
        else:
            status = FOLDED
        first = _position(entry.get("from"), len(messages))
        last = _position(entry.get("covered"), len(messages))
        shown.append(
            {
                **entry,
                "turns": _turn_range(messages, 0, last),
                "new_turns": _turn_range(messages, first, last),
                "status": status,
            }
        )
    return shown


def _entries(value: Any) -> list[dict[str, Any]]:
    return [e for e in value if isinstance(e, dict)] if isinstance(value, list) else []


def _in_effect(entry: dict[str, Any], state: dict[str, Any]) -> bool:
    return entry.get("covered") == state.get("covered") and entry.get("summary") == state.get(
        "summary"
    )


def _position(value: Any, total: int) -> int:
    return min(max(0, value), total) if type(value) is int else 0


def _turn_range(messages: list[dict[str, Any]], start: int, end: int) -> list[int] | None:
    """The first and last turn (from 1) that begin among ``messages[start:end]``."""
    before, through = turns_before(messages, start), turns_before(messages, end)
    return [before + 1, through] if through > before else None
