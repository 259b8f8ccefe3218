"""Owner-only directories for stored sessions (R6)."""

from __future__ import annotations

from pathlib import Path


def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and any missing parents with mode 0700."""
    missing = []
    current = directory
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for path in reversed(missing):
        path.mkdir(mode=0o700, exist_ok=True)
