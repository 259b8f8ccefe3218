"""How to install an optional extra (postgres, redis, mcp, serve) where foliko is.

foliko's distribution, ``foliko-cli``, is not on a package index, so
``pip install 'foliko-cli[serve]'`` works nowhere, and ``pip install
'.[serve]'`` in a checkout replaces an editable install by a copy. What works
wherever foliko runs — a checkout's venv (editable), a wheel installed
anywhere — is to install the extra's own packages with the interpreter that
runs foliko: foliko's own install is left as it is. The packages are read
from foliko's installed metadata, so the command follows ``pyproject.toml``.
"""

from __future__ import annotations

DISTRIBUTION = "foliko-cli"
PIP_INSTALL = "-m pip install"
"""pip's own command line (not foliko's flags), after the interpreter."""


def extra_requirements(extra: str) -> list[str]:
    """The requirements ``extra`` adds, each with any marker it has besides the
    extra's (``uvloop>=0.19; sys_platform != "win32"``); [] when foliko's
    metadata cannot be read (run from a source tree that is not installed)."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        found = requires(DISTRIBUTION) or []
    except PackageNotFoundError:
        return []
    marker = f'extra == "{extra}"'
    wanted = []
    for line in found:
        requirement, _, markers = line.partition(";")
        parts = [part.strip() for part in markers.split(" and ")]
        if marker not in parts:
            continue
        rest = " and ".join(part for part in parts if part != marker)
        wanted.append(requirement.strip() + (f"; {rest}" if rest else ""))
    return wanted


def install_command(extra: str) -> str | None:
    """The command that installs ``extra``'s packages for the interpreter running
    foliko, e.g. ``/home/me/foliko/.venv/bin/python -m pip install 'redis>=5'``;
    None when foliko's metadata does not say what they are."""
    import shlex
    import sys

    requirements = extra_requirements(extra)
    if not requirements:
        return None
    packages = " ".join(shlex.quote(requirement) for requirement in requirements)
    return f"{shlex.quote(sys.executable)} {PIP_INSTALL} {packages}"


def extra_hint(what: str, extra: str) -> str:
    """One line: ``what`` needs the extra, and the command that installs it."""
    command = install_command(extra)
    if command is None:
        return f"{what} needs the {extra!r} extra; install foliko with it"
    return f"{what} needs the {extra!r} extra; install it with: {command}"
