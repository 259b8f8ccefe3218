"""What the service's parts share: message checks, reports, the copy a fork makes."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from foliko_cli.common.clock import now_ms
from foliko_cli.errors import UsageError
from foliko_cli.messages.ids import INTERNAL_PREFIX as INTERNAL_PREFIX
from foliko_cli.messages.ids import is_internal as is_internal
from foliko_cli.messages.record import MAX_MESSAGE_CHARS as MAX_MESSAGE_CHARS
from foliko_cli.messages.record import SessionRecord, SessionSummary, fork_origin
from foliko_cli.messages.turns import cut_compression, keep_turns
from foliko_cli.storage.base import StoredProblem

DEFAULT_MODEL_NOTICE = (
    "no model configured; using the offline 'echo' model (choose one with the model "
    "setting, e.g. FOLIKO_MODEL; FOLIKO_MODEL=echo silences this)"
)
_NOTICE_MARKER = ".echo-notice-shown"


def log_notice(message: str) -> None:
    """The default ``notify``: a warning on the ``foliko`` logger (imported when
    first needed: logging costs start-up time)."""
    import logging

    logging.getLogger("foliko").warning(message)


def check_message_text(message: str) -> str:
    if not message.strip():
        raise UsageError("the message is blank", fix="give some text to send")
    if len(message) > MAX_MESSAGE_CHARS:
        raise UsageError(
            f"the message is {len(message):,} characters, over the limit of {MAX_MESSAGE_CHARS:,}",
            fix="shorten it",
        )
    return message


def _no_progress(count: int) -> None:
    return None


def default_home() -> Path:
    """``FOLIKO_HOME``, else the platform's user data directory (no config file read)."""
    configured = os.environ.get("FOLIKO_HOME")
    if configured:
        return Path(configured).expanduser()
    from foliko_cli.common.settings import default_home as platform_home

    return platform_home()


def forked(
    source: SessionRecord, target_id: str, turns: int | None, upto: int | None = None
) -> SessionRecord:
    """A new session ``target_id`` holding ``source``'s history: all of it, its
    first ``turns`` turns, or its first ``upto`` messages. Its metadata records
    the fork (``fork_origin``)."""
    kept = len(source.messages)
    if turns is not None:
        kept = keep_turns(source.messages, turns, session_id=source.session_id)
    elif upto is not None:
        kept = min(max(0, upto), kept)
    now = now_ms()
    return SessionRecord(
        target_id,
        messages=[dict(m) for m in source.messages[:kept]],
        variables=dict(source.variables),
        metadata={
            **source.metadata,
            "created_at": now,
            "last_active": now,
            **fork_origin(source.session_id, source.messages, kept),
        },
        compression_state=cut_compression(source.compression_state, kept, source.messages[kept:]),
    )


class PruneReport:
    """What prune deleted, kept because it became active, found gone or could not read."""

    def __init__(self) -> None:
        self.deleted: list[str] = []
        self.active: list[str] = []
        self.gone: list[str] = []
        self.unreadable: list[str] = []

    def to_dict(self) -> dict[str, list[str]]:
        return {
            "deleted": self.deleted,
            "active": self.active,
            "gone": self.gone,
            "unreadable": self.unreadable,
        }


class Repair(NamedTuple):
    """A problem ``check`` found and, with a repair, what became of it: where it
    was moved (``moved_to``; None when left as it is) or why that failed."""

    problem: StoredProblem
    moved_to: str | None = None
    failure: str | None = None


class ImportReport:
    """Which sessions an import stored, found already there, skipped or refused."""

    def __init__(self) -> None:
        self.imported: list[str] = []
        self.unchanged: list[str] = []
        self.skipped: list[str] = []
        self.conflicts: list[str] = []

    def to_dict(self) -> dict[str, list[str]]:
        return {
            "imported": self.imported,
            "unchanged": self.unchanged,
            "skipped": self.skipped,
            "conflicts": self.conflicts,
        }


SORT_KEYS: dict[str, tuple[Callable[[SessionSummary], Any], bool]] = {
    "updated": (lambda s: (s.updated_at, s.session_id), True),
    "created": (lambda s: (s.created_at, s.session_id), True),
    "messages": (lambda s: (s.message_count, s.session_id), True),
    "name": (lambda s: s.session_id, False),
}
