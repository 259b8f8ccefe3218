"""The key store (``foliko keys``): API keys by name in ``keys.json`` in foliko's home.

The file has llm's format (``llm keys path``): one JSON object of names to
keys, with a ``"// Note"`` entry that is no key, so llm's file works here and
foliko's there. A provider reads it only when neither the environment nor the
config gives a key: the key named for the provider's variable, as llm names
them — ``openai`` for ``OPENAI_API_KEY``, ``anthropic`` for
``ANTHROPIC_API_KEY``, ``deepseek`` for an alias's ``api_key_env =
"DEEPSEEK_API_KEY"``.

The file is created owner-only (0600, in a 0700 home) and replaced whole: a
private temporary file, synced, renamed over it (the file a symbolic link
points to, when it is one), under a lock so that two writers keep both keys.
A key never appears in an error.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from foliko_cli.errors import StorageError, UsageError

FILE = "keys.json"
NOTE = "// Note"
NOTE_TEXT = "This file stores secret API credentials. Do not share!"
NAME = r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}"
VARIABLE_SUFFIX = "_API_KEY"
VARIABLE_NAME = r"[a-z0-9][a-z0-9_]*"


def key_name(variable: str | None) -> str | None:
    """The stored key that stands in for ``variable`` (``openai`` for ``OPENAI_API_KEY``);
    None for a variable not named ``NAME_API_KEY``."""
    if variable and variable.endswith(VARIABLE_SUFFIX) and len(variable) > len(VARIABLE_SUFFIX):
        return variable.removesuffix(VARIABLE_SUFFIX).lower()
    return None


def variable_for(name: str) -> str | None:
    """The variable key ``name`` stands in for (``OPENAI_API_KEY`` for ``openai``);
    None for a name no provider reads (upper case, ``.`` or ``:`` in it)."""
    return f"{name.upper()}{VARIABLE_SUFFIX}" if re.fullmatch(VARIABLE_NAME, name) else None


def check_name(name: str) -> str:
    if not re.fullmatch(NAME, name):
        raise UsageError(
            f"{name!r} cannot name a key: use up to 100 letters, digits, '_', '.', ':' or '-', "
            "starting with a letter or digit",
            fix="e.g. openai",
        )
    return name


def check_value(value: str) -> str:
    """The key as given, without the line break a pipe or a paste adds."""
    value = value.strip()
    if not value:
        raise UsageError("the key is empty", fix="give the key itself")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise UsageError(
            "the key holds a line break or another control character",
            fix="give the key alone, on one line",
        )
    return value


class KeyStore(Mapping[str, str]):
    """The keys of ``home/keys.json`` by name, read once, on first use."""

    def __init__(self, home: str | os.PathLike[str]):
        self.path = Path(home) / FILE
        self._keys: dict[str, str] | None = None

    def __getitem__(self, name: str) -> str:
        return self._read()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._read()))

    def __len__(self) -> int:
        return len(self._read())

    def _read(self) -> dict[str, str]:
        if self._keys is None:
            self._keys = {k: v for k, v in self._load().items() if k != NOTE}
        return self._keys

    def _load(self) -> dict[str, str]:
        """The file's whole object ({} when there is none); a broken one names itself."""
        import json

        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise StorageError(
                f"cannot read the key store {self.path} ({reason})",
                fix="fix its permissions, or move it away and set the keys again",
            ) from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            where = f"line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else "its text"
            raise self._broken(f"is not JSON ({where})") from None
        if not isinstance(data, dict):
            raise self._broken("is not a JSON object of names to keys")
        for name, value in data.items():
            if name != NOTE and not isinstance(value, str):
                raise self._broken(f"holds a key {name!r} that is not a string")
        return data

    def _broken(self, what: str) -> UsageError:
        return UsageError(
            f"the key store {self.path} {what}",
            fix="fix the file, or move it away and set the keys again",
        )

    def set(self, name: str, value: str) -> None:
        """Store ``value`` as key ``name`` (replacing one of that name); the other
        keys are kept, and a file that cannot be read is never written over."""
        check_name(name)
        value = check_value(value)
        with self._locked():
            data = self._load() or {NOTE: NOTE_TEXT}
            data[name] = value
            self._write(data)
            self._keys = None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        import fcntl

        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            descriptor = os.open(
                self.path.with_name(f".{FILE}.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600
            )
        except OSError as exc:
            raise self._unwritable(exc) from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)

    def _write(self, data: dict[str, str]) -> None:
        import json

        target = self.path.resolve()  # a linked store (llm's file) stays linked
        temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        text = json.dumps(data, indent=2) + "\n"
        try:
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w", encoding="utf-8") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, target)
            directory = os.open(target.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        except OSError as exc:
            temporary.unlink(missing_ok=True)
            raise self._unwritable(exc) from None

    def _unwritable(self, exc: OSError) -> StorageError:
        return StorageError(
            f"cannot write the key store {self.path} ({exc.strerror or exc}); nothing was changed",
            fix="free space or fix the permissions, then set the key again",
        )
