"""Session ids: what a valid one is, and which ones foliko keeps for itself."""

from __future__ import annotations

import unicodedata
from typing import Any

from foliko_cli.errors import InvalidSessionIdError, UsageError

MAX_SESSION_ID_LENGTH = 256


def check_session_id(session_id: Any) -> str:
    """Reject ids that are empty, too long or contain control characters (R5)."""
    if not isinstance(session_id, str) or not session_id:
        raise InvalidSessionIdError("invalid session id: it is empty; pass a name like 'work'")
    if len(session_id) > MAX_SESSION_ID_LENGTH:
        raise InvalidSessionIdError(
            f"invalid session id: longer than {MAX_SESSION_ID_LENGTH} characters; "
            "use a shorter name"
        )
    for char in "" if session_id.isprintable() else session_id:  # none of these is printable
        if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            raise InvalidSessionIdError(
                f"invalid session id {session_id!r}: it contains the control character "
                f"U+{ord(char):04X}; use printable characters only"
            )
    if session_id != session_id.strip():
        raise InvalidSessionIdError(
            f"invalid session id {session_id!r}: leading or trailing whitespace; remove it"
        )
    return session_id


INTERNAL_PREFIX = ".foliko/"


def is_internal(session_id: str) -> bool:
    """Whether a session is one foliko keeps for itself (``.foliko/...``, also
    under a user's scope ``~alice~/.foliko/...``): the trash, quotas, background
    journals. Never listed, searched, counted in usage or pruned; migrated."""
    if session_id.startswith("~"):
        session_id = session_id.partition("~/")[2]
    return session_id.startswith(INTERNAL_PREFIX)


def check_user_name(user: Any) -> str:
    """A user's name as ``foliko serve`` keys and ``--user`` give it: printable,
    not blank, no surrounding space, no ``~`` or ``/`` (it prefixes their ids)."""
    if not isinstance(user, str) or not user or "~" in user or "/" in user:
        raise UsageError(f"invalid user name {user!r}", fix="use a name without '~' or '/'")
    if not user.isprintable() or user != user.strip():
        raise UsageError(f"invalid user name {user!r}", fix="use printable characters only")
    return user
