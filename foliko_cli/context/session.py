"""The session layer: all per-session state lives in one SessionContext."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from foliko_cli.common.clock import now_ms
from foliko_cli.errors import ConflictError
from foliko_cli.messages.exact_json import copied

if TYPE_CHECKING:
    from foliko_cli.messages.record import SessionRecord
    from foliko_cli.storage.base import SessionStorageAdapter

_MISSING = object()


def new_compression_state() -> dict[str, Any]:
    return {"last_compressed_at": None, "last_token_count": 0, "pending_compression": False}


class SessionCheckpoint(NamedTuple):
    """What a failed turn restores, so that it leaves no trace (R1).

    It keeps the message list itself and its length, not a copy: a turn only
    appends to that list or swaps in a new one (``replace_messages``), so
    truncating the original restores it in O(1) whatever the history's size.
    """

    messages: list[dict[str, Any]]
    message_count: int
    message_offset: int
    revision: int
    variables: dict[str, Any]
    metadata: dict[str, Any]
    compression_state: dict[str, Any]


class SessionContext:
    """Messages, variables and metadata of one session.

    ``revision`` is the storage revision the in-memory state matches; the chat
    engine reloads when the stored revision has moved (another process wrote).
    ``messages`` may hold only the end of the history (what a turn sends, see
    ``load_recent``): ``message_offset`` earlier messages stay in storage.
    """

    def __init__(
        self,
        session_id: str,
        storage: SessionStorageAdapter | None = None,
        *,
        metadata: dict[str, Any] | None = None,
    ):
        now = now_ms()
        self.session_id = session_id
        self.storage = storage
        self.messages: list[dict[str, Any]] = []
        self.message_offset = 0
        self.variables: dict[str, Any] = {}
        self.metadata: dict[str, Any] = {
            "created_at": now,
            "last_active": now,
            "message_count": 0,
            "compression_count": 0,
            **(metadata or {}),
        }
        self.compression_state: dict[str, Any] = new_compression_state()
        self.custom_data: dict[str, Any] = {}
        self.fragment_texts: dict[str, str] = {}
        """The texts of the fragments its messages refer to, by hash, as far as loaded
        (messages/fragments.py)."""
        self.history_loaded = False
        self.revision = 0

    # messages

    def get_messages(self) -> list[dict[str, Any]]:
        return self.messages

    def add_message(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self._recount()
        self.metadata["last_active"] = now_ms()

    def add_messages(self, messages: list[dict[str, Any]]) -> None:
        for message in messages:
            self.add_message(message)

    def replace_messages(self, messages: list[dict[str, Any]]) -> None:
        self.messages = list(messages)
        self.message_offset = 0
        self._recount()

    def _recount(self) -> None:
        """``metadata["message_count"]`` is derived: the history's length, here only."""
        self.metadata["message_count"] = self.message_offset + len(self.messages)

    def clear_messages(self) -> None:
        self.replace_messages([])

    # variables

    def get_variable(self, key: str, default: Any = None) -> Any:
        return self.variables.get(key, default)

    def set_variable(self, key: str, value: Any) -> None:
        self.variables[key] = value

    def delete_variable(self, key: str) -> bool:
        return self.variables.pop(key, _MISSING) is not _MISSING

    def all_variables(self) -> dict[str, Any]:
        return dict(self.variables)

    # metadata

    def touch(self) -> None:
        self.metadata["last_active"] = now_ms()

    def summary(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "message_count": self.metadata["message_count"],
            "created_at": self.metadata["created_at"],
            "last_active": self.metadata["last_active"],
            "variables": self.all_variables(),
        }

    # turn rollback

    def checkpoint(self) -> SessionCheckpoint:
        return SessionCheckpoint(
            messages=self.messages,
            message_count=len(self.messages),
            message_offset=self.message_offset,
            revision=self.revision,
            variables=copied(self.variables),
            metadata=dict(self.metadata),
            compression_state=copied(self.compression_state),
        )

    def restore(self, checkpoint: SessionCheckpoint) -> None:
        del checkpoint.messages[checkpoint.message_count :]
        self.messages = checkpoint.messages
        self.message_offset = checkpoint.message_offset
        self.variables = copied(checkpoint.variables)
        self.metadata = dict(checkpoint.metadata)
        self.compression_state = copied(checkpoint.compression_state)
        self.revision = checkpoint.revision

    # storage

    def to_record(self) -> SessionRecord:
        from foliko_cli.messages.record import SessionRecord

        return SessionRecord(
            session_id=self.session_id,
            messages=list(self.messages),
            variables=dict(self.variables),
            metadata=dict(self.metadata),
            compression_state=dict(self.compression_state),
            revision=self.revision,
            first_seq=self.message_offset,
        )

    def apply_record(self, record: SessionRecord) -> None:
        self.messages = list(record.messages)
        self.message_offset = record.first_seq
        self.variables = dict(record.variables)
        self.metadata = {**self.metadata, **record.metadata}
        self._recount()
        self.compression_state = {**new_compression_state(), **record.compression_state}
        self.revision = record.revision
        self.history_loaded = True

    def _require_storage(self) -> SessionStorageAdapter:
        if self.storage is None:
            raise RuntimeError(f"session {self.session_id!r} has no storage configured")
        return self.storage

    async def load_from_storage(self, *, recent_only: bool = False) -> bool:
        """Load the session; with ``recent_only``, just the messages a turn sends."""
        from foliko_cli.storage.capabilities import load_recent

        storage = self._require_storage()
        if recent_only:
            record = await load_recent(storage, self.session_id)
        else:
            record = await storage.load(self.session_id)
        if record is None:
            self.history_loaded = True
            return False
        self.apply_record(record)
        return True

    async def save_to_storage(self) -> None:
        """Replace the stored session with this one (its whole history), if it is
        still the revision this context read (0: it must not exist yet): a write
        by anyone else meanwhile is a ConflictError (SessionExistsError), never
        lost."""
        storage = self._require_storage()
        record = self.to_record()
        if self.message_offset:
            stored = await storage.load(self.session_id)
            if stored is not None and stored.revision != self.revision:
                raise ConflictError(self.session_id, self.revision, stored.revision)
            earlier = stored.messages[: self.message_offset] if stored else []
            record.messages = earlier + record.messages
            record.first_seq = 0
        self.revision = await storage.save(record, expected_revision=self.revision)

    async def delete_from_storage(self) -> bool:
        return await self._require_storage().delete(self.session_id)
