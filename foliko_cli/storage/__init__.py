"""Choosing a storage backend by name, URL, config table or instance (F6).

URLs follow SQLAlchemy's convention: ``sqlite:///relative.db``,
``sqlite:////absolute.db``, ``json:///relative/dir``, ``json:////abs/dir``,
``postgresql://user@host:5432/db``, ``redis://host:6379/0``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from foliko_cli.errors import StorageConfigError
from foliko_cli.storage.base import SessionStorageAdapter

BACKEND_NAMES = ("memory", "json", "sqlite")
_HINT = (
    "use memory, json, sqlite or a URL such as sqlite:////abs/sessions.db or json:///relative/dir"
)


def _file_backend(kind: str, path: str | Path) -> SessionStorageAdapter:
    if kind == "sqlite":
        from foliko_cli.storage.sqlite import SQLiteStorage

        return SQLiteStorage(path)
    from foliko_cli.storage.jsonfile import JsonStorage

    return JsonStorage(path)


def default_location(kind: str, home: Path) -> Path:
    return home / ("sessions.db" if kind == "sqlite" else "sessions")


def shown(spec: str) -> str:
    """``spec`` as it may appear in a message: any password replaced by ***."""
    from foliko_cli.storage.urls import redact

    return redact(spec)


def _from_url(spec: str) -> SessionStorageAdapter:
    from urllib.parse import urlsplit

    try:
        url = urlsplit(spec)
    except ValueError as exc:
        raise StorageConfigError(f"malformed storage URL {shown(spec)!r}: {exc}; {_HINT}") from None
    scheme = url.scheme.lower()
    if scheme in ("sqlite", "json"):
        if url.netloc:
            raise StorageConfigError(
                f"malformed storage URL {shown(spec)!r}: a {scheme} URL has no host; "
                f"write {scheme}:///relative/path or {scheme}:////absolute/path"
            )
        if url.query or url.fragment:
            from urllib.parse import parse_qsl

            given = [key for key, _ in parse_qsl(url.query, keep_blank_values=True)]
            option = f"option {given[0]!r}" if given else f"part {url.fragment or url.query!r}"
            raise StorageConfigError(
                f"unknown {option} in storage URL {shown(spec)!r}: a {scheme} URL takes no "
                f"options; remove it: {scheme}:///relative/path or {scheme}:////absolute/path"
            )
        path = url.path[1:] if url.path.startswith("/") else url.path
        if not path:
            raise StorageConfigError(
                f"malformed storage URL {shown(spec)!r}: it names no path; "
                f"write {scheme}:///relative/path or {scheme}:////absolute/path"
            )
        return _file_backend(scheme, path)
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
            return _file_backend(kind, Path(str(location)).expanduser())
        if location and "://" in str(location):
            return open_storage(str(location), home)
        raise StorageConfigError(f"unknown storage type {kind!r} in the storage table; {_HINT}")
    spec = (spec or "sqlite").strip()
    if spec == "memory":
        from foliko_cli.storage.memory import MemoryStorage

        return MemoryStorage()
    if spec in ("sqlite", "json"):
        return _file_backend(spec, default_location(spec, home))
    if "://" in spec or ":" in spec.split("/")[0]:
        return _from_url(spec)
    raise StorageConfigError(f"unknown storage {shown(spec)!r}; {_HINT}")
