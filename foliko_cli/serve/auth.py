"""API keys: a TOML file ``[keys] "KEY" = "user"``, private to its owner; a
``[users.NAME]`` table may give a user quotas (quotas.py).

Keys are compared in constant time (every key is compared, whatever
matches), and never logged, stored or put in an error message. Spaces
around a key or a user name are not part of it: ``" k " = " ann "`` is
the key ``k`` of ``ann``.
"""

from __future__ import annotations

import hmac
import stat
import tomllib
from pathlib import Path

from foliko_cli.errors import UsageError
from foliko_cli.messages.ids import check_user_name
from foliko_cli.serve.quotas import Limits, limits_from


class KeyRing:
    def __init__(self, keys: dict[str, str], limits: dict[str, Limits] | None = None):
        self._keys = [(key.encode(), user) for key, user in keys.items()]
        self.limits = limits or {}

    def __len__(self) -> int:
        return len(self._keys)

    def user_for(self, authorization: str | None) -> str | None:
        """The user whose key ``Authorization: Bearer KEY`` carries, else None."""
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        given = token.strip().encode()
        found = None
        for key, user in self._keys:
            if hmac.compare_digest(given, key):
                found = user
        return found


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
    for number, (key, user) in enumerate(keys.items(), 1):
        if not isinstance(user, str) or not key.strip() or not user.strip():
            raise UsageError(
                f"the API key file {str(path)!r}: entry {number} of [keys] "
                f'(user {_shown_user(user)}) is not "KEY" = "user" with both non-empty',
                fix="give each key a user name as a string",
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
    return KeyRing(stripped, limits_from(data.get("users"), stripped.values(), str(path)))


def _shown_user(user: object) -> str:
    """The user of an entry for an error message (a key is never shown)."""
    return repr(user.strip()) if isinstance(user, str) else f"not a string: {type(user).__name__}"
