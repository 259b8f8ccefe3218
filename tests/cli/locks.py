"""Holding a session's turn lock from a test, as another foliko process would."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from foliko_cli.storage.filelock import lock_name

HOLDER = b"pid 4242 on the-test"


@contextlib.contextmanager
def held(home: Path, session_id: str, holder: bytes = HOLDER) -> Iterator[Path]:
    """Hold ``session_id``'s lock in the default SQLite store under ``home`` (flock)."""
    path = home / "sessions.db.locks" / lock_name(session_id)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.pwrite(fd, holder, 0)
        yield path
    finally:
        os.close(fd)


def has_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open (it is waiting on that lock)."""
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            if os.readlink(fd) == str(path):
                return True
    return False
