"""Markdown transcripts (``sessions show``'s view, transcript.py, with where the
model's view begins marked), several sessions in one document separated by
rules: for reading, not importable."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from foliko_cli.formats.transcript import markdown
from foliko_cli.messages.record import SessionRecord, covered_messages


def lines(records: Iterable[SessionRecord]) -> Iterator[str]:
    for number, record in enumerate(records):
        if number:
            yield ""
            yield "---"
            yield ""
        yield from markdown(record, view_start=covered_messages(record, len(record.messages)))
