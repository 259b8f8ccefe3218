"""Files the user trusts, by their content: direnv's ``allow``, mise's ``trust``.

A ``foliko.toml`` found in the working directory or above it, and a template
file named by its path, may have come with someone else's repository. What
in them runs code or sends credentials takes effect only once the user has
trusted that exact content (``foliko config trust PATH``); a file changed
since needs trusting again. The store is ``trusted.json`` in the user's
foliko home (owner-only): each file's absolute path and the SHA-256 of the
content trusted.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

TRUST_FILE = "trusted.json"


def digest(data: bytes) -> str:
    import hashlib  # OpenSSL's: loaded only when a file is hashed

    return hashlib.sha256(data).hexdigest()


def key(path: Path) -> str:
    """The store's name for a file: its absolute path, links resolved."""
    return str(path.expanduser().resolve())


class Trusted(NamedTuple):
    """One entry of ``foliko config trusted``: ``state`` is ``trusted``, ``changed``
    (the file is no longer the content trusted) or ``missing``."""

    path: str
    sha256: str
    state: str


class TrustStore:
    """``trusted.json`` in ``home``; reads never fail (a store that cannot be
    read trusts nothing), writes raise OSError."""

    def __init__(self, home: Path):
        self.path = home / TRUST_FILE

    def _read(self) -> dict[str, str]:
        import orjson

        try:
            data = orjson.loads(self.path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return {}
        files = data.get("files") if isinstance(data, dict) else None
        if not isinstance(files, dict):
            return {}
        return {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str)}

    def state(self, path: Path, data: bytes) -> str:
        """``trusted`` (the user trusted ``path`` holding exactly ``data``),
        ``changed`` (other content of it) or ``unknown``; a file never trusted
        is not hashed."""
        sha = self._read().get(key(path))
        if sha is None:
            return "unknown"
        return "trusted" if sha == digest(data) else "changed"

    def entries(self) -> list[Trusted]:
        rows = []
        for name, sha in sorted(self._read().items()):
            try:
                state = "trusted" if digest(Path(name).read_bytes()) == sha else "changed"
            except OSError:
                state = "missing"
            rows.append(Trusted(name, sha, state))
        return rows

    def trust(self, path: Path, data: bytes) -> str:
        """Record ``data`` as the trusted content of ``path``; its digest."""
        sha = digest(data)
        with self._changing() as files:
            files[key(path)] = sha
        return sha

    def untrust(self, path: Path) -> bool:
        """Forget ``path``; False when it was not trusted."""
        with self._changing() as files:
            return files.pop(key(path), None) is not None

    @contextlib.contextmanager
    def _changing(self) -> Iterator[dict[str, str]]:
        """The entries, written back (whole, owner-only) when the block ends; one
        process at a time."""
        import fcntl

        import orjson

        from foliko_cli.common.files import replaced

        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = os.open(self.path.with_name(f".{TRUST_FILE}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            files = self._read()
            yield files
            with replaced(self.path, text=False) as out:
                out.write(orjson.dumps({"files": files}, option=orjson.OPT_INDENT_2))
        finally:
            os.close(lock)
