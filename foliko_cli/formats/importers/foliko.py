"""foliko's own export (``sessions export``): a JSON array, one JSON object, or NDJSON
of session records. A file that holds anything else is refused whole: an
export is read back exactly, or not at all, ``saved_at`` included (the
session comes back as it was, as old as it was). A document of the original
foliko (the seed's ``sessionId`` form) is another tool's history: it is
imported as a use, saved at the import's time."""

from __future__ import annotations

from typing import Any

import orjson

from foliko_cli.errors import UsageError
from foliko_cli.formats.importers.base import Imported, Source
from foliko_cli.messages.public import record_from_dict
from foliko_cli.messages.record import SessionRecord

NAME = "foliko"
LABEL = "a foliko export (sessions export)"
FILES = ("*.json", "*.ndjson")
FIX = "export it again"


def sniff(source: Source) -> bool:
    """Never asked: a file no other format claims is read as foliko's."""
    return False


def _items(text: str, source: str) -> list[Any]:
    try:
        document = orjson.loads(text)
        return document if isinstance(document, list) else [document]
    except orjson.JSONDecodeError:
        try:
            return [orjson.loads(line) for line in text.splitlines() if line.strip()]
        except orjson.JSONDecodeError as exc:
            raise UsageError(f"{source} is not JSON or NDJSON ({exc})", fix=FIX) from None


def read(source: Source, imported: Imported) -> None:
    from foliko_cli.storage.migrate import same_content

    try:
        text = source.data().decode("utf-8", errors="strict")
    except UnicodeDecodeError:
        raise UsageError(f"{source.name} is not valid UTF-8", fix=FIX) from None
    items = _items(text, source.name) if text.strip() else []
    records: dict[str, SessionRecord] = {}
    for number, item in enumerate(items, start=1):
        try:
            record = record_from_dict(item)
        except ValueError as exc:
            raise UsageError(
                f"{source.name}: session #{number} is invalid: {exc}", fix=FIX
            ) from None
        if "sessionId" in item:
            record.saved_at = 0
        earlier = records.get(record.session_id)
        if earlier is not None and not same_content(earlier, record):
            raise UsageError(
                f"{source.name} holds session {record.session_id!r} twice with different "
                "content; nothing imported",
                fix="keep one copy",
            )
        records[record.session_id] = record
    imported.records.extend(records.values())
