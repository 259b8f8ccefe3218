"""Reading other tools' histories for ``sessions import --format chatgpt|llm``."""

from __future__ import annotations

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
