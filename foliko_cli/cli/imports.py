"""Reading other tools' histories for ``sessions import --format chatgpt|llm``."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson

from foliko_cli.errors import UsageError
from foliko_cli.importers import Imported, parse_chatgpt, parse_llm
from foliko_cli.storage.record import SessionRecord


def _summary(imported: Imported) -> str:
    """What the import summary adds: the messages left out, when any were."""
    extra = ""
    if imported.dropped_branch_messages:
        extra += f", dropped {imported.dropped_branch_messages} message(s) on other branches"
    if imported.skipped_messages:
        extra += f", left out {imported.skipped_messages} hidden, system or tool message(s)"
    return extra


def read_chatgpt(data: bytes, source: str) -> tuple[list[SessionRecord], str]:
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise UsageError(
            f"{source} is not JSON ({exc})", fix="give the conversations.json of a ChatGPT export"
        ) from None
    imported = parse_chatgpt(document, source)
    return imported.records, _summary(imported)


def read_llm(source: str) -> tuple[list[SessionRecord], str]:
    path = Path(source)
    if source == "-" or not path.is_file():
        raise UsageError(f"{source} is not a file", fix="point at llm's logs.db (llm logs path)")
    imported = parse_llm(path, source)
    return imported.records, _summary(imported)


def read_foreign(fmt: str, source: str) -> tuple[list[SessionRecord], str]:
    """The records of ``source`` (a path, or - for stdin with chatgpt) in ``fmt``,
    and what the import summary adds about the messages left out."""
    if fmt == "llm":
        return read_llm(source)
    try:
        data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {source}: {exc.strerror}", fix="check the path") from None
    return read_chatgpt(data, "stdin" if source == "-" else source)
