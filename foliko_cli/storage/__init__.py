"""Choosing a storage backend by name, URL, config table or instance (F6).

URLs follow SQLAlchemy's convention: ``sqlite:///relative.db``,
``sqlite:////absolute.db``, ``json:///relative/dir``, ``json:////abs/dir``,
``postgresql://user@host:5432/db``, ``redis://host:6379/0``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from foliko_cli.errors import Hint, StorageConfigError, StoreNotFoundError
from foliko_cli.storage.base import SessionStorageAdapter

BACKEND_NAMES = ("memory", "json", "sqlite")
_HINT = (
    "use memory, json, sqlite or a URL such as sqlite:////abs/sessions.db or json:///relative/dir"
)


def _file_backend(kind: str, path: Path, *, named: bool) -> SessionStorageAdapter:
    """The SQLite or JSON store at ``path``; ``named``: the user named the place (a
    URL, a path), which must then exist (``check_place``), else it is the home's."""
    if named:
        check_place(kind, path)
    adapter: SessionStorageAdapter
    if kind == "sqlite":
        from foliko_cli.storage.sqlite import SQLiteStorage

        adapter = SQLiteStorage(path)
    else:
        from foliko_cli.storage.jsonfile import JsonStorage

        adapter = JsonStorage(path)
    adapter.named = named
    return adapter


def check_place(kind: str, path: Path) -> None:
    """A store the user named goes in a directory that exists: a mistyped path is
    refused (StoreNotFoundError, exit 2), never created. The store itself (the
    database file, the JSON directory) may be new: its first write creates it."""
    parent = path.parent
    if parent.is_dir():
        return
    what = "SQLite database" if kind == "sqlite" else "JSON session directory"
    problem = "is not a directory" if parent.exists() else "does not exist"
    raise StoreNotFoundError(
        f"the directory {parent} of the {what} {path} {problem}",
        fix="create it first, or correct the path",
        hint=Hint.INIT,
    )


def default_location(kind: str, home: Path) -> Path:
    return home / ("sessions.db" if kind == "sqlite" else "sessions")


def shown(spec: str) -> str:
    """``spec`` as it may appear in a message: any password replaced by ***."""
    from foliko_cli.storage.urls import redact

    return redact(spec)


def file_place(spec: str, home: Path) -> tuple[str, Path, bool] | None:
    """For a SQLite or JSON ``spec`` (a name or a URL): its kind, its path and
    whether the user named the place (a URL) rather than the home's default (a
    URL of the default place is the default: the home is made on first use);
    None for any other backend. A malformed file URL is a StorageConfigError
    giving the right form."""
    spec = spec.strip()
    if spec in ("sqlite", "json"):
        return spec, default_location(spec, home), False
    scheme, colon, rest = spec.partition(":")
    if not colon or scheme.lower() not in ("sqlite", "json"):
        return None
    kind = scheme.lower()
    right = f"write {kind}:///relative/path or {kind}:////absolute/path"
    if not rest.startswith("//"):
        raise StorageConfigError(
            f"malformed storage URL {shown(spec)!r}: a {kind} URL starts with {kind}:/// "
            f"(three slashes); {right}"
        )
    from urllib.parse import parse_qsl, urlsplit

    try:
        url = urlsplit(spec)
    except ValueError as exc:
        raise StorageConfigError(f"malformed storage URL {shown(spec)!r}: {exc}; {_HINT}") from None
    if url.netloc:
        raise StorageConfigError(
            f"malformed storage URL {shown(spec)!r}: a {kind} URL has no host; {right}"
        )
    if url.query or url.fragment:
        given = [key for key, _ in parse_qsl(url.query, keep_blank_values=True)]
        option = f"option {given[0]!r}" if given else f"part {url.fragment or url.query!r}"
        raise StorageConfigError(
            f"unknown {option} in storage URL {shown(spec)!r}: a {kind} URL takes no "
            f"options; remove it: {kind}:///relative/path or {kind}:////absolute/path"
        )
    path = url.path[1:] if url.path.startswith("/") else url.path
    if not path:
        raise StorageConfigError(
            f"malformed storage URL {shown(spec)!r}: it names no path; {right}"
        )
    default = default_location(kind, home)
    return kind, Path(path), os.path.abspath(path) != os.path.abspath(default)


def _from_url(spec: str) -> SessionStorageAdapter:
    from urllib.parse import urlsplit

    try:
        scheme = urlsplit(spec).scheme.lower()
    except ValueError as exc:
        raise StorageConfigError(f"malformed storage URL {shown(spec)!r}: {exc}; {_HINT}") from None
    if scheme.split("+", 1)[0] in ("postgresql", "postgres"):
        from foliko_cli.storage.postgres import PostgresStorage

        return PostgresStorage(spec)
    if scheme in ("redis", "rediss"):
        from foliko_cli.storage.redis import RedisStorage

        return RedisStorage(spec)
    raise StorageConfigError(f"unknown storage {shown(spec)!r}; {_HINT}")


def open_storage(
    spec: str | Mapping[str, Any] | SessionStorageAdapter | None, home: Path
) -> SessionStorageAdapter:
    """Build the adapter ``spec`` names; ``home`` holds the default locations."""
    if isinstance(spec, SessionStorageAdapter):
        return spec
    if isinstance(spec, Mapping):
        kind = str(spec.get("type", ""))
        location = spec.get("path") or spec.get("url")
        if kind == "memory" or (kind in ("sqlite", "json") and not location):
            return open_storage(kind, home)
        if kind in ("sqlite", "json"):
            return _file_backend(kind, Path(str(location)).expanduser(), named=True)
        if location and "://" in str(location):
            return open_storage(str(location), home)
        raise StorageConfigError(f"unknown storage type {kind!r} in the storage table; {_HINT}")
    spec = (spec or "sqlite").strip()
    if spec == "memory":
        from foliko_cli.storage.memory import MemoryStorage

        return MemoryStorage()
    place = file_place(spec, home)
    if place is not None:
        kind, path, named = place
        return _file_backend(kind, path, named=named)
    if "://" in spec or ":" in spec.split("/")[0]:
        return _from_url(spec)
    raise StorageConfigError(f"unknown storage {shown(spec)!r}; {_HINT}")


def init_place(spec: str, home: Path) -> None:
    """Make the place of the SQLite or JSON store ``spec`` names: its missing
    directories (owner-only), then the empty database file or the JSON
    directory; an existing one is left as it is. Other backends have no place
    to make (their schema or keys are created on first use)."""
    place = file_place(spec, home)
    if place is None:
        return
    kind, path, _ = place
    from foliko_cli.storage.filelock import os_error
    from foliko_cli.storage.paths import make_private_dirs

    try:
        if kind == "json":
            make_private_dirs(path)
        else:
            make_private_dirs(path.parent)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
    except OSError as exc:
        raise os_error("create", path, exc) from None
