"""An MCP tool call's progress, as one line on stderr that each update rewrites.

Only on a terminal: in a pipe or a log file a line rewritten with ``\\r``
would be noise. The line is cleared when the call ends.
"""

from __future__ import annotations

import sys
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from foliko_cli.service.library import Progress

CLEAR = "\r\x1b[K"


def _amount(value: float) -> str:
    return f"{value:g}"


def progress_text(update: Progress) -> str:
    """``files__index: 3/10 (30%) reading notes.md``."""
    if update.total:
        share = min(100, max(0, round(100 * update.progress / update.total)))
        done = f"{_amount(update.progress)}/{_amount(update.total)} ({share}%)"
    else:
        done = _amount(update.progress)
    message = f" {update.message}" if update.message else ""
    return f"{update.name}: {done}{message}"


class ProgressLine:
    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = stream
        self._shown = False

    def __call__(self, update: Progress) -> None:
        stream = self._stream or sys.stderr
        if stream is None or not stream.isatty():
            return
        if update.done:
            if self._shown:
                stream.write(CLEAR)
                stream.flush()
                self._shown = False
            return
        import shutil

        width = max(20, shutil.get_terminal_size().columns - 1)
        line = progress_text(update).replace("\n", " ")
        if len(line) > width:
            line = line[: width - 1] + "…"
        stream.write(CLEAR + line)
        stream.flush()
        self._shown = True
