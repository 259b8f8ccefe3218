"""API keys: a TOML file ``[keys] "KEY" = "user"``, private to its owner; a
``[users.NAME]`` table may give a user quotas (quotas.py).

Keys are compared in constant time (every key is compared, whatever
matches), and never logged, stored or put in an error message.
"""

from __future__ import annotations

import hmac
import stat
import tomllib
from pathlib import Path

from foliko_cli.errors import UsageError
from foliko_cli.serve.quotas import Limits, limits_from
from foliko_cli.storage.scoped import user_prefix


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
    for key, user in keys.items():
        if not isinstance(user, str) or not key.strip():
            raise UsageError(
                f'the API key file {str(path)!r} has an entry that is not "KEY" = "user"',
                fix="give each key a user name as a string",
            )
        user_prefix(user)
    return KeyRing(keys, limits_from(data.get("users"), keys.values(), str(path)))
