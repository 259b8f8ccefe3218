"""History and storage upkeep: search, usage, migrate, check and info."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from foliko_cli.errors import CorruptSessionError, FolikoError, SessionNotFoundError, UsageError
from foliko_cli.messages.ids import check_session_id, is_internal
from foliko_cli.messages.record import ROLES, SessionRecord
from foliko_cli.storage import capabilities, open_storage
from foliko_cli.storage.base import StoredProblem

if TYPE_CHECKING:
    from foliko_cli.storage.base import AuditEntry
    from foliko_cli.storage.migrate import MigrationReport
    from foliko_cli.storage.search import SearchHit, SearchQuery
from foliko_cli.service.base import ServiceBase
from foliko_cli.service.common import (
    Repair,
    _no_progress,
)


class MaintenanceMixin(ServiceBase):
    """Work across the whole store."""

    async def check_access(self, session_id: str, *, write: bool = False) -> None:
        """What the client's scope says of ``session_id``: ScopeError when it may
        not change it, SessionNotFoundError when it may not see it (for work on a
        session that does not go through the store: stopping a running turn)."""
        from foliko_cli.storage.access import ScopedStorage

        if isinstance(self.storage, ScopedStorage):
            if write:
                await self.storage.check_write(session_id)
            elif not await self.storage.visible(session_id):
                raise SessionNotFoundError(session_id)

    # the audit log

    async def audit_entries(
        self,
        *,
        since: int | None = None,
        session_id: str | None = None,
        client: str | None = None,
    ) -> list[AuditEntry]:
        """The audit log, oldest first: the entries at or after ``since`` (ms),
        naming ``session_id``, made by ``client`` (``service.audit.by_client``)."""
        from foliko_cli.service.audit import by_client

        await self.audit.flush()
        entries = await capabilities.audit_read(self.storage, since)
        if session_id is not None:
            entries = [e for e in entries if session_id in e.session_ids]
        if client is not None:
            entries = [e for e in entries if by_client(e, client)]
        return entries

    async def prune_audit(self, *, before: int | None = None, keep: int | None = None) -> int:
        """Remove the entries before ``before`` (ms), or all but the newest ``keep``
        (neither: the default bound, ``service.audit.DEFAULT_KEEP``); how many went."""
        from foliko_cli.service.audit import DEFAULT_KEEP

        if before is not None and keep is not None:
            raise UsageError("give a date or a count to keep, not both", fix="choose one")
        if keep is not None and keep < 0:
            raise UsageError(
                f"the count to keep must be 0 or more, not {keep}", fix="give 0 or more"
            )
        if before is None and keep is None:
            keep = DEFAULT_KEEP
        await self.audit.flush()
        return await capabilities.audit_prune(self.storage, before=before, keep=keep)

    # history

    async def search(
        self,
        query: str,
        *,
        session_id: str | None = None,
        role: str | None = None,
        since: int | None = None,
        limit: int = 20,
        on_unreadable: Callable[[CorruptSessionError], None] | None = None,
    ) -> list[SearchHit]:
        """Messages holding every word, "phrase" and prefix* of ``query``, best first.

        ``since`` keeps messages written at or after that ms time. Backends with
        a full-text index (SQLite, PostgreSQL) search it; the others are scanned.
        foliko's own sessions (``is_internal``: the trash) are left out unless
        ``session_id`` names one. A damaged session (or message) is left out of
        the hits and given to ``on_unreadable``; without it, it is raised. With
        ``session_id``, that session's damage is raised in any case.
        """
        from foliko_cli.storage.search import SearchQuery, parse_query

        if session_id is not None:
            check_session_id(session_id)
        if role is not None and role not in ROLES:
            raise UsageError(f"unknown role {role!r}", fix=f"use one of {', '.join(sorted(ROLES))}")
        if limit < 1:
            raise UsageError(f"the limit must be at least 1, not {limit}", fix="give 1 or more")
        search_query = SearchQuery(
            query, parse_query(query), session_id, role, since, limit, on_unreadable
        )
        if session_id is not None:
            return await self._search(search_query)
        asked = limit
        while True:  # ask for more while foliko's own sessions crowd the page out
            hits = await self._search(search_query._replace(limit=asked))
            shown = [hit for hit in hits if not is_internal(hit.session_id)]
            if len(shown) >= limit or len(hits) < asked:
                return shown[:limit]
            asked *= 4

    async def _search(self, query: SearchQuery) -> list[SearchHit]:
        from foliko_cli.storage.search import search

        return await search(self.storage, query)

    async def usage(self, *, since: int | None = None, by: str = "session") -> dict[str, Any]:
        """Token and cost totals of the assistant messages written at or after
        ``since`` (ms), per ``session``, ``model`` or UTC ``day``, and in all."""
        from foliko_cli.messages.usage import GROUPINGS, summarise

        if by not in GROUPINGS:
            raise UsageError(f"unknown grouping {by!r}", fix=f"use one of {', '.join(GROUPINGS)}")
        summaries = await self.storage.list_summaries()
        ids = sorted(
            s.session_id
            for s in summaries
            if s.error is None
            and not is_internal(s.session_id)
            and (since is None or s.updated_at >= since)
        )

        async def records() -> AsyncIterator[SessionRecord]:
            for start in range(0, len(ids), 500):
                found = await capabilities.load_many(self.storage, ids[start : start + 500])
                for session_id in ids[start : start + 500]:
                    if session_id in found:
                        yield found[session_id]

        return summarise([record async for record in records()], by=by, since=since)

    # storage

    async def migrate(
        self,
        source: Any,
        target: Any,
        *,
        dry_run: bool = False,
        overwrite: bool = False,
        progress: Callable[[int], None] = _no_progress,
        on_total: Callable[[int], None] | None = None,
    ) -> MigrationReport:
        """Copy every session from ``source`` to ``target`` (names, URLs or adapters)."""
        from foliko_cli.storage.migrate import migrate

        src, dst = open_storage(source, self.home), open_storage(target, self.home)
        try:
            if on_total is not None:
                on_total(len(await src.session_ids()))
            return await migrate(src, dst, dry_run=dry_run, overwrite=overwrite, progress=progress)
        finally:
            try:
                await src.close()
            finally:
                await dst.close()

    async def check(self, *, repair: bool = False) -> list[Repair]:
        """Every unreadable or damaged record, and with ``repair`` what became of it.

        A repair re-reads the session under its lock first, so a session that
        was deleted and created anew meanwhile is left alone (``moved_to``
        None). Problems that hold no session go straight to the backend: stray
        files are removed, a store that fails its own check is left as it is.
        A repair that fails is reported (``failure``) and the others still run.
        """
        from foliko_cli.service.forgetting import remaining_copies
        from foliko_cli.storage.base import ProblemKind

        problems = await capabilities.check(self.storage)
        problems += [
            StoredProblem(stored, stored, why, ProblemKind.FORGOTTEN)
            for stored, why in await remaining_copies(self.storage)
        ]
        if not repair:
            return [Repair(problem) for problem in problems]
        repairs = []
        for problem in problems:
            try:
                repairs.append(Repair(problem, await self._repair(problem)))
            except FolikoError as exc:
                repairs.append(Repair(problem, failure=str(exc)))
        return repairs

    async def _repair(self, problem: StoredProblem) -> str | None:
        async def work() -> str | None:
            try:
                await self.storage.load(problem.session_id)
            except CorruptSessionError:
                return await capabilities.quarantine(self.storage, problem)
            return None

        if problem.kind == "forgotten":  # what the forget should have removed: removed

            async def remove() -> str | None:
                gone = await self.storage.delete(problem.session_id)
                return f"nowhere: {problem.session_id} removed" if gone else None

            return await self._held(problem.session_id, remove)
        if not problem.holds_session:
            return await capabilities.quarantine(self.storage, problem)
        try:
            check_session_id(problem.session_id)
        except UsageError:
            return await capabilities.quarantine(self.storage, problem)
        return await self._held(problem.session_id, work)

    async def info(self) -> dict[str, Any]:
        return await self.storage.info()
