"""Config files parsed once per content, not on every command.

Parsing TOML is the largest single cost a config file adds to a command's
start-up (``tomllib`` is pure Python: its import and parse cost about as much
as the rest of a turn's own work, P1). Each file's parse is kept in the user's
cache directory, one entry per file path, in ``marshal`` format (a C loader
that imports nothing), together with the exact bytes it was parsed from: an
entry is used only when those bytes equal the file's bytes now, so an edit,
however small, is parsed afresh. A value ``marshal`` cannot hold (TOML's dates
and times) leaves the file uncached; an entry that cannot be read or written
is a miss, never an error. Errors in the file are reported as without a cache:
only valid files are cached.
"""

from __future__ import annotations

import contextlib
import marshal
import os
from pathlib import Path
from typing import Any

from foliko_cli.common.files import checksum_name, replaced
from foliko_cli.errors import UsageError

FORMAT = 1


def load_toml(path: Path, data: bytes, cache: Path) -> dict[str, Any]:
    """The TOML table in ``data``, the bytes of the config file ``path``; ``cache``
    is foliko's cache directory."""
    entry = _entry_path(path, cache)
    cached = _read(entry, data)
    if cached is not None:
        return cached
    import tomllib

    try:
        table = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"config file {path} is not valid TOML ({exc}); fix the file") from None
    _write(entry, data, table)
    return table


def _entry_path(path: Path, cache: Path) -> Path:
    name = os.path.abspath(path).encode("utf-8", "surrogateescape")
    return cache / "toml" / f"{checksum_name(name)}.marshal"


def _read(entry: Path, data: bytes) -> dict[str, Any] | None:
    try:
        form, source, table = marshal.loads(entry.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if form != FORMAT or source != data or not isinstance(table, dict):
        return None
    return table


def _write(entry: Path, data: bytes, table: dict[str, Any]) -> None:
    try:
        blob = marshal.dumps((FORMAT, data, table))
    except ValueError:  # a date or time: not cached
        return
    with contextlib.suppress(OSError):
        entry.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with replaced(entry, text=False) as file:
            file.write(blob)
