"""Fragments (llm's ``-f`` and ``--sf``): texts put before a user message or in the
system prompt, stored once by content and referenced wherever they are used.

A message that uses fragments keeps its own text in ``content`` and, in
``fragments``, one reference per fragment in order: ``{"sha256", "source",
"size"}`` (the SHA-256 of the text's UTF-8, where it came from, its size in
bytes). The session's system fragments are references in
``metadata["system_fragments"]``. The texts themselves are kept once each by
the storage backend (``put_fragments``/``get_fragments``, storage/base.py);
a backend that does not keep them gets the text inline, as the reference's
``content``, which is also how an export carries them (once per session).

The model is sent what llm sends: the fragments' texts, then the message's
own text, joined by a line break; the system prompt is the system fragments
then the session's own prompt, each stripped, joined by a blank line. A text
that can no longer be found (or no longer has its hash) is sent as a line
saying so, never silently left out.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from foliko_cli.common.redaction import redact_url
from foliko_cli.errors import FragmentError, FragmentFetchError, Hint

MAX_BYTES = 4 * 1024 * 1024
"""The largest fragment foliko takes (a file, a URL's body, stdin)."""
STDIN = "-"
SYSTEM_KEY = "system_fragments"
KEY = "fragments"


def digest(text: str) -> str:
    """The key a fragment is stored under: the SHA-256 of its UTF-8, in hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Fragment(NamedTuple):
    """A fragment's text and where it came from (a path, a URL, ``-``, an alias)."""

    text: str
    source: str

    @property
    def sha256(self) -> str:
        return digest(self.text)

    def ref(self) -> dict[str, Any]:
        """What a message keeps of it."""
        return {
            "sha256": self.sha256,
            "source": self.source,
            "size": len(self.text.encode("utf-8")),
        }


def from_bytes(data: bytes, source: str, label: str | None = None) -> Fragment:
    """``data`` as a fragment's text; FragmentError naming ``label`` when it is too
    large or not UTF-8 text."""
    label = label or source
    if len(data) > MAX_BYTES:
        raise FragmentError(
            f"fragment {label} is larger than the limit of {MAX_BYTES:,} bytes",
            fix="use a part of it",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\x00" in text:
        raise FragmentError(
            f"fragment {label} is not UTF-8 text", fix="use a text file (or attach an image)"
        )
    return Fragment(text, source)


def read_file(path: str | os.PathLike[str]) -> Fragment:
    """A file's text as a fragment; its source is its absolute path (as llm keeps it)."""
    target = Path(path).expanduser()
    try:
        resolved = target.resolve(strict=True)
        if not resolved.is_file():
            raise FragmentError(f"fragment {path} is not a file", fix="name a file")
        with open(resolved, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise FragmentError(
            f"fragment {path} not found: no such file, URL or saved fragment",
            fix="check the path, or the names of the saved fragments",
            hint=Hint.FRAGMENTS,
        ) from None
    except OSError as exc:
        raise FragmentError(
            f"cannot read fragment {path}: {exc.strerror or exc}",
            fix="check the file and its permissions",
        ) from None
    return from_bytes(data, str(resolved), label=str(path))


def is_url(value: str) -> bool:
    return value.startswith(("http://", "https://"))


async def fetch(url: str, timeout: float) -> Fragment:
    """An http(s) URL's body as a fragment: FragmentFetchError when the network or
    the server fails, FragmentError when the address or its content is at fault."""
    from foliko_cli.messages.attachments import DownloadFailed, download

    shown = redact_url(url)
    try:
        data = await download(url, timeout, MAX_BYTES)
    except DownloadFailed as exc:
        if exc.network:
            raise FragmentFetchError(
                f"cannot fetch fragment {shown}: {exc}", fix="check the address and the network"
            ) from None
        raise FragmentError(
            f"cannot fetch fragment {shown}: {exc}", fix="check the address"
        ) from None
    return from_bytes(data, url, label=shown)


# references


def refs_of(holder: Mapping[str, Any], key: str = KEY) -> list[dict[str, Any]]:
    """The well-formed references ``holder`` (a message, or metadata) keeps under ``key``."""
    found = holder.get(key)
    if type(found) is not list:
        return []
    return [r for r in found if type(r) is dict and type(r.get("sha256")) is str]


def hashes_in(messages: Iterable[Mapping[str, Any]], metadata: Mapping[str, Any]) -> set[str]:
    """Every fragment the messages and the session's system prompt refer to."""
    found = {r["sha256"] for r in refs_of(metadata, SYSTEM_KEY)}
    for message in messages:
        if KEY in message:
            found.update(r["sha256"] for r in refs_of(message))
    return found


def verified(found: Mapping[str, str]) -> dict[str, str]:
    """The texts a backend returned whose hash is their key (any other is damaged
    and is treated as missing)."""
    return {key: text for key, text in found.items() if digest(text) == key}


def _texts(refs: Sequence[Mapping[str, Any]], texts: Mapping[str, str]) -> Iterator[str]:
    for ref in refs:
        text = ref.get("content")
        if type(text) is not str:
            text = texts.get(ref["sha256"])
        yield text if text is not None else unavailable(ref)


def unavailable(ref: Mapping[str, Any]) -> str:
    """What the model is sent in place of a fragment that cannot be found."""
    return f"[fragment {ref.get('source')} (sha256 {str(ref.get('sha256'))[:12]}) is not available]"


def expanded(message: Mapping[str, Any], texts: Mapping[str, str]) -> str:
    """The user message's text as the model is sent it: its fragments, then its own text."""
    own = str(message.get("content") or "")
    parts = list(_texts(refs_of(message), texts))
    return "\n".join(parts + ([own] if own else []))


def system_prompt(
    system: str | None, metadata: Mapping[str, Any], texts: Mapping[str, str]
) -> str | None:
    """The session's system prompt with its system fragments before it (as llm
    combines them); ``system`` as it is when there are none."""
    refs = refs_of(metadata, SYSTEM_KEY)
    if not refs:
        return system
    bits = [bit.strip() for bit in [*_texts(refs, texts), system or ""]]
    return "\n\n".join(bit for bit in bits if bit) or None


# export and import: inline texts, and taking them out again


def inlined(
    messages: list[dict[str, Any]], metadata: dict[str, Any], texts: Mapping[str, str]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Copies of ``messages`` and ``metadata`` whose first reference to each fragment
    carries its text (``content``): a session that holds its fragments itself."""
    seen: set[str] = set()

    def carried(refs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for ref in refs:
            key = ref["sha256"]
            if key not in seen and key in texts and "content" not in ref:
                ref = {**ref, "content": texts[key]}
            seen.add(key)
            out.append(ref)
        return out

    if refs_of(metadata, SYSTEM_KEY):
        metadata = {**metadata, SYSTEM_KEY: carried(refs_of(metadata, SYSTEM_KEY))}
    messages = [{**m, KEY: carried(refs_of(m))} if refs_of(m) else m for m in messages]
    return messages, metadata


def carried_texts(
    messages: Iterable[Mapping[str, Any]], metadata: Mapping[str, Any]
) -> dict[str, str]:
    """The texts references carry inline whose hash is theirs."""
    found: dict[str, str] = {}
    holders: list[tuple[Mapping[str, Any], str]] = [(metadata, SYSTEM_KEY)]
    holders += [(m, KEY) for m in messages]
    for holder, key in holders:
        for ref in refs_of(holder, key):
            text = ref.get("content")
            if type(text) is str:
                found[ref["sha256"]] = text
    return verified(found)


def as_sent(messages: list[dict[str, Any]], metadata: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``messages`` of an exported session (its texts inline) with each user
    message's content as the model was sent it: for another tool's format,
    which has no fragments."""
    if not any(KEY in m for m in messages):
        return messages
    texts = carried_texts(messages, metadata)
    return [{**m, "content": expanded(m, texts)} if refs_of(m) else m for m in messages]


def outlined(
    messages: list[dict[str, Any]], metadata: dict[str, Any]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Copies whose references carry no text (once the texts are stored)."""

    def bare(refs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in ref.items() if k != "content"} for ref in refs]

    if refs_of(metadata, SYSTEM_KEY):
        metadata = {**metadata, SYSTEM_KEY: bare(refs_of(metadata, SYSTEM_KEY))}
    messages = [{**m, KEY: bare(refs_of(m))} if refs_of(m) else m for m in messages]
    return messages, metadata


def describe(ref: Mapping[str, Any]) -> str:
    """``docs.md (sha256 3f2a9c1b0e4d, 12.3 kB)``, for ``sessions show``."""
    size = ref.get("size", 0) if type(ref.get("size")) is int else 0
    shown = f"{size:,} B" if size < 1000 else f"{size / 1000:,.1f} kB"
    if size >= 1_000_000:
        shown = f"{size / 1_000_000:,.1f} MB"
    return f"{ref.get('source')} (sha256 {str(ref.get('sha256'))[:12]}, {shown})"
