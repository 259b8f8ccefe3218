"""What a turn's fragments are (messages/fragments.py), and the fragments saved
under a name (llm's aliases).

A fragment is named by an http(s) URL, a saved name, a SHA-256 (of a saved
fragment, or of one the storage keeps), or a file's path, tried in that
order as llm does; a ``Fragment`` is taken as it is (stdin, read by the
caller). Each becomes a reference carrying its text, which the turn stores
once (storage/base.py, rule 10).

Saved fragments live in the user's home, whatever the storage::

    fragments/                0700
      <sha256>.txt            each text once, 0600
      names/<name>.json       {"sha256", "source", "saved_at"}, 0600

A name is up to 100 letters, digits, ``_`` and ``-`` (llm's rule), so it is
its own file name. Each file is written whole (a temporary file, synced,
renamed): no lock is needed, and two saves of one name leave one of them.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from foliko_cli.common.clock import now_ms
from foliko_cli.errors import FragmentError, Hint, StorageError
from foliko_cli.messages import fragments
from foliko_cli.messages.fragments import Fragment

if TYPE_CHECKING:
    from foliko_cli.storage.base import SessionStorageAdapter

NAME = re.compile(r"[A-Za-z0-9_-]{1,100}")
HASH = re.compile(r"[0-9a-f]{64}")
DIRECTORY = "fragments"


class SavedFragment(NamedTuple):
    """One saved fragment: its name, its text's hash and size, where it came from, when."""

    name: str
    sha256: str
    size: int
    source: str
    saved_at: int

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise FragmentError(
            f"{name!r} cannot name a fragment: use up to 100 letters, digits, '_' or '-'",
            fix="e.g. docs",
        )
    return name


class SavedFragments:
    """The fragments saved in ``home`` (see the module docstring)."""

    def __init__(self, home: str | os.PathLike[str]):
        self.directory = Path(home) / DIRECTORY
        self.names = self.directory / "names"

    def _write(self, path: Path, data: bytes) -> None:
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(3).hex()}.tmp")
        try:
            self.names.mkdir(mode=0o700, parents=True, exist_ok=True)
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(descriptor, view) :]
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
            os.replace(temporary, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise StorageError(
                f"cannot save the fragment in {self.directory} ({exc.strerror or exc}); "
                "nothing was changed",
                fix="free space or fix the permissions, then save it again",
            ) from None

    def save(self, name: str, fragment: Fragment) -> SavedFragment:
        """Keep ``fragment`` as ``name`` (replacing the one of that name)."""
        check_name(name)
        key = fragment.sha256
        text_path = self.directory / f"{key}.txt"
        if not text_path.exists():
            self._write(text_path, fragment.text.encode("utf-8"))
        saved = SavedFragment(name, key, fragment.ref()["size"], fragment.source, now_ms())
        entry = {"sha256": key, "source": saved.source, "saved_at": saved.saved_at}
        self._write(self.names / f"{name}.json", orjson.dumps(entry))
        return saved

    def get(self, name: str) -> SavedFragment | None:
        if not NAME.fullmatch(name):
            return None
        path = self.names / f"{name}.json"
        try:
            entry = orjson.loads(path.read_bytes())
            key = entry["sha256"]
            size = (self.directory / f"{key}.txt").stat().st_size
            return SavedFragment(name, key, size, str(entry["source"]), int(entry["saved_at"]))
        except FileNotFoundError:
            if path.exists():  # its text is gone
                raise self._damaged(name, "its text is missing") from None
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise self._damaged(name, str(exc)) from None

    def _damaged(self, name: str, why: str) -> FragmentError:
        return FragmentError(
            f"the saved fragment {name!r} cannot be read ({why})",
            fix="save it again",
            hint=Hint.FRAGMENTS,
        )

    def text(self, saved: SavedFragment) -> str:
        try:
            text = (self.directory / f"{saved.sha256}.txt").read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise self._damaged(saved.name, str(exc)) from None
        if fragments.digest(text) != saved.sha256:
            raise self._damaged(saved.name, "its text no longer has its hash")
        return text

    def all(self) -> list[SavedFragment]:
        try:
            names = sorted(p.name[:-5] for p in self.names.iterdir() if p.name.endswith(".json"))
        except FileNotFoundError:
            return []
        found = [self.get(name) for name in names if not name.startswith(".")]
        return [saved for saved in found if saved is not None]

    def by_hash(self, key: str) -> SavedFragment | None:
        return next((saved for saved in self.all() if saved.sha256 == key), None)

    def remove(self, name: str) -> bool:
        """Forget ``name``; its text goes too when no other name keeps it."""
        saved = self.get(name)
        if saved is None:
            return False
        try:
            (self.names / f"{name}.json").unlink()
            if self.by_hash(saved.sha256) is None:
                (self.directory / f"{saved.sha256}.txt").unlink(missing_ok=True)
        except OSError as exc:
            raise StorageError(
                f"cannot remove the saved fragment {name!r} ({exc.strerror or exc})",
                fix="fix the permissions of " + str(self.directory),
            ) from None
        return True


async def find(
    value: str,
    saved: SavedFragments,
    storage: SessionStorageAdapter,
    timeout: float,
) -> Fragment:
    """The fragment ``value`` names (see the module docstring)."""
    if fragments.is_url(value):
        return await fragments.fetch(value, timeout)
    if value == fragments.STDIN:
        raise FragmentError(
            "the fragment '-' stands for stdin, which is read where the turn is asked for",
            fix="give its text as a Fragment",
        )
    entry = saved.get(value)
    if entry is None and HASH.fullmatch(value):
        entry = saved.by_hash(value)
        if entry is None:
            found = fragments.verified(await storage.get_fragments([value]))
            if value in found:
                return Fragment(found[value], value)
    if entry is not None:
        return Fragment(saved.text(entry), entry.source)
    return fragments.read_file(value)


async def resolved(
    values: Sequence[Any],
    saved: SavedFragments,
    storage: SessionStorageAdapter,
    timeout: float,
) -> list[dict[str, Any]]:
    """The references (carrying their texts) of the fragments ``values`` name; a
    reference already made (a dict) is kept as it is."""
    deadline = time.monotonic() + timeout
    refs = []
    for value in values:
        if isinstance(value, dict):
            refs.append(dict(value))
            continue
        if not isinstance(value, Fragment):
            left = max(1.0, deadline - time.monotonic())
            value = await find(str(value), saved, storage, left)
        refs.append({**value.ref(), "content": value.text})
    return refs
