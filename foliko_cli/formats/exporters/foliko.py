"""foliko's own format (``sessions export``, the default): each session's public
JSON form (as ``sessions show --json`` prints it), in a fixed order: the
record's fields in record_to_dict's order, the metadata in the order an
import fills it in, and messages and variables with their keys in the order
they were stored (every backend keeps it, and a model sent the history again
gets the same bytes, which keeps its prompt cache). So exporting, importing
into an empty store and exporting again gives the same bytes. A JSON array
on one line, or NDJSON, one session a line; the foliko importer reads both
back whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from foliko_cli.messages.public import record_to_dict
from foliko_cli.messages.record import SessionRecord, filled_metadata
from foliko_cli.messages.usage import with_usage


def document(record: SessionRecord) -> dict[str, Any]:
    """The session as exported: everything it holds, its metadata filled in as an
    import fills it (so it reads back to the same), and its usage totals."""
    data = record_to_dict(record)
    data["metadata"] = filled_metadata(record.metadata, record.saved_at, len(record.messages))
    return with_usage(data, record)


def dumps(record: SessionRecord) -> str:
    return orjson.dumps(document(record)).decode()


def lines(records: Iterable[SessionRecord]) -> Iterator[str]:
    yield "[" + ",".join(dumps(record) for record in records) + "]"


def ndjson_lines(records: Iterable[SessionRecord]) -> Iterator[str]:
    return (dumps(record) for record in records)
