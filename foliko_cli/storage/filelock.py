"""Cross-process session locks on lock files (``flock``).

The kernel drops an ``flock`` when its holder exits, ``kill -9`` included,
so a dead holder never blocks a session. The holder writes who it is into
the file (in place, padded: a lock file is never truncated) so that a waiter
that gives up can name it.

A lock file is opened with ``O_NOFOLLOW`` and must be a plain file with one
link: a symbolic or hard link planted in the lock directory is refused, so
writing the holder's name never touches another file.

Lock files are removed when their session is gone, without ever breaking
exclusion: the remover holds the lock while it unlinks the file, and every
locker, once it holds the lock, checks that the path still names the inode
it locked; if not (removed, or replaced), it lets go and locks the new file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import stat
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from foliko_cli.common.clock import now_ms
from foliko_cli.common.poll import poll
from foliko_cli.errors import SessionBusyError, StorageError
from foliko_cli.storage.names import file_stem, session_id_from_stem
from foliko_cli.storage.paths import make_private_dirs

LOCK_SUFFIX = ".lock"
INTERRUPT_SUFFIX = ".interrupt"
HOLDER_BYTES = 200
_FIRST_DELAY = 0.001
_MAX_DELAY = 0.05


@functools.cache
def _holder_of(pid: int) -> str:
    return f"pid {pid} on {os.uname().nodename}"


def _holder() -> str:
    """Who this process is, as a lock file names its holder."""
    return _holder_of(os.getpid())


def lock_name(session_id: str) -> str:
    return file_stem(session_id) + LOCK_SUFFIX


def os_error(action: str, path: Path | str, exc: OSError) -> StorageError:
    """One line for a failed file operation (ENOSPC, EROFS, EACCES, …): exit 3."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageError(
            f"cannot {action} {path}: the disk is full ({exc.strerror}); "
            "free space or choose another storage location"
        )
    return StorageError(
        f"cannot {action} {path}: {exc.strerror or exc}; "
        "free space, fix the permissions, or choose another storage location"
    )


class SessionFileLocks:
    def __init__(self, directory: Path):
        self.directory = directory

    def path(self, key: str) -> Path:
        return self.directory / lock_name(key)

    def _open(self, path: Path, *, create: bool = True) -> int | None:
        """A descriptor of the lock file at ``path``; None when absent and not ``create``."""
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        try:
            try:
                fd = os.open(path, flags, 0o600)
            except FileNotFoundError:
                if not create:
                    raise
                make_private_dirs(self.directory)  # the first lock here, or it was removed
                fd = os.open(path, flags, 0o600)
        except OSError as exc:
            if exc.errno == errno.ENOENT and not create:
                return None
            if exc.errno == errno.ELOOP:
                raise StorageError(
                    f"refusing the lock file {path}: it is a symbolic link; remove it "
                    "(a lock file must be a plain file)"
                ) from None
            raise os_error("create the lock file", path, exc) from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:  # 0: just removed, retried
            os.close(fd)
            raise StorageError(
                f"refusing the lock file {path}: it is not a plain file with one link; remove it"
            )
        return fd

    @staticmethod
    def _still_named(fd: int, path: Path) -> bool:
        """True while ``path`` names the inode ``fd`` is open on."""
        try:
            named = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            return False
        held = os.fstat(fd)
        return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)

    @contextlib.asynccontextmanager
    async def hold(
        self, key: str, timeout: float, *, remove_if: Callable[[], bool] | None = None
    ) -> AsyncIterator[None]:
        """Hold the lock of ``key``; raise SessionBusyError after ``timeout`` s.

        On release, when ``remove_if()`` is true (the session is gone), the
        lock file is removed while still held.
        """
        path = self.path(key)
        deadline = time.monotonic() + timeout
        while True:
            fd = self._open(path)
            assert fd is not None
            try:
                await self._acquire(fd, key, timeout, deadline)
            except BaseException:
                os.close(fd)
                raise
            if self._still_named(fd, path):
                break
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        try:
            self._write(fd, _holder())
            try:
                yield
            finally:
                removed = False
                with contextlib.suppress(Exception):
                    if remove_if is not None and remove_if():
                        os.unlink(path)
                        removed = True
                if not removed:
                    self._write(fd, "")
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    @staticmethod
    def _write(fd: int, text: str) -> None:
        """Who holds the lock, padded to a fixed size; best effort (a full disk skips it)."""
        data = text.encode()[:HOLDER_BYTES].ljust(HOLDER_BYTES)
        with contextlib.suppress(OSError):
            os.pwrite(fd, data, 0)

    @staticmethod
    async def _acquire(fd: int, key: str, timeout: float, deadline: float) -> None:
        def locked() -> bool:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        if not locked() and not await poll(
            locked, deadline, first_delay=_FIRST_DELAY, max_delay=_MAX_DELAY
        ):
            holder = os.pread(fd, HOLDER_BYTES, 0).decode(errors="replace").strip()
            raise SessionBusyError(key, timeout, holder or None)

    def set_interrupt(self, key: str, until_ms: int) -> None:
        """A request that the holder of ``key`` stop (storage/base.py rule 10): a
        file beside its lock file holding ``until_ms``; 0 removes it."""
        path = self.directory / (file_stem(key) + INTERRUPT_SUFFIX)
        try:
            if not until_ms:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                return
            make_private_dirs(self.directory)
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(path, flags, 0o600)
            try:
                os.write(fd, str(until_ms).encode())
            finally:
                os.close(fd)
        except OSError as exc:
            raise os_error("write the interrupt request", path, exc) from None

    def interrupt_requested(self, key: str) -> bool:
        path = self.directory / (file_stem(key) + INTERRUPT_SUFFIX)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            text = os.read(fd, 32)
        finally:
            os.close(fd)
        return text.isdigit() and int(text) > now_ms()

    def remove_if_free(self, key: str, gone: Callable[[], bool]) -> bool:
        """Remove the lock file of ``key`` if no one holds it and ``gone()``; never waits."""
        return self._remove_free(self.path(key), gone)

    def _remove_free(self, path: Path, gone: Callable[[], bool]) -> bool:
        try:
            fd = self._open(path, create=False)
        except StorageError:
            return False
        if fd is None:
            return False
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            try:
                if not self._still_named(fd, path) or not gone():
                    return False
                os.unlink(path)
                return True
            except OSError as exc:
                raise os_error("remove the lock file", path, exc) from None
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def stray(self, live: Callable[[str | None], bool]) -> list[tuple[Path, str]]:
        """Lock files no one needs, with why: ``live(key)`` is false for their key
        (None when the name is hashed) and no one holds them; and anything in the
        lock directory that is not a plain lock file."""
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise os_error("list", self.directory, exc) from None
        found = []
        for name in names:
            path = self.directory / name
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(info.st_mode):
                found.append((path, "a symbolic link where a lock file belongs"))
                continue
            if not name.endswith(LOCK_SUFFIX) or not stat.S_ISREG(info.st_mode):
                continue
            key = session_id_from_stem(name[: -len(LOCK_SUFFIX)])
            if live(key):
                continue
            if self._free(path):
                found.append((path, "an orphan lock file: its session does not exist"))
        return found

    def _free(self, path: Path) -> bool:
        try:
            fd = self._open(path, create=False)
        except StorageError:
            return False
        if fd is None:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return True
        finally:
            os.close(fd)

    def remove_stray(self, path: Path, live: Callable[[str | None], bool]) -> bool:
        """Remove one of ``stray``'s files if it is still stray; never waits."""
        if path.parent != self.directory:
            return False
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                os.unlink(path)
                return True
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise os_error("remove", path, exc) from None
        key = session_id_from_stem(path.name.removesuffix(LOCK_SUFFIX))
        return self._remove_free(path, lambda: not live(key))
