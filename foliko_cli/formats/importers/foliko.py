"""foliko's own export (``sessions export``): a JSON array, one JSON object, or NDJSON
of session records. A file that holds anything else is refused whole: an
export is read back exactly, or not at all, ``saved_at`` included (the
session comes back as it was, as old as it was). A document of the original
foliko (the seed's ``sessionId`` form) is another tool's history: it is
imported as a use, saved at the import's time."""

from __future__ import annotations

from typing import Any

from foliko_cli.errors import UsageError
from foliko_cli.formats.importers.base import Imported, Source, Unreadable, too_large
from foliko_cli.messages.public import record_from_dict
from foliko_cli.messages.record import SessionRecord

NAME = "foliko"
LABEL = "a foliko export (sessions export)"
FILES = ("*.json", "*.ndjson")
FIX = "export it again"


def sniff(source: Source) -> bool:
    """Never asked: a file no other format claims is read as foliko's."""
    return False


def _items(source: Source) -> list[Any]:
    """The records of a JSON document, or of NDJSON lines; neither is an error."""
    document = source.document()
    if document is not None:
        return document if isinstance(document, list) else [document]
    items = []
    for _number, value in source.lines():
        if isinstance(value, Unreadable):
            utf8 = "UTF-8" in str(value)
            problem = "not valid UTF-8" if utf8 else f"not JSON or NDJSON ({value})"
            raise UsageError(f"{source.name} is {problem}", fix=FIX)
        items.append(value)
    return items


def read(source: Source, imported: Imported) -> None:
    from foliko_cli.storage.migrate import same_content

    records: dict[str, SessionRecord] = {}
    for number, item in enumerate(_items(source), start=1):
        try:
            record = record_from_dict(item)
        except ValueError as exc:
            raise UsageError(
                f"{source.name}: session #{number} is invalid: {exc}", fix=FIX
            ) from None
        oversized = too_large(record.messages)
        if oversized:
            raise UsageError(
                f"{source.name}: session #{number} ({record.session_id!r}): {oversized}; "
                "nothing imported",
                fix="leave that message out of the file",
            )
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
