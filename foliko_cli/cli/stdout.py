"""Standard output that cannot be written: one rule for every command.

A closed pipe (EPIPE, ``| head -1``) is the reader saying it has enough:
exit 0, quietly. Any other failure (a full disk, a closed descriptor, an I/O
error) is an output that could not be written: one line on stderr, exit 3.

``guard_stdout`` wraps ``sys.stdout`` so that a failed write is told apart
from every other OSError (a file foliko reads, a socket): it raises
``StdoutWriteError``.
"""

from __future__ import annotations

import errno
import io
import os
import sys
from typing import Any

from foliko_cli.errors import OutputError


class ClosedPipe(Exception):
    """The reader of standard output went away; the command ends with exit 0."""


class StdoutWriteError(OSError):
    """A write to (or flush of) standard output failed."""


class _Guarded:
    """A stream whose write and flush errors become StdoutWriteError."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self._stream, name)(*args)
        except StdoutWriteError:
            raise
        except OSError as exc:
            raise StdoutWriteError(exc.errno, exc.strerror or str(exc)) from None

    def write(self, data: Any) -> Any:
        return self._call("write", data)

    def writelines(self, lines: Any) -> Any:
        return self._call("writelines", lines)

    def flush(self) -> Any:
        return self._call("flush")


class GuardedStdout(_Guarded):
    @property
    def buffer(self) -> Any:
        return _Guarded(self._stream.buffer)


class _Closed:
    """Stands in for a closed descriptor 1: every write fails with EBADF."""

    encoding = "utf-8"
    errors = "strict"

    def write(self, data: Any) -> int:
        if not data:
            return 0
        raise OSError(errno.EBADF, "standard output is closed")

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    @property
    def buffer(self) -> Any:
        return self


def guard_stdout() -> None:
    """Wrap stdout; when descriptor 1 is closed (``>&-``), make writes fail, not vanish.

    /dev/null then takes descriptor 1, so that no file foliko opens lands there.
    """
    if sys.stdout is None:
        try:
            os.fstat(1)
        except OSError:
            fd = os.open(os.devnull, os.O_WRONLY)
            if fd != 1:
                os.dup2(fd, 1)
                os.close(fd)
        sys.stdout = GuardedStdout(_Closed())
    elif not isinstance(sys.stdout, _Guarded):
        sys.stdout = GuardedStdout(_whole_writes(sys.stdout))


def _whole_writes(stream: Any) -> Any:
    """``stream`` rebuilt over a raw layer that writes everything or raises: the
    one Python gives takes a short write (a disk that filled up) as done."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return stream
    from foliko_cli.common.files import writer

    stream.flush()
    return writer(
        fd,
        closefd=False,
        buffered=isinstance(getattr(stream, "buffer", None), io.BufferedWriter),
        encoding=stream.encoding,
        errors=stream.errors,
        line_buffering=stream.line_buffering,
    )


def stdout_failed(exc: BaseException) -> bool:
    return isinstance(exc, StdoutWriteError | ClosedPipe | OutputError)


def _silence_stdout() -> None:
    """Send what is left to /dev/null so the exit-time flush cannot fail again."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        os.close(fd)
    except OSError:
        pass
    sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115


def output_failure(exc: BaseException, *, after: str | None = None) -> BaseException:
    """What a failed stdout write becomes: ClosedPipe, or an OutputError to report.

    ``after`` says what was done before the write failed (e.g. that a turn was saved).
    """
    if isinstance(exc, ClosedPipe | OutputError):
        return exc
    _silence_stdout()
    if getattr(exc, "errno", None) == errno.EPIPE:
        return ClosedPipe()
    reason = getattr(exc, "strerror", None) or str(exc)
    message = f"cannot write to standard output ({reason})"
    return OutputError(f"{after}: {message}" if after else message)


def flush_stdout() -> None:
    """Flush now, so that a late write error is reported, not lost at exit."""
    if sys.stdout is not None:
        sys.stdout.flush()


_BAD_PATH = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EACCES, errno.EPERM})


def file_failure(path: Any, exc: OSError) -> Exception:
    """A file a command was asked to write (``-o FILE``) that could not be written
    whole: a path that cannot be one is a usage error (exit 2), a full disk or
    any other failure to write an OutputError (exit 3). Nothing was replaced."""
    from foliko_cli.errors import UsageError

    reason = exc.strerror or str(exc)
    if exc.errno in _BAD_PATH:
        return UsageError(f"cannot write {path} ({reason})", fix="choose another -o path")
    return OutputError(
        f"cannot write {path} ({reason}); nothing was written there",
        fix="free some space or choose another -o path",
    )
