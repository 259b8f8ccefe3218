"""Managing sessions: read, list, delete, rename, fork, rewind, clear, import,
prune and variables."""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator, Callable
from typing import Any

from foliko_cli.common.clock import now_ms
from foliko_cli.errors import (
    ConflictError,
    CorruptSessionError,
    SessionExistsError,
    SessionNotFoundError,
    UsageError,
    VariableNotSetError,
)
from foliko_cli.messages.ids import check_session_id, is_internal
from foliko_cli.messages.item_numbers import offset_after, offset_of, pinned
from foliko_cli.messages.record import (
    SessionRecord,
    SessionState,
    SessionSummary,
    clear_record,
    new_metadata,
    relabelled,
)
from foliko_cli.messages.stored import content_hash
from foliko_cli.messages.turns import cut_compression, drop_turns
from foliko_cli.service.base import ServiceBase
from foliko_cli.service.common import (
    SORT_KEYS,
    ImportReport,
    PruneReport,
    _no_progress,
    forked,
)
from foliko_cli.storage import capabilities

TAIL_WINDOW = 64
"""How many of the last messages ``session_tail`` reads first."""


class SessionsMixin(ServiceBase):
    """Managing sessions: read, list, delete, rename, fork, rewind, clear, import,
    prune and variables."""

    # sessions

    async def get_session(self, session_id: str) -> SessionRecord:
        check_session_id(session_id)
        record = await self.storage.load(session_id)
        if record is None:
            raise SessionNotFoundError(session_id)
        return record

    async def session_window(
        self, session_id: str, start: int, stop: int | None = None
    ) -> SessionRecord:
        """The session with only ``messages[start:stop]`` (a slice's rules);
        ``first_seq`` says where they start, ``metadata["message_count"]`` how
        many there are: a page of a long history reads the page."""
        check_session_id(session_id)
        record = await capabilities.load_window(self.storage, session_id, start, stop)
        if record is None:
            raise SessionNotFoundError(session_id)
        return record

    async def session_tail(
        self, session_id: str, enough: Callable[[list[dict[str, Any]]], bool]
    ) -> SessionRecord:
        """The session with its last messages, as few as make ``enough(messages)``
        true (windows growing from the end), else all of them: what needs only the
        end of a long history reads the end."""
        size = TAIL_WINDOW
        while True:
            record = await self.session_window(session_id, -size, None)
            if record.first_seq == 0 or enough(record.messages):
                return record
            size *= 8

    async def list_sessions(
        self, *, sort: str = "updated", limit: int | None = None, since: int | None = None
    ) -> list[SessionSummary]:
        """Summaries sorted by ``updated``/``created``/``messages`` (newest or largest
        first) or ``name``; ``since`` keeps sessions updated at or after that ms time.
        foliko's own sessions (``is_internal``) are left out."""
        if sort not in SORT_KEYS:
            raise UsageError(f"unknown sort {sort!r}", fix=f"use one of {', '.join(SORT_KEYS)}")
        summaries = await self.storage.list_summaries()
        summaries = [s for s in summaries if not is_internal(s.session_id)]
        if since is not None:
            summaries = [s for s in summaries if s.updated_at >= since]
        key, reverse = SORT_KEYS[sort]
        summaries.sort(key=key, reverse=reverse)
        return summaries[:limit] if limit is not None else summaries

    async def session_labels(self, session_ids: list[str]) -> dict[str, dict[str, str | None]]:
        """Each session's ``title`` (an import's, or one given) and ``forked_from``
        (the session it was forked from), None when it has none, read without the
        histories; a damaged or vanished session has neither."""
        labels: dict[str, dict[str, str | None]] = {}
        for session_id in session_ids:
            try:
                state = await capabilities.load_state(self.storage, session_id)
            except CorruptSessionError:
                state = None
            metadata = state.metadata if state is not None else {}
            labels[session_id] = {
                key: value if isinstance(value := metadata.get(key), str) and value else None
                for key in ("title", "forked_from")
            }
        return labels

    async def session_ids(self) -> list[str]:
        """Every session's id but foliko's own (``is_internal``), sorted."""
        return sorted(s for s in await self.storage.session_ids() if not is_internal(s))

    async def delete_sessions(
        self,
        session_ids: list[str],
        *,
        trash: bool = True,
        progress: Callable[[int], None] = _no_progress,
    ) -> tuple[list[str], list[str]]:
        """Delete each session (into the trash, when it is on and ``trash``); return
        (deleted, not found). A session that cannot go into the trash because the
        storage is full stays as it was (TrashFullError): only deleting it
        without a copy (``trash=False``) frees the space."""
        from foliko_cli.errors import StorageError, TrashFullError, storage_full

        for session_id in session_ids:
            check_session_id(session_id)
        deleted: list[str] = []
        missing: list[str] = []
        for session_id in sorted(set(session_ids)):
            remove = functools.partial(self._remove, session_id, "delete", keep=trash)
            try:
                existed = await self._held(session_id, remove)
            except StorageError as exc:
                if trash and self._keeps_trash(session_id) and storage_full(exc):
                    raise TrashFullError(session_id, deleted, exc) from None
                raise
            self.framework.destroy_session_context(session_id)
            (deleted if existed else missing).append(session_id)
            progress(1)
        if deleted:
            await self._purge_trash()
        order = {sid: i for i, sid in enumerate(dict.fromkeys(session_ids))}
        return sorted(deleted, key=order.__getitem__), sorted(missing, key=order.__getitem__)

    async def rename_session(self, old_id: str, new_id: str) -> None:
        """Rename ``old_id``; both are held, in one global order, so no two renames
        deadlock, and read under their locks first (``old_id`` whole), so neither is
        moved while damaged."""
        check_session_id(old_id)
        check_session_id(new_id)
        if old_id == new_id:
            raise UsageError(f"session {old_id!r} already has that name", fix="give a new name")
        first, second = sorted((old_id, new_id))

        async def work() -> None:
            async with self.framework.hold_session(second, self.timeout):
                await self.storage.load(old_id)
                await capabilities.load_state(self.storage, new_id)
                await capabilities.rename(self.storage, old_id, new_id)

        await self._held(first, work)
        self.framework.destroy_session_context(old_id)
        self.framework.destroy_session_context(new_id)

    async def fork_session(
        self,
        source_id: str,
        target_id: str,
        *,
        turns: int | None = None,
        upto: int | None = None,
    ) -> SessionRecord:
        """A copy of ``source_id`` named ``target_id``, which must not exist: all
        of it, its first ``turns`` turns, or its first ``upto`` messages."""
        check_session_id(source_id)
        check_session_id(target_id)
        if source_id == target_id:
            raise UsageError(f"cannot fork session {source_id!r} into itself", fix="name a new one")
        first, second = sorted((source_id, target_id))

        async def work() -> SessionRecord:
            async with self.framework.hold_session(second, self.timeout):
                if await self.storage.revision(target_id) is not None:
                    raise SessionExistsError(target_id)
                copy = forked(await self.get_session(source_id), target_id, turns, upto)
                copy.revision = await self.storage.save(copy, expected_revision=0)
                return copy

        return await self._held(first, work)

    async def rewind_session(self, session_id: str, *, turns: int = 1) -> SessionRecord:
        """Remove the last ``turns`` turns (a locked, explicit rewrite of the history);
        the session as it was goes to the trash."""

        def rewind(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
            kept = drop_turns(messages, turns, session_id=session_id)
            return messages[:kept], kept

        return await self._rewritten(session_id, rewind, trash_reason="rewind")

    async def splice_messages(
        self,
        session_id: str,
        position: int,
        count: int,
        replacement: list[dict[str, Any]] | None = None,
        *,
        expected_revision: int | None = None,
    ) -> SessionRecord:
        """Replace the ``count`` messages at ``position`` by ``replacement`` (a locked
        rewrite of the history: the messages after them move). With
        ``expected_revision``, a session that moved since is a ConflictError."""

        def splice(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
            if not 0 <= position <= position + count <= len(messages):
                raise UsageError(
                    f"session {session_id!r} has no messages {position}..{position + count - 1}",
                    fix="name messages it holds",
                )
            kept = [*messages[:position], *(replacement or ()), *messages[position + count :]]
            return kept, position

        return await self._rewritten(session_id, splice, expected_revision)

    async def _rewritten(
        self,
        session_id: str,
        change: Callable[[list[dict[str, Any]]], tuple[list[dict[str, Any]], int]],
        expected_revision: int | None = None,
        *,
        trash_reason: str | None = None,
    ) -> SessionRecord:
        """Rewrite the history under the session's lock: ``change(messages)`` gives
        the new messages and the position from which the compression no longer holds.
        Every message keeps its item number (item_numbers.py).
        With ``trash_reason``, the session as it was is kept in the trash."""
        check_session_id(session_id)

        async def work() -> SessionRecord:
            record = await self.get_session(session_id)
            if expected_revision is not None and record.revision != expected_revision:
                raise ConflictError(session_id, expected_revision, record.revision)
            before = record.revision
            messages, next_number = pinned(record.messages, record.metadata)
            rewritten = SessionRecord(session_id, variables=record.variables, saved_at=now_ms())
            rewritten.messages, unchanged = change(messages)
            rewritten.metadata = {
                **record.metadata,
                **offset_after(next_number, len(rewritten.messages)),
            }
            still = {id(message) for message in rewritten.messages[unchanged:]}
            dropped = [m for m in messages[unchanged:] if id(m) not in still]
            rewritten.compression_state = cut_compression(
                record.compression_state, unchanged, dropped
            )

            async def write() -> int:
                return await self.storage.save(rewritten, expected_revision=before)

            if trash_reason is None:
                rewritten.revision = await write()
            else:
                rewritten.revision = await self._rewrite(record, trash_reason, write)
            return rewritten

        record = await self._held(session_id, work)
        self.framework.destroy_session_context(session_id)
        return record

    async def clear_session(self, session_id: str, *, variables: bool = False) -> SessionRecord:
        """Drop the history; with ``variables``, the variables too. The session as
        it was goes to the trash."""
        check_session_id(session_id)

        async def work() -> SessionRecord:
            record = await self.storage.load(session_id)
            if record is None:
                raise SessionNotFoundError(session_id)
            cleared = clear_record(relabelled(record, session_id), variables=variables)

            async def write() -> int:
                return await self.storage.save(cleared, expected_revision=record.revision)

            cleared.revision = await self._rewrite(record, "clear", write)
            return cleared

        record = await self._held(session_id, work)
        self.framework.destroy_session_context(session_id)
        return record

    async def export_sessions(
        self, session_ids: list[str], *, skip_missing: bool = False
    ) -> AsyncGenerator[SessionRecord, None]:
        """The named sessions, each loaded once, in order; with ``skip_missing``,
        one deleted or renamed meanwhile is left out instead of failing."""
        for session_id in session_ids:
            try:
                yield await self.export_record(session_id)
            except SessionNotFoundError:
                if not skip_missing:
                    raise

    async def export_record(self, session_id: str) -> SessionRecord:
        """The session as an export holds it: the first reference to each fragment
        carries its text (messages/fragments.py), so the export is complete."""
        record = await self.get_session(session_id)
        if "system_fragments" in record.metadata or any("fragments" in m for m in record.messages):
            from foliko_cli.messages import fragments

            wanted = fragments.hashes_in(record.messages, record.metadata)
            texts = fragments.verified(await self.storage.get_fragments(wanted))
            record.messages, record.metadata = fragments.inlined(
                record.messages, record.metadata, texts
            )
        return record

    async def import_sessions(
        self,
        records: list[SessionRecord],
        *,
        on_conflict: str = "skip",
        progress: Callable[[int], None] = _no_progress,
    ) -> ImportReport:
        """Store each record; identical ones are left alone, so re-importing is a no-op."""
        if on_conflict not in ("skip", "replace", "fail"):
            raise UsageError(
                f"unknown on_conflict {on_conflict!r}", fix="use skip, replace or fail"
            )
        report = ImportReport()
        for record in records:
            check_session_id(record.session_id)
        for record in records:
            await self._keep_fragments(record)
        if on_conflict == "fail":
            for record in records:
                existing = await self.storage.load(record.session_id)
                if existing is not None and content_hash(record) != content_hash(existing):
                    report.conflicts.append(record.session_id)
            if report.conflicts:
                return report
        for record in records:
            outcome = await self._held(
                record.session_id, functools.partial(self._import_one, record, on_conflict)
            )
            getattr(report, outcome).append(record.session_id)
            self.framework.destroy_session_context(record.session_id)
            progress(1)
        return report

    async def _keep_fragments(self, record: SessionRecord) -> None:
        """Store the fragment texts an imported session carries, and keep only their
        references (unless the storage keeps no texts)."""
        from foliko_cli.messages import fragments

        texts = fragments.carried_texts(record.messages, record.metadata)
        if texts and await self.storage.put_fragments(texts):
            record.messages, record.metadata = fragments.outlined(record.messages, record.metadata)

    async def _import_one(self, record: SessionRecord, on_conflict: str) -> str:
        """Store one record, deciding under its lock on what is stored now. The
        session's ``saved_at`` (when foliko last used it: what prune goes by) is
        the record's, as a foliko export keeps it, so a session comes back as it
        was; a record without one (another tool's history) is used now, whatever
        the dates inside it. A session it replaces goes to the trash."""
        existing = await self.storage.load(record.session_id)
        if existing is not None and content_hash(record) == content_hash(existing):
            return "unchanged"
        if existing is not None and on_conflict != "replace":
            return "skipped" if on_conflict == "skip" else "conflicts"
        imported = relabelled(record, record.session_id, saved_at=record.saved_at)

        async def write() -> int:
            return await self.storage.save(
                imported, expected_revision=existing.revision if existing else 0
            )

        if existing is None:
            await write()
        else:
            await self._rewrite(existing, "import", write)
        return "imported"

    async def prune(
        self,
        older_than_ms: int,
        *,
        dry_run: bool = False,
        progress: Callable[[int], None] = _no_progress,
        on_total: Callable[[int], None] | None = None,
    ) -> PruneReport:
        """Delete (into the trash, when it is on) the sessions not used for
        ``older_than_ms``: not written by foliko (a turn, an import, a restore),
        whatever the dates of the messages inside.

        Each is re-read under its lock first: one that got a turn meanwhile is
        kept. Unreadable sessions are reported, never deleted; foliko's own
        (``is_internal``: the trash itself) are left alone.
        """
        cutoff = now_ms() - older_than_ms
        report = PruneReport()
        stale = []
        for summary in sorted(await self.storage.list_summaries(), key=lambda s: s.session_id):
            if is_internal(summary.session_id):
                continue
            if summary.error:
                report.unreadable.append(summary.session_id)
            elif summary.updated_at < cutoff:
                stale.append(summary.session_id)
        if dry_run:
            report.deleted = stale
            return report
        if on_total is not None:
            on_total(len(stale))
        for session_id in stale:
            outcome = await self._held(
                session_id, functools.partial(self._prune_one, session_id, cutoff)
            )
            getattr(report, outcome).append(session_id)
            self.framework.destroy_session_context(session_id)
            progress(1)
        if report.deleted:
            await self._purge_trash()
        return report

    async def _prune_one(self, session_id: str, cutoff: int) -> str:
        try:
            state = await capabilities.load_state(self.storage, session_id)
        except CorruptSessionError:
            return "unreadable"
        if state is None:
            return "gone"
        if state.saved_at >= cutoff:
            return "active"
        if self._keeps_trash(session_id):
            return "deleted" if await self._remove(session_id, "prune") else "gone"
        await self.storage.delete(session_id, expected_revision=state.revision)
        return "deleted"

    async def create_session(
        self,
        session_id: str,
        *,
        messages: list[dict[str, Any]] | None = None,
        metadata: dict[str, Any] | None = None,
        summary: str | None = None,
        covered: int = 0,
    ) -> SessionRecord:
        """A new session holding ``messages``; ``metadata`` is merged into its own;
        ``summary`` stands for its first ``covered`` messages and any history
        before them (as a compression's does)."""
        check_session_id(session_id)

        async def work() -> SessionRecord:
            record = SessionRecord(
                session_id,
                messages=list(messages or []),
                metadata={**new_metadata(), **(metadata or {})},
                compression_state={"summary": summary, "covered": covered} if summary else None,
            )
            record.revision = await self.storage.save(record, expected_revision=0)
            return record

        return await self._held(session_id, work)

    async def transcript(self, session_id: str, turns: int | None = None) -> str:
        """The session as Markdown (as ``sessions show --format markdown``): all of
        it, or its last ``turns`` turns."""
        from foliko_cli.formats import transcript
        from foliko_cli.messages.turns import turn_starts

        if not turns:
            record = await self.get_session(session_id)
        else:  # a window may begin inside a turn: one start more than asked is read
            record = await self.session_tail(session_id, lambda m: len(turn_starts(m)) > turns)
        first = 0
        if turns is not None:
            starts = turn_starts(record.messages)
            if turns < len(starts):
                first = starts[-turns]
        record.messages = record.messages[first:]
        return "\n".join(transcript.markdown(record, first_seq=record.first_seq + first)) + "\n"

    async def export_document(self, session_id: str) -> dict[str, Any]:
        """The session as ``sessions export`` writes it in foliko's format."""
        from foliko_cli.formats.exporters.foliko import document

        return document(await self.export_record(session_id))

    async def get_state(self, session_id: str) -> SessionRecord | None:
        """The session without its messages (variables, metadata, revision), None
        when there is none: what reads the small records a server keeps beside
        the sessions (a quota's counters, a background response's journal)."""
        return await capabilities.load_state(self.storage, session_id)

    async def update_metadata(
        self,
        session_id: str,
        changes: dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]],
    ) -> SessionRecord:
        """Merge ``changes`` into the session's metadata; a callable is given the
        stored metadata under the session's lock and returns the changes (the
        history is not read: the returned record holds no messages)."""
        check_session_id(session_id)

        async def work() -> SessionRecord:
            record = await self._row(session_id)
            if record is None:
                raise SessionNotFoundError(session_id)
            merged = changes(record.metadata) if callable(changes) else changes
            record.metadata.update(merged, last_active=now_ms())
            state = SessionState(record.variables, record.metadata, record.compression_state)
            record.revision = await self.storage.append(
                session_id, [], state, expected_revision=record.revision
            )
            return record

        record = await self._held(session_id, work)
        self.framework.destroy_session_context(session_id)
        return record

    async def append_messages(self, session_id: str, messages: list[dict[str, Any]]) -> int:
        """Add ``messages`` (canonical, stamped) after the stored ones; return the
        item number of the first (item_numbers.py)."""
        check_session_id(session_id)

        async def work() -> int:
            record = await self._row(session_id)
            if record is None:
                raise SessionNotFoundError(session_id)
            position = int(record.metadata["message_count"]) + offset_of(record.metadata)
            metadata = {**record.metadata, "last_active": now_ms()}
            await self.storage.append(
                session_id,
                messages,
                SessionState(record.variables, metadata, record.compression_state),
                expected_revision=record.revision,
            )
            return position

        position = await self._held(session_id, work)
        self.framework.destroy_session_context(session_id)
        return position

    async def _row(self, session_id: str) -> SessionRecord | None:
        """The session without its messages, none of them read: what a write that
        checks the stored messages itself (``append``, storage/base.py) starts from."""
        return await capabilities.load_window(self.storage, session_id, 0, 0)

    # variables

    async def get_variables(self, session_id: str) -> dict[str, Any]:
        """The session's variables (its history is not read)."""
        return (await self.session_window(session_id, 0, 0)).variables

    async def update_variables(
        self,
        session_id: str,
        changes: dict[str, Any],
        *,
        unset: tuple[str, ...] = (),
        create: bool = False,
    ) -> dict[str, Any]:
        """Set ``changes`` and remove ``unset`` keys, without touching the history.

        An unknown session is an error unless ``create`` (workflows start
        sessions this way). The write is an append of no messages with the
        revision read, so it costs the same however long the history.
        """
        check_session_id(session_id)

        async def work() -> dict[str, Any]:
            record = await self._row(session_id)
            if record is None:
                if not create:
                    raise SessionNotFoundError(session_id)
                record = SessionRecord(session_id, metadata=new_metadata())
            missing = [key for key in unset if key not in record.variables]
            if missing:
                raise VariableNotSetError(
                    f"variable {missing[0]!r} is not set in session {session_id!r}",
                    fix="list the session's variables",
                )
            record.variables.update(changes)
            for key in unset:
                del record.variables[key]
            record.metadata["last_active"] = now_ms()
            state = SessionState(record.variables, record.metadata, record.compression_state)
            await self.storage.append(session_id, [], state, expected_revision=record.revision)
            return record.variables

        variables = await self._held(session_id, work)
        self.framework.destroy_session_context(session_id)
        return variables
