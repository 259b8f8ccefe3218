"""npm packages the tests drive, installed once per machine under ~/.cache/foliko-tests.

An install is redone when what it was made from changed: the package names, or a
project's package.json and package-lock.json (installed with ``npm ci``, so the
lock file decides every version). Test workers share the cache and wait for each
other's install. Without npm, or when the install fails, the test skips, except
under FOLIKO_REQUIRE_SERVICES=1, where that is a failure.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from storage.services import require_or_skip

NPM_CACHE = Path.home() / ".cache" / "foliko-tests"
INSTALL_TIMEOUT_S = 600
PROJECT_FILES = ("package.json", "package-lock.json")
_STAMP = ".installed-from"


def npm_install(
    prefix: Path, what: str, *, packages: Sequence[str] = (), project: Path | None = None
) -> Path:
    """``prefix``/node_modules holding ``packages``, or ``project``'s locked dependencies."""
    stamp = _stamp(packages, project)
    if _installed_from(prefix) == stamp:
        return prefix / "node_modules"
    npm = shutil.which("npm")
    require_or_skip(what, npm is not None, "npm is not installed")
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _installed_from(prefix) != stamp:
            (prefix / _STAMP).unlink(missing_ok=True)
            _install(npm, prefix, what, packages, project)
            (prefix / _STAMP).write_text(stamp)
    return prefix / "node_modules"


def _stamp(packages: Sequence[str], project: Path | None) -> str:
    digest = hashlib.sha256("\0".join(packages).encode())
    for name in PROJECT_FILES if project else ():
        digest.update((project / name).read_bytes())
    return digest.hexdigest()


def _installed_from(prefix: Path) -> str | None:
    try:
        return (prefix / _STAMP).read_text()
    except OSError:
        return None


def _install(
    npm: str, prefix: Path, what: str, packages: Sequence[str], project: Path | None
) -> None:
    quiet = ["--no-audit", "--no-fund"]
    if project is None:
        command = [npm, "install", "--prefix", str(prefix), *quiet, *packages]
        subject = " ".join(packages)
    else:
        for name in PROJECT_FILES:
            shutil.copyfile(project / name, prefix / name)
        command = [npm, "ci", *quiet]
        subject = f"the packages of {project / 'package-lock.json'}"
    done = subprocess.run(
        command, cwd=prefix, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S
    )
    last = (done.stderr.strip().splitlines() or [""])[-1]
    require_or_skip(what, done.returncode == 0, f"npm install of {subject} failed: {last}")
