"""``sessions import``: reading the source in its format, and the summary's words."""

from __future__ import annotations

import sys

from foliko_cli.service.library import LEFT_OUT_BRANCH, LEFT_OUT_FORK, Imported
from foliko_cli.service.library import read_import as read


def read_source(source: str, fmt: str | None, main_only: bool, branches: str) -> Imported:
    stdin = sys.stdin.buffer.read() if source == "-" else None
    return read(source, fmt, main_only=main_only, branches=branches, stdin=stdin)


def left_out(imported: Imported) -> str:
    """What the summary adds: what was left out on purpose, when anything was."""
    if not imported.left_out:
        return ""
    why = {LEFT_OUT_BRANCH: " (--branches all imports them)", LEFT_OUT_FORK: " (--main-only)"}
    counts = ", ".join(
        f"{count} {what}" + ("" if imported.main_only else why.get(what, ""))
        for what, count in sorted(imported.left_out.items())
    )
    return f"; left out {counts}"
