"""Sessions from other tools' histories: one module per format, each following
the small contract of base.py; reading.py reads a file, a directory or stdin.

Importing this package is cheap (the CLI names the formats at start-up); the
rest loads when it is used.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FORMATS", "Imported", "read"]

FORMATS = ("foliko", "chatgpt", "claude", "claude-code", "codex", "llm", "openwebui", "librechat")


def __getattr__(name: str) -> Any:
    if name == "Imported":
        from foliko_cli.importers.base import Imported

        return Imported
    if name == "read":
        from foliko_cli.importers.reading import read

        return read
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
