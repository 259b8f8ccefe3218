"""Reading a file, a directory or stdin in a format named, or told from the data."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from foliko_cli.errors import Hint, UsageError
from foliko_cli.formats.importers import FORMATS
from foliko_cli.formats.importers.base import Imported, Source

# The order formats are tried in when none is named: the most particular first.
SNIFFED = ("llm", "codex", "claude-code", "chatgpt", "claude", "openwebui", "librechat")
LEFT_OUT_UNKNOWN = "file(s) in no format foliko knows"


def format_module(name: str) -> ModuleType:
    if name not in FORMATS:
        raise UsageError(
            f"unknown import format {name!r}",
            fix=f"use one of {', '.join(FORMATS)}",
            hint=Hint.FORMAT,
        )
    return importlib.import_module(f"foliko_cli.formats.importers.{name.replace('-', '_')}")


def read(
    source: str,
    fmt: str | None = None,
    *,
    main_only: bool = False,
    branches: str = "current",
    stdin: bytes | None = None,
) -> Imported:
    """What ``source`` (a path, or - with ``stdin`` the bytes read from it) holds in
    ``fmt``, or in the format told from the data when ``fmt`` is None; see
    ``Imported`` for ``main_only`` and ``branches``."""
    if not source:
        raise UsageError(
            "the source to import is empty",
            fix="give a file, a directory or - for stdin (an empty path is no directory)",
        )
    kept = Imported(fmt or "", main_only=main_only, branches=branches)
    if source == "-":
        if fmt == "llm":
            raise UsageError("llm's logs.db cannot be read from stdin", fix="give its path")
        return _read_file(Source("stdin", data=stdin or b""), fmt, kept)
    path = Path(source)
    if path.is_dir():
        return _read_directory(path, fmt, kept)
    if not path.exists():
        raise UsageError(f"cannot read {source}: no such file or directory", fix="check the path")
    return _read_file(Source(source, path), fmt, kept)


def _sniff(source: Source, names: tuple[str, ...] = SNIFFED) -> str | None:
    return next((name for name in names if format_module(name).sniff(source)), None)


def _told(source: Source) -> str:
    """The format of a file no ``--format`` names: a SQLite database can only be
    llm's; a file no other format claims is read as foliko's own export."""
    from foliko_cli.formats.importers.llm import SQLITE_HEADER

    if source.head().startswith(SQLITE_HEADER):
        return "llm"
    return _sniff(source) or "foliko"


def _read_file(source: Source, fmt: str | None, imported: Imported) -> Imported:
    told = fmt or _told(source)
    imported.format = told
    try:
        format_module(told).read(source, imported)
    except UsageError as exc:
        if fmt is not None or told != "foliko":
            raise
        others = ", ".join(name for name in FORMATS if name != "foliko")
        raise UsageError(
            exc.problem,
            fix=f"{exc.fix or 'export it again'}, or if another tool wrote it, name its "
            f"format, one of {others}",
            hint=Hint.FORMAT,
        ) from None
    if told != "foliko":  # foliko's own export holds what it held, as it was
        imported.link_forks()
    return imported


def _files(directory: Path, patterns: tuple[str, ...]) -> list[Path]:
    found = {path for pattern in patterns for path in directory.rglob(pattern) if path.is_file()}
    return sorted(found)


def _read_directory(directory: Path, fmt: str | None, imported: Imported) -> Imported:
    if fmt == "foliko":
        raise UsageError(f"{directory} is a directory", fix="give the file sessions export wrote")
    if fmt is None:
        fmt, sources, unknown = _tell_directory(directory)
    else:
        sources, unknown = _files_of(directory, fmt), 0
    module = format_module(fmt)
    imported.format = fmt
    imported.leave_out(LEFT_OUT_UNKNOWN, unknown)
    skipped = getattr(module, "skipped", None)
    for source in sources:
        left_out = skipped(source.path) if skipped else None
        if left_out:
            imported.leave_out(left_out)
            continue
        try:
            module.read(source, imported)
        except UsageError as exc:
            imported.problem(source.name, exc.problem)
    imported.link_forks()
    return imported


def _files_of(directory: Path, fmt: str) -> list[Source]:
    module = format_module(fmt)
    sources = [Source(str(path), path) for path in _files(directory, module.FILES)]
    if not sources:
        raise UsageError(
            f"{directory} holds no file of {module.LABEL} ({', '.join(module.FILES)})",
            fix="check the directory and the format",
            hint=Hint.FORMAT,
        )
    return sources


def _tell_directory(directory: Path) -> tuple[str, list[Source], int]:
    """The one format of the files under ``directory``, those files, and how many
    other files no format claims."""
    patterns = tuple({p for name in SNIFFED for p in format_module(name).FILES})
    by_format: dict[str, list[Source]] = {}
    unknown = 0
    for path in _files(directory, patterns):
        source = Source(str(path), path)
        told = _sniff(source, tuple(n for n in SNIFFED if _matches(path, n)))
        if told is None:
            unknown += 1
        else:
            by_format.setdefault(told, []).append(source)
    if not by_format:
        raise UsageError(
            f"{directory} holds no file in a format foliko can tell",
            fix=f"name the format, one of {', '.join(FORMATS[1:])}",
            hint=Hint.FORMAT,
        )
    if len(by_format) > 1:
        raise UsageError(
            f"{directory} holds files of several formats ({', '.join(sorted(by_format))})",
            fix="import each kind on its own, naming its format",
            hint=Hint.FORMAT,
        )
    ((fmt, sources),) = by_format.items()
    return fmt, sources, unknown


def _matches(path: Path, name: str) -> bool:
    return any(path.match(pattern) for pattern in format_module(name).FILES)
