"""A session row and its message bodies to one canonical record, checked, or a
CorruptSessionError: the mapping every backend that stores a session as state
columns plus message bodies shares (``record.record_from_parts``)."""

from __future__ import annotations

from foliko_cli.messages.stored import record_from_parts as record_from_row

__all__ = ["RECORD_COLUMNS", "record_from_row"]

RECORD_COLUMNS = "variables, metadata, compression_state, updated_at, revision"
