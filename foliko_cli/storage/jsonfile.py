"""JSON files: one file per session, in the seed's document format (F6).

A storage directory looks like this::

    sessions/                   0700, created on the first write
      work.json                 0600, session 'work'
      ^my^notes%2Etxt.json      session 'MyNotes.txt'
      .work.3f9a0c1b.tmp        a write in progress, or left by a crash: ignored
                                (``storage check`` reports one older than 5 minutes)
      .locks/                   flock files: turn locks and short write locks,
                                removed with their session
      .quarantine/              unreadable files moved aside by `storage check --repair`
      .fragments/               the fragments' texts, one file each, named by SHA-256
      .forget                   a forget's committed intent, while it is applied

File names. ``a``-``z``, ``0``-``9``, ``_`` and ``-`` are kept, so plain ids
stay readable; an upper-case letter becomes ``^`` and the letter in lower case,
and every other character becomes ``%XX`` per UTF-8 byte (``.``, ``/``, ``\\``,
NUL included). Names therefore never contain a separator, never start with a
dot and never differ only in case, so two ids cannot share a file on a
case-insensitive filesystem either; Windows device names (``con``, ``nul``, …)
get their first letter escaped. An encoded name longer than 120 characters is
cut and given ``~`` and 32 hex digits of the id's SHA-256. The id itself is
stored in the file as ``sessionId``; that, not the name, is what ``list`` and
``load`` return. Files the original foliko wrote as ``<sessionId>.json`` are
found under that name too and are rewritten in place.

Writes go to a temporary file in the same directory, are fsynced and moved
over the old file with ``os.replace``; then the directory is fsynced. A short
per-session write lock makes read-check-write atomic even for a caller that
does not hold the turn lock. A file that cannot be parsed is reported
(CorruptSessionError, or a summary with ``error`` set) and never overwritten;
so is a file written by foliko whose ``messageCount`` is not the number of
its messages (storage/integrity.py). A session path that is a symbolic link
is never followed: the session is damaged.

A forget (``forget``) changes several files as one step: under the write
locks of every session it touches, the new files are written (temporary,
fsynced), then the intent naming each move and removal is written and
renamed to ``.forget`` (the commit), then applied and removed. A crash
before the rename changes nothing (its temporary files are litter); after
it, the next read or write of the store applies the intent first, under
the same locks, so the forget completes.

``save`` and ``delete`` compare the stored revision under that write lock.
``check`` also reports stray files (orphan lock files, temporary files of
killed writes); ``quarantine`` of such a problem removes
them. Failures of the filesystem (full, read-only, permissions) are a
StorageError naming the path.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import time
from collections.abc import AsyncIterator, Collection, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from foliko_cli.common.clock import now_ms
from foliko_cli.errors import (
    ConflictError,
    CorruptSessionError,
    Hint,
    SessionExistsError,
    SessionNotFoundError,
    StorageError,
)
from foliko_cli.messages.exact_json import loads
from foliko_cli.messages.record import (
    Messages,
    SessionRecord,
    SessionState,
    SessionSummary,
    checked_append,
    checked_for_write,
    new_metadata,
    next_revision,
    preview_of,
    title_of,
)
from foliko_cli.messages.seed import record_from_seed, record_to_seed
from foliko_cli.storage.base import (
    AuditEntry,
    ProblemKind,
    SavesInBatches,
    SessionStorageAdapter,
    StoredProblem,
    check_expected,
    expected_list,
    kept_entries,
)
from foliko_cli.storage.filelock import SessionFileLocks, os_error
from foliko_cli.storage.integrity import check_count
from foliko_cli.storage.names import file_stem, session_id_from_stem
from foliko_cli.storage.paths import make_private_dirs

SUFFIX = ".json"
TEMP_SUFFIX = ".tmp"
LOCK_DIRECTORY = ".locks"
QUARANTINE_DIRECTORY = ".quarantine"
FRAGMENT_DIRECTORY = ".fragments"
AUDIT_FILE = ".audit.jsonl"
"""The audit log (base.py, rule 13): one JSON line per entry, appended under
``AUDIT_FILE + ".lock"`` (flock), which a prune holds while it replaces the file."""
WRITE_LOCK_TIMEOUT = 30.0
READ_CHUNK = 1 << 16
STALE_TEMP_S = 300
_WRITE_KEY = "\0write\0"
_FORGET_KEY = "\0forget\0"
INTENT = ".forget"
_HEX = frozenset("0123456789abcdef")
_DUMP_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE


def file_name(session_id: str) -> str:
    return file_stem(session_id) + SUFFIX


def _looks_hashed(stem: str) -> bool:
    return len(stem) > 33 and stem[-33] == "~" and all(c in _HEX for c in stem[-32:])


def seed_file_name(session_id: str) -> str | None:
    """The seed's ``{sessionId}.json``, when that is a plain name inside the directory
    that cannot be the name of another id (``a%2Fb.json`` is where ``a/b`` lives)."""
    if (
        not session_id
        or session_id.startswith(".")
        or any(char in session_id for char in "/\\\0")
        or session_id.endswith(TEMP_SUFFIX)
        or session_id_from_stem(session_id) not in (None, session_id)
        or _looks_hashed(session_id)
    ):
        return None
    name = session_id + SUFFIX
    try:
        if len(os.fsencode(name)) > 255:
            return None
    except UnicodeError:
        return None
    return name


class _Entry(NamedTuple):
    name: str
    summary: SessionSummary
    own: bool  # summary.session_id resolves to this file
    reason: str | None = None  # why it cannot be read


def _key_of(lock_file: str) -> str:
    """The session id a lock file is named for ("" when the name is hashed)."""
    key = session_id_from_stem(lock_file.removesuffix(".lock")) or ""
    return key.removeprefix(_WRITE_KEY)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class JsonStorage(SavesInBatches, SessionStorageAdapter):
    name = "json"
    answers_at_once = True

    def __init__(self, directory: str | os.PathLike[str]):
        self.directory = Path(directory)
        self._locks = SessionFileLocks(self.directory / LOCK_DIRECTORY)
        self._intent = os.path.join(self.directory, INTENT)

    def __repr__(self) -> str:
        return f"JsonStorage({str(self.directory)!r})"

    @property
    def location(self) -> str:
        return str(self.directory)

    # files

    def _storage_error(self, action: str, path: str | Path, exc: OSError) -> StorageError:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return os_error(action, path, exc)  # says the disk is full
        return StorageError(
            f"cannot {action} {path}: {exc.strerror or exc}",
            fix="check the permissions of the sessions directory or choose another location",
            hint=Hint.STORAGE,
        )

    def _read_bytes(self, path: str | Path, session_id: str = "") -> bytes | None:
        """The file's bytes; None when it does not exist. A symbolic link is never
        followed: the session is damaged (CorruptSessionError)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise CorruptSessionError(
                    session_id, str(path), "the file is a symbolic link, which is never followed"
                ) from None
            raise self._storage_error("read", path, exc) from None
        try:
            chunks = []  # os.read, not a file object: a migration reads 100,000 files
            while chunk := os.read(fd, READ_CHUNK):
                chunks.append(chunk)
            return b"".join(chunks)
        except IsADirectoryError:
            return b""  # parsed as corrupt: reported, never replaced
        except OSError as exc:
            raise self._storage_error("read", path, exc) from None
        finally:
            os.close(fd)

    def _locate(self, session_id: str) -> tuple[str, bytes] | None:
        """The file that holds ``session_id`` and its bytes: our name first, then the
        seed's. The path is a str: pathlib costs a migration of 100,000 files ~0.3 s."""
        name = file_name(session_id)
        path = os.path.join(self.directory, name)
        data = self._read_bytes(path, session_id)
        if data is not None:
            return path, data
        seed_name = seed_file_name(session_id)
        if seed_name and seed_name != name:
            seed_path = os.path.join(self.directory, seed_name)
            data = self._read_bytes(seed_path, session_id)
            if data is not None:
                return seed_path, data
        return None

    def _home_of(self, session_id: str) -> str:
        """The name of the file ``session_id`` resolves to (it may not exist)."""
        name = file_name(session_id)
        seed_name = seed_file_name(session_id)
        if (
            seed_name
            and seed_name != name
            and not (self.directory / name).exists()
            and (self.directory / seed_name).exists()
        ):
            return seed_name
        return name

    @staticmethod
    def _parse(session_id: str, path: str | Path, data: bytes) -> dict[str, Any]:
        try:
            document = loads(data)
        except ValueError as exc:
            if data.strip():
                reason = str(exc)
            else:
                reason = "it is a directory" if os.path.isdir(path) else "the file is empty"
            raise CorruptSessionError(session_id, str(path), reason) from None
        if not isinstance(document, dict):
            raise CorruptSessionError(session_id, str(path), "not a JSON object")
        return document

    def _document(self, session_id: str, path: str | Path, data: bytes) -> dict[str, Any]:
        document = self._parse(session_id, path, data)
        stored = document.get("sessionId", session_id)
        if stored != session_id:
            raise CorruptSessionError(
                session_id, str(path), f"the file holds session {stored!r}, not this one"
            )
        return document

    def _record(self, session_id: str, path: str | Path, document: dict[str, Any]) -> SessionRecord:
        try:
            record = record_from_seed(document, session_id, values=False)
            if not isinstance(record.compression_state, dict):
                raise ValueError("compressionState must be an object")
        except (ValueError, TypeError, AttributeError) as exc:
            raise CorruptSessionError(session_id, str(path), _one_line(str(exc))) from None
        if "revision" in document:  # written by foliko, which counts what it writes
            metadata = document.get("metadata")
            counted = metadata.get("messageCount") if isinstance(metadata, dict) else None
            check_count(session_id, str(path), count=counted, found=len(record.messages))
        record.revision = max(record.revision, 1)
        return record

    def _current(self, session_id: str) -> tuple[Path, SessionRecord | None]:
        """Where ``session_id`` is (or will be) written, and what is there now."""
        located = self._locate(session_id)
        if located is None:
            return self.directory / file_name(session_id), None
        path, data = located
        return Path(path), self._record(session_id, path, self._document(session_id, path, data))

    @contextlib.contextmanager
    def _audit_held(self) -> Iterator[Path]:
        import fcntl

        self._make_directory()
        path = self.directory / (AUDIT_FILE + ".lock")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise os_error("open", path, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield self.directory / AUDIT_FILE
        finally:
            os.close(fd)

    async def audit_append(self, entries: list[AuditEntry]) -> None:
        lines = b"".join(orjson.dumps(e.to_json()) + b"\n" for e in entries)
        with self._audit_held() as path:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
                try:
                    os.write(fd, lines)
                finally:
                    os.close(fd)
            except OSError as exc:
                raise os_error("append to", path, exc) from None

    def _audit_entries(self, path: Path) -> list[AuditEntry]:
        try:
            text = path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise os_error("read", path, exc) from None
        entries = []
        for line in text.splitlines():
            try:
                entries.append(AuditEntry.from_json(orjson.loads(line)))
            except (ValueError, KeyError, TypeError):
                continue  # a line cut by a full disk: the others stand
        return entries

    async def audit_read(self, since: int | None = None) -> list[AuditEntry]:
        path = self.directory / AUDIT_FILE
        return [e for e in self._audit_entries(path) if since is None or e.at >= since]

    async def audit_prune(self, *, before: int | None = None, keep: int | None = None) -> int:
        with self._audit_held() as path:
            entries = self._audit_entries(path)
            kept = kept_entries(entries, before, keep)
            if len(kept) < len(entries):
                temp = path.with_name(f"{AUDIT_FILE}.{os.urandom(6).hex()}{TEMP_SUFFIX}")
                try:
                    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(fd, "wb") as file:
                        file.write(b"".join(orjson.dumps(e.to_json()) + b"\n" for e in kept))
                    os.replace(temp, path)
                except OSError as exc:
                    with contextlib.suppress(OSError):
                        os.unlink(temp)
                    raise os_error("rewrite", path, exc) from None
        return len(entries) - len(kept)

    def _make_directory(self) -> None:
        try:
            make_private_dirs(self.directory)
        except OSError as exc:
            raise self._storage_error("create the directory", self.directory, exc) from None
        if not self.directory.is_dir():
            raise StorageError(
                f"{self.directory} is not a directory",
                fix="point the json storage at a directory",
                hint=Hint.STORAGE,
            )

    def _stored_path(self, session_id: str) -> Path | None:
        """The file (or whatever is there, a link too) that holds ``session_id``,
        found by its name alone: our name first, then the seed's."""
        for name in (file_name(session_id), seed_file_name(session_id)):
            if name and os.path.lexists(self.directory / name):
                return self.directory / name
        return None

    def _gone(self, session_id: str) -> bool:
        """No file holds ``session_id`` (its lock files may go)."""
        return self._stored_path(session_id) is None

    def _sync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        except OSError as exc:  # some filesystems cannot sync a directory
            if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
                raise
        finally:
            os.close(fd)

    def _temp_file(self, path: Path, data: bytes) -> Path:
        """``data`` in a new temporary file beside ``path``, fsynced."""
        temp = self.directory / f".{path.stem[:100]}.{os.urandom(6).hex()}{TEMP_SUFFIX}"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            raise self._storage_error("write", path, exc) from None
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise self._storage_error("write", path, exc) from None
        finally:
            os.close(fd)
        return temp

    def _write(self, path: Path, record: SessionRecord, *, create: bool = False) -> None:
        """Write ``record`` to ``path`` atomically; with ``create``, never replace a file."""
        data = orjson.dumps(record_to_seed(record), option=_DUMP_OPTIONS)
        self._make_directory()
        temp = self._temp_file(path, data)
        try:
            if create:
                self._link_new(temp, path, record.session_id)
            else:
                os.replace(temp, path)
            self._sync_directory()
        except OSError as exc:
            raise self._storage_error("write", path, exc) from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)

    def _link_new(self, temp: Path, path: Path, session_id: str) -> None:
        try:
            os.link(temp, path)  # fails when ``path`` exists: never clobbers
        except FileExistsError:
            raise SessionExistsError(session_id) from None
        except OSError as exc:  # no hard links here; the write lock still excludes our writers
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
                raise
            if path.exists():
                raise SessionExistsError(session_id) from None
            os.replace(temp, path)

    def _scan(self) -> list[str]:
        """Names of the session files: ``*.json``, not hidden (temp files start with a dot)."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise self._storage_error("list", self.directory, exc) from None
        return sorted(n for n in names if n.endswith(SUFFIX) and not n.startswith("."))

    def _id_from_name(self, name: str) -> str | None:
        """The id a file's name stands for (ours or the seed's), when it says."""
        stem = name[: -len(SUFFIX)]
        session_id = session_id_from_stem(stem)
        if session_id is None and seed_file_name(stem) == name:
            session_id = stem
        return session_id

    def _inspect(self, name: str, *, summarise: bool) -> _Entry | None:
        """One file: its summary (``error`` set when unreadable), or None if it vanished."""
        path = self.directory / name
        guess = self._id_from_name(name)
        try:
            data = self._read_bytes(path, guess or name)
            if data is None:
                return None
            summary = self._summary(name, guess, data, summarise=summarise)
            return _Entry(name, summary, True)
        except CorruptSessionError as exc:
            reason = exc.reason
        except StorageError as exc:
            reason = str(exc)
        try:
            changed = int(path.stat().st_mtime * 1000)
        except OSError:
            changed = 0
        summary = SessionSummary(
            session_id=guess or name,
            created_at=changed,
            updated_at=changed,
            message_count=0,
            error=_one_line(f"{path}: {reason}"),
        )
        own = guess is not None and self._home_of(guess) == name
        return _Entry(name, summary, own, _one_line(reason))

    def _summary(
        self, name: str, guess: str | None, data: bytes, *, summarise: bool
    ) -> SessionSummary:
        path = self.directory / name
        fallback = guess or name
        document = self._parse(fallback, path, data)
        session_id = document.get("sessionId", guess)
        if not isinstance(session_id, str) or not session_id:
            raise CorruptSessionError(fallback, str(path), "sessionId is missing or not a string")
        home = self._home_of(session_id)
        if home != name:
            raise CorruptSessionError(
                fallback,
                str(path),
                f"the file holds session {session_id!r} but is not named for it "
                f"(its file is {home})",
            )
        if not summarise:
            return SessionSummary(session_id, 0, 0, 0)
        record = self._record(session_id, path, document)
        try:
            created_at = int(record.metadata.get("created_at") or record.saved_at)
        except (ValueError, TypeError):
            raise CorruptSessionError(session_id, str(path), "createdAt is not a number") from None
        return SessionSummary(
            session_id=session_id,
            created_at=created_at,
            updated_at=record.saved_at,
            message_count=len(record.messages),
            preview=preview_of(record.messages),
            title=title_of(record.metadata),
        )

    def _inspect_all(self, *, summarise: bool) -> list[_Entry]:
        entries = (self._inspect(name, summarise=summarise) for name in self._scan())
        return [entry for entry in entries if entry is not None]

    @contextlib.asynccontextmanager
    async def _writing(self, *session_ids: str, settle: bool = True) -> AsyncIterator[None]:
        """Short write locks (in a fixed order) around one read-check-write; the
        lock file of a session that is gone afterwards is removed."""
        self._make_directory()
        if settle:
            await self._settle()
        async with contextlib.AsyncExitStack() as stack:
            for session_id in sorted(set(session_ids)):
                await stack.enter_async_context(
                    self._locks.hold(
                        _WRITE_KEY + session_id,
                        WRITE_LOCK_TIMEOUT,
                        remove_if=functools.partial(self._gone, session_id),
                    )
                )
            yield
        for session_id in session_ids:
            if self._gone(session_id):
                self._locks.remove_if_free(session_id, functools.partial(self._gone, session_id))

    # contract

    async def load(self, session_id: str) -> SessionRecord | None:
        await self._settle()
        located = self._locate(session_id)
        if located is None:
            return None
        path, data = located
        return self._record(session_id, path, self._document(session_id, path, data))

    async def revision(self, session_id: str) -> int | None:
        await self._settle()
        located = self._locate(session_id)
        if located is None:
            return None
        path, data = located
        document = self._document(session_id, path, data)
        revision = document.get("revision", 0) or 0
        if not isinstance(revision, int):
            raise CorruptSessionError(session_id, str(path), "revision is not an integer")
        return max(revision, 1)

    async def save_many(
        self,
        records: list[SessionRecord],
        *,
        expected_revisions: list[int | None] | None = None,
    ) -> list[int]:
        """Under the write locks of all of them, every revision is checked before
        any file is written: one stale revision writes none."""
        expected = expected_list(records, expected_revisions)
        for record in records:
            checked_for_write(record)
        if not records:
            return []
        if len(records) > 1 and all(want is None for want in expected):
            return [await self.save(record) for record in records]  # one lock at a time
        async with self._writing(*(record.session_id for record in records)):
            current = {}
            for record, want in zip(records, expected, strict=True):
                path, previous = self._current(record.session_id)
                check_expected(record.session_id, want, previous.revision if previous else 0)
                current[record.session_id] = (path, previous)
            revisions = []
            for record in records:
                path, previous = current[record.session_id]
                stored = self._replace(path, previous, record)
                current[record.session_id] = (path, stored)
                revisions.append(stored.revision)
            return revisions

    def _replace(
        self, path: Path, previous: SessionRecord | None, record: SessionRecord
    ) -> SessionRecord:
        stored = self._stored_copy(previous, record)
        self._write(path, stored)
        return stored

    @staticmethod
    def _stored_copy(previous: SessionRecord | None, record: SessionRecord) -> SessionRecord:
        """``record`` as a write over ``previous`` stores it."""
        now = now_ms()
        return SessionRecord(
            session_id=record.session_id,
            messages=record.messages,
            variables=record.variables,
            metadata={**new_metadata(now), **record.metadata},
            compression_state=record.compression_state,
            saved_at=record.saved_at or now,
            revision=next_revision(previous.revision if previous else None),
        )

    async def append(
        self, session_id: str, messages: Messages, state: SessionState, *, expected_revision: int
    ) -> int:
        checked_append(session_id, messages, state)
        async with self._writing(session_id):
            path, stored = self._current(session_id)
            found = stored.revision if stored else 0
            if found != expected_revision:
                raise ConflictError(session_id, expected_revision, found)
            revision = next_revision(found)
            now = now_ms()
            previous = stored.messages if stored else []
            metadata = stored.metadata if stored else new_metadata(now)
            record = SessionRecord(
                session_id=session_id,
                messages=[*previous, *messages],
                variables=state.variables,
                metadata={"created_at": metadata.get("created_at", now), **state.metadata},
                compression_state=state.compression_state,
                saved_at=now,
                revision=revision,
            )
            self._write(path, record)
        return revision

    async def delete(self, session_id: str, *, expected_revision: int | None = None) -> bool:
        """Remove the session's file, readable or not (the fix a corrupt session names;
        with ``expected_revision`` it must be readable), and its lock files."""
        if not self.directory.exists():
            check_expected(session_id, expected_revision, 0)
            return False
        async with self._writing(session_id):
            path = self._stored_path(session_id)
            if expected_revision is not None:
                found = 0 if path is None else (await self.revision(session_id) or 0)
                check_expected(session_id, expected_revision, found)
            if path is None:
                return False
            try:
                os.unlink(path)
                self._sync_directory()
            except FileNotFoundError:
                return False
            except OSError as exc:
                raise self._storage_error("delete", path, exc) from None
        return True

    async def forget(
        self,
        records: list[SessionRecord],
        deletions: dict[str, int | None],
        *,
        expected_revisions: list[int | None] | None = None,
    ) -> None:
        """Checked under the write locks of all of them, the new files written aside,
        then committed by renaming the intent into place and applied (see the
        module's docstring)."""
        expected = expected_list(records, expected_revisions)
        for record in records:
            checked_for_write(record)
        ids = [*deletions, *(record.session_id for record in records)]
        self._make_directory()
        await self._settle()
        async with (
            self._locks.hold(_FORGET_KEY, WRITE_LOCK_TIMEOUT, remove_if=lambda: True),
            self._writing(*ids, settle=False),
        ):
            moves, removals = [], []
            for session_id, want in deletions.items():
                path = self._stored_path(session_id)
                if want is not None:
                    found = 0 if path is None else (await self._stored_revision(session_id))
                    check_expected(session_id, want, found)
                if path is not None:
                    removals.append(path.name)
            replaced = []
            for record, want in zip(records, expected, strict=True):
                path, previous = self._current(record.session_id)
                check_expected(record.session_id, want, previous.revision if previous else 0)
                replaced.append((path, previous, record))
            try:
                for path, previous, record in replaced:
                    stored = self._stored_copy(previous, record)
                    data = orjson.dumps(record_to_seed(stored), option=_DUMP_OPTIONS)
                    moves.append((self._temp_file(path, data).name, path.name))
                intent = orjson.dumps({"move": moves, "remove": removals})
                temp = self._temp_file(self.directory / INTENT, intent)
                os.replace(temp, self.directory / INTENT)
            except BaseException:
                for name, _ in moves:
                    with contextlib.suppress(OSError):
                        os.unlink(self.directory / name)
                raise
            self._sync_directory()
            self._apply_intent()

    async def _stored_revision(self, session_id: str) -> int:
        located = self._locate(session_id)
        if located is None:
            return 0
        path, data = located
        revision = self._document(session_id, path, data).get("revision", 0) or 0
        return max(revision, 1) if isinstance(revision, int) else 0

    def _apply_intent(self) -> None:
        """Do what the committed intent says (each step may have been done already:
        a crash part way), then remove it."""
        path = self.directory / INTENT
        try:
            intent = orjson.loads(path.read_bytes())
            for temp, target in intent["move"]:
                with contextlib.suppress(FileNotFoundError):
                    os.replace(self.directory / temp, self.directory / target)
            for name in intent["remove"]:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.directory / name)
            self._sync_directory()
            os.unlink(path)
            self._sync_directory()
        except OSError as exc:
            raise self._storage_error("complete the forget in", self.directory, exc) from None

    async def _settle(self) -> None:
        """Complete a forget that a crash left committed but not applied: under the
        forget lock (so never one still running) and the write locks of the
        sessions it names (so never under a writer)."""
        if not os.path.lexists(self._intent):  # a str path: each load of a migration checks
            return
        async with self._locks.hold(_FORGET_KEY, WRITE_LOCK_TIMEOUT, remove_if=lambda: True):
            try:
                intent = orjson.loads((self.directory / INTENT).read_bytes())
            except FileNotFoundError:
                return  # completed meanwhile
            except (OSError, orjson.JSONDecodeError) as exc:
                raise StorageError(
                    f"cannot read the forget intent {self.directory / INTENT}: {exc}",
                    fix="remove that file only after checking the sessions it names",
                ) from None
            names = [target for _, target in intent["move"]] + intent["remove"]
            ids = [self._id_from_name(name) or name for name in names]
            async with contextlib.AsyncExitStack() as stack:
                for session_id in sorted(set(ids)):
                    await stack.enter_async_context(
                        self._locks.hold(_WRITE_KEY + session_id, WRITE_LOCK_TIMEOUT)
                    )
                if os.path.lexists(self.directory / INTENT):
                    self._apply_intent()

    async def session_ids(self) -> list[str]:
        """Every id that ``load`` answers for, unreadable ones included (so they get reported).

        A file named in our scheme stands for the id its name encodes (``load``
        checks the content); only other names are opened to read their ``sessionId``.
        """
        await self._settle()
        if not self.directory.is_dir():
            self.nothing_to_list("JSON session directory")
        ids = []
        for name in self._scan():
            session_id = session_id_from_stem(name[: -len(SUFFIX)])
            if session_id is not None:
                ids.append(session_id)
                continue
            entry = self._inspect(name, summarise=False)
            if entry is not None and entry.own:
                ids.append(entry.summary.session_id)
        return ids

    async def list_summaries(self) -> list[SessionSummary]:
        await self._settle()
        if not self.directory.is_dir():
            self.nothing_to_list("JSON session directory")
        summaries = [entry.summary for entry in self._inspect_all(summarise=True)]
        summaries.sort(key=lambda s: (-s.updated_at, s.session_id))
        return summaries

    async def put_fragments(self, texts: Mapping[str, str]) -> bool:
        """Each text in a file of its own, written whole (a temporary file, synced,
        moved into place); one already there is left as it is."""
        directory = self.directory / FRAGMENT_DIRECTORY
        for key, text in texts.items():
            path = directory / f"{key}.txt"
            if path.exists():
                continue
            temp = directory / f".{key}.{os.urandom(6).hex()}{TEMP_SUFFIX}"
            try:
                make_private_dirs(directory)
                fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                try:
                    view = memoryview(text.encode("utf-8"))
                    while view:
                        view = view[os.write(fd, view) :]
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(temp, path)  # the same bytes, should another writer have won
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.unlink(temp)
                raise self._storage_error("write", path, exc) from None
        return True

    async def get_fragments(self, hashes: Collection[str]) -> dict[str, str]:
        found = {}
        for key in hashes:
            if len(key) != 64 or not set(key) <= _HEX:
                continue  # no file name is made of it
            path = self.directory / FRAGMENT_DIRECTORY / f"{key}.txt"
            data = self._read_bytes(path)
            if data is not None:
                found[key] = data.decode("utf-8", errors="replace")
        return found

    async def exists(self) -> bool:
        return self.directory.is_dir()

    async def health_check(self) -> bool:
        """The directory is usable: it exists and is writable, or it can be created."""
        path = self.directory
        while not path.exists():
            if path.parent == path:
                return False
            path = path.parent
        return path.is_dir() and os.access(path, os.R_OK | os.W_OK | os.X_OK)

    @contextlib.asynccontextmanager
    async def lock(self, session_id: str, timeout: float) -> AsyncIterator[None]:
        self._make_directory()
        async with self._locks.hold(session_id, timeout, remove_if=lambda: self._gone(session_id)):
            yield

    async def set_interrupt(self, session_id: str, until_ms: int) -> None:
        self._locks.set_interrupt(session_id, until_ms)

    async def interrupt_requested(self, session_id: str) -> bool:
        return self._locks.interrupt_requested(session_id)

    async def copy(self, source_id: str, target_id: str) -> SessionRecord:
        source = await self.load(source_id)
        if source is None:
            raise SessionNotFoundError(source_id)
        async with self._writing(target_id):
            if self._locate(target_id) is not None:
                raise SessionExistsError(target_id)
            now = now_ms()
            copied = SessionRecord(
                session_id=target_id,
                messages=source.messages,
                variables=source.variables,
                metadata={**source.metadata, "created_at": now, "last_active": now},
                compression_state=source.compression_state,
                saved_at=now,
                revision=next_revision(None),
            )
            self._write(self.directory / file_name(target_id), copied, create=True)
        return copied

    async def rename(self, old_id: str, new_id: str) -> None:
        if not self.directory.exists():
            raise SessionNotFoundError(old_id)
        async with self._writing(old_id, new_id):
            old_path, record = self._current(old_id)
            if record is None:
                raise SessionNotFoundError(old_id)
            if self._locate(new_id) is not None:
                raise SessionExistsError(new_id)
            record.session_id = new_id
            record.revision = next_revision(None)  # a new name: never a revision it had before
            self._write(self.directory / file_name(new_id), record, create=True)
            try:
                os.unlink(old_path)
                self._sync_directory()
            except OSError as exc:
                raise self._storage_error("remove the renamed", old_path, exc) from None

    # storage check

    async def check(self) -> list[StoredProblem]:
        await self._settle()
        problems = [
            StoredProblem(entry.summary.session_id, str(self.directory / entry.name), entry.reason)
            for entry in self._inspect_all(summarise=True)
            if entry.reason
        ]
        problems.extend(
            StoredProblem(session_id, str(path), f"a stray file: {why}", ProblemKind.STRAY)
            for path, session_id, why in self._stray_files()
        )
        return problems

    def _live_lock(self, key: str | None) -> bool:
        if key is None:
            return False
        return not self._gone(key.removeprefix(_WRITE_KEY))

    def _stray_files(self) -> list[tuple[Path, str, str]]:
        """Orphan lock files and temporary files older than STALE_TEMP_S."""
        found = [
            (path, _key_of(path.name), why) for path, why in self._locks.stray(self._live_lock)
        ]
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return found
        except OSError as exc:
            raise self._storage_error("list", self.directory, exc) from None
        cutoff = time.time() - STALE_TEMP_S
        for name in names:
            if not (name.startswith(".") and name.endswith(TEMP_SUFFIX)):
                continue
            path = self.directory / name
            with contextlib.suppress(FileNotFoundError):
                if os.lstat(path).st_mtime < cutoff:
                    found.append((path, "", "a temporary file left by an interrupted write"))
        return found

    def _remove_stray(self, path: Path) -> bool:
        if path.parent == self._locks.directory:
            return self._locks.remove_stray(path, self._live_lock)
        if path.parent != self.directory or not path.name.endswith(TEMP_SUFFIX):
            return False
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise self._storage_error("remove", path, exc) from None
        return True

    async def quarantine(self, problem: StoredProblem) -> str:
        """Move the unreadable file to ``.quarantine/`` (never deleted); return its new path.
        A stray file (``check``) holds no session: it is removed."""
        source = Path(problem.where)
        if problem.stray:
            removed = self._remove_stray(source)
            return f"nowhere: {source} removed" if removed else f"nowhere: {source} kept (in use)"
        if source.parent != self.directory or not source.name.endswith(SUFFIX):
            raise StorageError(f"{problem.where} is not a session file of {self.directory}")
        async with self._writing(problem.session_id):
            entry = self._inspect(source.name, summarise=True)
            if entry is None or not entry.summary.error:
                raise StorageError(
                    f"{source} is no longer unreadable", fix="check the storage again"
                )
            aside = self.directory / QUARANTINE_DIRECTORY
            target = aside / f"{source.name}.{now_ms()}.{os.urandom(3).hex()}"
            try:
                make_private_dirs(aside)
                os.rename(source, target)
                self._sync_directory()
            except OSError as exc:
                raise self._storage_error("move aside", source, exc) from None
        return str(target)

    async def info(self) -> dict[str, Any]:
        if not self.directory.is_dir():
            self.nothing_to_list("JSON session directory")
        entries = self._inspect_all(summarise=True)
        return {
            "backend": self.name,
            "location": self.location,
            "sessions": sum(1 for entry in entries if not entry.summary.error),
            "unreadable": sum(1 for entry in entries if entry.summary.error),
        }
