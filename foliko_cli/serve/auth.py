"""API keys: a TOML file ``[keys] "KEY" = "user"``, private to its owner; a
``[users.NAME]`` table may give a user quotas (quotas.py).

A key may instead be a table that limits it: ``"KEY" = {user = "ann", name =
"ci", scope = "read", sessions = ["proj-*"]}``. ``scope`` is ``write`` (the
default: every route) or ``read`` (a change is 403); ``sessions`` the id
patterns (globs, ``since:DATE``) of the only sessions it sees (default: all
of its user's); ``name`` what the audit log calls it (default: the user and
the start of the key's SHA-256, ``ann/3fa1c2d0``). A key written as a plain
user name keeps full access.

Keys are compared in constant time (every key is compared, whatever
matches), and never logged, stored or put in an error message. Spaces
around a key or a user name are not part of it: ``" k " = " ann "`` is
the key ``k`` of ``ann``.
"""

from __future__ import annotations

import hashlib
import hmac
import stat
import tomllib
from pathlib import Path
from typing import Any, NamedTuple

from foliko_cli.errors import UsageError
from foliko_cli.messages.ids import check_user_name
from foliko_cli.serve.quotas import Limits, limits_from
from foliko_cli.service.audit import Scope

KEY_FIELDS = ("user", "name", "scope", "sessions")


class Grant(NamedTuple):
    """What a key gives: its user, its name in the audit log, its scope (None: all)."""

    user: str
    name: str
    scope: Scope | None = None


class KeyRing:
    def __init__(self, keys: dict[str, str | Grant], limits: dict[str, Limits] | None = None):
        self._keys = [
            (key.encode(), grant if isinstance(grant, Grant) else Grant(grant, _name(key, grant)))
            for key, grant in keys.items()
        ]
        self.limits = limits or {}

    def __len__(self) -> int:
        return len(self._keys)

    def grant_for(self, authorization: str | None) -> Grant | None:
        """What the key ``Authorization: Bearer KEY`` carries gives, else None."""
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        given = token.strip().encode()
        found = None
        for key, grant in self._keys:
            if hmac.compare_digest(given, key):
                found = grant
        return found

    def user_for(self, authorization: str | None) -> str | None:
        """The user whose key ``Authorization: Bearer KEY`` carries, else None."""
        grant = self.grant_for(authorization)
        return None if grant is None else grant.user


def _name(key: str, user: str) -> str:
    return f"{user}/{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def load_keys(path: Path) -> KeyRing:
    """Read the key file; refuse one that group or others may read or write."""
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise UsageError(
                f"the API key file {str(path)!r} is readable or writable by group or others",
                fix=f"make it private: chmod 600 {path}",
            )
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(
            f"cannot read the API key file {str(path)!r}: {exc.strerror}", fix="check the path"
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(
            f"the API key file {str(path)!r} is not valid TOML: {exc}",
            fix='write it as [keys] "KEY" = "user"',
        ) from None
    keys = data.get("keys")
    if not isinstance(keys, dict) or not keys:
        raise UsageError(
            f"the API key file {str(path)!r} has no [keys] table",
            fix='write it as [keys] "KEY" = "user"',
        )
    stripped: dict[str, str] = {}
    grants: dict[str, Grant] = {}
    for number, (key, given) in enumerate(keys.items(), 1):
        table = given if isinstance(given, dict) else None
        user = table.get("user") if table is not None else given
        if not isinstance(user, str) or not key.strip() or not user.strip():
            raise UsageError(
                f"the API key file {str(path)!r}: entry {number} of [keys] "
                f'(user {_shown_user(user)}) is not "KEY" = "user" with both non-empty',
                fix='give each key a user name as a string (or {user = "NAME", ...})',
            )
        key, user = key.strip(), user.strip()
        if key in stripped and stripped[key] != user:
            raise UsageError(
                f"the API key file {str(path)!r}: entries for users {stripped[key]!r} "
                f"and {user!r} have the same key",
                fix="give each user a key of their own",
            )
        check_user_name(user)
        stripped[key] = user
        grants[key] = _grant(key, user, table, f"the API key file {str(path)!r}: entry {number}")
    return KeyRing(dict(grants), limits_from(data.get("users"), stripped.values(), str(path)))


def _grant(key: str, user: str, table: dict[str, Any] | None, where: str) -> Grant:
    """A key's grant from its table (none: everything its user has)."""
    if table is None:
        return Grant(user, _name(key, user))
    unknown = sorted(set(table) - set(KEY_FIELDS))
    if unknown:
        raise UsageError(
            f"{where} of [keys] has an unknown setting {unknown[0]!r}",
            fix="use " + ", ".join(KEY_FIELDS),
        )
    name = table.get("name", _name(key, user))
    if not isinstance(name, str) or not name.strip():
        raise UsageError(f"{where} of [keys]: name must be a non-empty string", fix='name = "ci"')
    scope = table.get("scope", "write")
    if scope not in ("read", "write"):
        raise UsageError(
            f"{where} of [keys]: scope = {scope!r} is neither 'read' nor 'write'",
            fix='write scope = "read" (or "write", the default)',
        )
    sessions = table.get("sessions", [])
    if isinstance(sessions, str) or not isinstance(sessions, list):
        raise UsageError(
            f"{where} of [keys]: sessions must be a list of patterns",
            fix='write sessions = ["proj-*"]',
        )
    try:
        limited = Scope.of(scope == "write", sessions)
    except UsageError as exc:
        raise UsageError(f"{where} of [keys]: {exc.problem}", fix=exc.fix) from None
    return Grant(user, name.strip(), None if limited.full else limited)


def _shown_user(user: object) -> str:
    """The user of an entry for an error message (a key is never shown)."""
    return repr(user.strip()) if isinstance(user, str) else f"not a string: {type(user).__name__}"
