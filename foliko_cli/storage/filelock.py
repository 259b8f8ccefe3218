"""Cross-process session locks on lock files (``flock``).

The kernel drops an ``flock`` when its holder exits, ``kill -9`` included,
so a dead holder never blocks a session. The holder writes who it is into
the file so that a waiter that gives up can name it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

from foliko_cli.errors import SessionBusyError, StorageError
from foliko_cli.storage.names import file_stem
from foliko_cli.storage.paths import make_private_dirs

_FIRST_DELAY = 0.001
_MAX_DELAY = 0.05


def lock_name(session_id: str) -> str:
    return file_stem(session_id) + ".lock"


class SessionFileLocks:
    def __init__(self, directory: Path):
        self.directory = directory

    def _open(self, session_id: str) -> int:
        try:
            make_private_dirs(self.directory)
            return os.open(self.directory / lock_name(session_id), os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StorageError(
                f"cannot create the lock file in {self.directory}: {exc.strerror}; "
                "check that the directory is writable"
            ) from None

    @contextlib.asynccontextmanager
    async def hold(self, session_id: str, timeout: float) -> AsyncIterator[None]:
        fd = self._open(session_id)
        try:
            await self._acquire(fd, session_id, timeout)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
            try:
                yield
            finally:
                os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    @staticmethod
    async def _acquire(fd: int, session_id: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        delay = _FIRST_DELAY
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                import asyncio

                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or None
                    raise SessionBusyError(session_id, timeout, holder) from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, _MAX_DELAY)
