"""Small filesystems for the tests of full and read-only disks."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_filesystem(path: Path, size: str = "256k") -> Iterator[Path]:
    """A tmpfs of ``size`` at ``path``. Mounting one needs root: without it the
    test is skipped, saying why, except under FOLIKO_REQUIRE_SERVICES=1 (CI),
    where that fails."""
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if mounted.returncode != 0:
        reason = f"cannot mount a small tmpfs here: {mounted.stderr.strip() or 'not root'}"
        if os.environ.get("FOLIKO_REQUIRE_SERVICES") == "1":
            pytest.fail(f"FOLIKO_REQUIRE_SERVICES=1 but {reason}")
        pytest.skip(reason)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)
