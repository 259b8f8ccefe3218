"""Files and streams written to their end: every byte written, or an OSError.

Python's buffered writer takes a short write (a disk that filled up during the
write) as done and drops the rest without a word, so a large export onto a
full disk would end half written with exit 0. ``WholeWrites`` is the raw
layer that goes on writing after a short write until everything is out or
the system refuses (ENOSPC), and ``writer`` builds the usual text or binary
stream over it. ``replaced`` writes a file whole or not at all.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast


class WholeWrites(io.FileIO):
    """A descriptor whose ``write`` writes all it is given, or raises."""

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            written = super().write(view[done:])
            if written is None:  # a non-blocking descriptor that is full for now
                import select

                select.select([], [self.fileno()], [])
                continue
            if written == 0:
                raise OSError(0, "the write made no progress")
            done += written
        return done


def writer(
    fd: int,
    *,
    text: bool = True,
    closefd: bool = True,
    buffered: bool = True,
    encoding: str = "utf-8",
    errors: str = "strict",
    line_buffering: bool = False,
) -> IO[Any]:
    """A stream over ``fd`` whose writes are whole (text unless ``text`` is
    False; written at once, as ``python -u`` writes, unless ``buffered``)."""
    raw = WholeWrites(fd, "w", closefd=closefd)
    binary: Any = io.BufferedWriter(raw) if buffered else raw
    if not text:
        return cast("IO[Any]", binary)
    return io.TextIOWrapper(
        binary,
        encoding=encoding,
        errors=errors,
        line_buffering=line_buffering,
        write_through=not buffered,
    )


@contextlib.contextmanager
def replaced(path: Path, *, text: bool = True, mode: int = 0o600) -> Iterator[IO[Any]]:
    """A stream whose content replaces ``path`` when the block ends without an error.

    It is written to a temporary file beside ``path`` (created with ``mode``),
    every write checked, flushed to the disk and renamed over ``path``; on any
    error the temporary file goes and ``path`` is as it was.
    """
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        stream = writer(descriptor, text=text)
        try:
            yield stream
            stream.flush()
            os.fsync(descriptor)
        finally:
            stream.close()
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


def checksum_name(data: bytes) -> str:
    """A stable 16-hex-digit name for ``data``, e.g. for a cache entry that holds
    what it was made from (so a collision is a miss, never a wrong answer).
    CRC-32 both ways, not a cryptographic hash: hashlib and zlib cost start-up
    time (P1), binascii a fifth of zlib."""
    import binascii

    return f"{binascii.crc32(data):08x}{binascii.crc32(data[::-1]):08x}"
