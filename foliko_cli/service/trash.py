"""The trash as operations: what delete, prune, clear, rewind, a reset or a
replacing import removed, kept for ``trash_keep`` ms, listed, restored and
emptied (the storage side is ``storage.trash``).

Every move in or out of the trash holds the locks of the sessions it
touches. Entries past the undo window are purged lazily: by every trash
operation, and by a delete or prune (at most once a minute per service, so
a server deleting often does not list the store each time).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from foliko_cli.common.clock import now_ms
from foliko_cli.errors import (
    CorruptSessionError,
    NotInTrashError,
    SessionNotFoundError,
    UsageError,
)
from foliko_cli.messages.ids import check_session_id, is_internal
from foliko_cli.messages.record import SessionRecord, SessionState
from foliko_cli.service.base import ServiceBase
from foliko_cli.storage import capabilities

if TYPE_CHECKING:
    from foliko_cli.service.forgetting import ForgetReceipt
    from foliko_cli.storage.trash import TrashEntry

T = TypeVar("T")

DEFAULT_KEEP_MS = 30 * 86_400_000
PURGE_EVERY_MS = 60_000


class TrashMixin(ServiceBase):
    """The trash of this service's storage."""

    def _keeps_trash(self, session_id: str) -> bool:
        """Whether removing ``session_id`` keeps it: the trash is on and the
        session is not one of foliko's own (a trash entry above all)."""
        return self.trash_keep > 0 and not is_internal(session_id)

    async def _remove(self, session_id: str, reason: str, *, keep: bool = True) -> bool:
        """Under the session's lock: move it to the trash (delete it when the
        trash is off or not ``keep``); False when there was none. A session that
        cannot be read is deleted outright: there is no record to keep."""
        if not (keep and self._keeps_trash(session_id)):
            return await self.storage.delete(session_id)
        from foliko_cli.storage import trash

        try:
            await trash.move(self.storage, session_id, reason)
        except SessionNotFoundError:
            return False
        except CorruptSessionError:
            return await self.storage.delete(session_id)
        return True

    async def _rewrite(
        self, record: SessionRecord, reason: str, write: Callable[[], Awaitable[T]]
    ) -> T:
        """Under the session's lock: copy ``record`` (as loaded) to the trash, then
        run ``write``, a compare-and-set on ``record.revision``; a failed write
        drops the copy again."""
        from foliko_cli.storage import trash

        entry = None
        if self._keeps_trash(record.session_id):
            entry = await trash.keep_copy(self.storage, record, reason)
        try:
            return await write()
        except BaseException:
            if entry is not None:
                await trash.discard(self.storage, entry)
            raise

    async def list_trash(self) -> list[TrashEntry]:
        """What the trash holds, newest first (expired entries are purged first)."""
        from foliko_cli.storage import trash

        await self._purge_trash(force=True)
        return await trash.entries(self.storage, counted=True)

    async def restore_session(self, name: str, *, as_id: str | None = None) -> TrashEntry:
        """Move a session back out of the trash, as ``as_id`` or its own name:
        ``name`` is a session id (its latest removal) or an entry id. A name that
        is taken is SessionExistsError; restoring is a use (``saved_at`` now)."""
        from foliko_cli.storage import trash

        check_session_id(name)
        if as_id is not None:
            check_session_id(as_id)
        await self._purge_trash(force=True)
        entry = _find(await trash.entries(self.storage, counted=True), name)
        target = as_id or entry.session_id
        if is_internal(target):
            raise UsageError(
                f"cannot restore into {target!r}: names under .foliko/ are foliko's own",
                fix="give another name",
            )
        first, second = sorted((target, entry.stored_id))

        async def work() -> None:
            async with self.framework.hold_session(second, self.timeout):
                try:
                    await trash.restore(self.storage, entry, target)
                except SessionNotFoundError as exc:
                    if exc.session_id != entry.stored_id:
                        raise
                    raise NotInTrashError(name, gone=True) from None
                await self._mark_used(target)

        await self._held(first, work)
        self.framework.destroy_session_context(target)
        return entry

    async def forget(
        self,
        session_ids: list[str],
        *,
        messages: list[str] | tuple[str, ...] = (),
        dry_run: bool = False,
    ) -> ForgetReceipt:
        """Remove the sessions (or, with ``messages``, those of one session: each
        ``N`` or ``N..M``, positions from 0 as a search's ``seq``) for good, with
        every copy foliko keeps (forgetting.py), in one step of the storage that
        also writes the receipt; ``dry_run`` only says what would go. An
        unknown session (neither stored nor in the trash) is SessionNotFoundError."""
        import contextlib

        from foliko_cli.service import forgetting

        spans = forgetting.parse_spans(messages)
        forgetting.check_request(session_ids, spans)
        wanted = list(dict.fromkeys(session_ids))
        while True:
            copies = await forgetting.copies_of(self.storage, set(wanted))
            held = _ids_of(wanted, copies)
            async with contextlib.AsyncExitStack() as stack:
                for stored in held:
                    await stack.enter_async_context(
                        self.framework.hold_session(stored, self.timeout)
                    )
                copies = await forgetting.copies_of(self.storage, set(wanted))
                if not set(_ids_of(wanted, copies)) <= set(held):
                    continue  # a copy appeared meanwhile: hold it too
                receipt, records, expected, deletions = await forgetting.plan(
                    self.storage, wanted, spans, copies
                )
                if not dry_run:
                    await self.storage.forget(records, deletions, expected_revisions=expected)
            break
        for session_id in wanted:
            self.framework.destroy_session_context(session_id)
        return receipt._replace(dry_run=dry_run)

    async def forget_receipts(self) -> list[ForgetReceipt]:
        """The receipts of every forget in this store, oldest first."""
        from foliko_cli.service import forgetting

        return await forgetting.receipts(self.storage)

    async def _mark_used(self, session_id: str) -> None:
        """Stamp the session's ``saved_at`` (what prune goes by) without changing it."""
        state = await capabilities.load_state(self.storage, session_id)
        if state is not None:
            kept = SessionState(state.variables, state.metadata, state.compression_state)
            await self.storage.append(session_id, [], kept, expected_revision=state.revision)

    async def empty_trash(self, *, older_than_ms: int | None = None) -> list[TrashEntry]:
        """Remove for good every entry (with ``older_than_ms``, those removed at least
        that long ago), and any past the undo window; return what went."""
        from foliko_cli.storage import trash

        purged = await self._purge_trash(force=True)
        cutoff = None if older_than_ms is None else now_ms() - older_than_ms
        chosen = [
            entry
            for entry in await trash.entries(self.storage)
            if cutoff is None or entry.removed_at <= cutoff
        ]
        return purged + await self._discard(chosen)

    async def _purge_trash(self, *, force: bool = False) -> list[TrashEntry]:
        now = now_ms()
        if not force and now - self._trash_purged_at < PURGE_EVERY_MS:
            return []
        self._trash_purged_at = now
        from foliko_cli.storage import trash

        entries = await trash.entries(self.storage)
        return await self._discard([e for e in entries if e.expires_at(self.trash_keep) <= now])

    async def _discard(self, entries: list[TrashEntry]) -> list[TrashEntry]:
        from foliko_cli.storage import trash

        gone = []
        for entry in entries:
            if await self._held(
                entry.stored_id, functools.partial(trash.discard, self.storage, entry)
            ):
                gone.append(entry)
        return gone


def _ids_of(
    session_ids: list[str], copies: dict[str, tuple[list[TrashEntry], list[str]]]
) -> list[str]:
    """Every stored id a forget of ``session_ids`` holds, in the one global order."""
    found = set(session_ids)
    for entries, kept_by_server in copies.values():
        found.update(entry.stored_id for entry in entries)
        found.update(kept_by_server)
    return sorted(found)


def _find(entries: list[TrashEntry], name: str) -> TrashEntry:
    """The latest entry of session ``name``, else the entry whose id is ``name``."""
    for entry in entries:  # newest first
        if entry.session_id == name:
            return entry
    for entry in entries:
        if entry.entry_id == name:
            return entry
    raise NotInTrashError(name)
