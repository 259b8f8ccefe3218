"""``AsyncFoliko``: every operation foliko offers, as coroutines (F14).

The service owns one Framework (the three context layers, the session
queues, the storage adapter), the chat handlers it builds per model and
agent, and the model providers' connections. It runs inside any event loop:
the CLI drives it through the sync ``Foliko`` (facade.py), ``foliko serve``
awaits it from its request handlers.

Constructing it reads no config file: with no arguments it uses
``FOLIKO_HOME``, ``FOLIKO_STORAGE`` and ``FOLIKO_MODEL`` like the CLI does;
``from_config()`` / ``from_settings()`` apply the config files too. Notices
(skipped skills, the offline model) go to ``notify``, by default the
``foliko`` logger; the service never prints.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from foliko_cli.clock import now_ms
from foliko_cli.context.request import DEFAULT_TIMEOUT, RequestContext
from foliko_cli.errors import SessionNotFoundError, UsageError
from foliko_cli.framework import Framework
from foliko_cli.models.base import ModelProvider
from foliko_cli.storage import open_storage
from foliko_cli.storage.base import SessionExistsError, SessionStorageAdapter, StoredProblem
from foliko_cli.storage.record import (
    SessionRecord,
    SessionState,
    SessionSummary,
    check_session_id,
    clear_record,
    content_hash,
    new_metadata,
)
from foliko_cli.tools import ToolResult

if TYPE_CHECKING:
    from foliko_cli.chat import AgentChatHandler, TurnResult, TurnSetup
    from foliko_cli.config import Settings
    from foliko_cli.context.agent import AgentContext
    from foliko_cli.skills import SkillSet
    from foliko_cli.storage.migrate import MigrationReport

MAX_MESSAGE_CHARS = 16 * 1024 * 1024
DEFAULT_MODEL_NOTICE = (
    "no model configured; using the offline 'echo' model (choose one with the model "
    "setting, e.g. FOLIKO_MODEL; FOLIKO_MODEL=echo silences this)"
)
_NOTICE_MARKER = ".echo-notice-shown"

_log = logging.getLogger("foliko")


def check_message_text(message: str) -> str:
    if not message.strip():
        raise UsageError("the message is blank", fix="give some text to send")
    if len(message) > MAX_MESSAGE_CHARS:
        raise UsageError(
            f"the message is {len(message):,} characters, over the limit of {MAX_MESSAGE_CHARS:,}",
            fix="shorten it",
        )
    return message


_TURN_FIELDS = frozenset(
    {"messages", "instructions", "client_tools", "on_start", "on_message", "on_finish"}
)


def _check_turn_input(message: str, turn: dict[str, Any]) -> None:
    """The message must have text, unless the turn only continues after ``messages``."""
    unknown = set(turn) - _TURN_FIELDS
    if unknown:
        raise TypeError(f"unexpected turn option {sorted(unknown)[0]!r}")
    if message == "" and turn.get("messages"):
        return
    check_message_text(message)


def _no_progress(count: int) -> None:
    return None


def default_home() -> Path:
    """``FOLIKO_HOME``, else the platform's user data directory (no config file read)."""
    configured = os.environ.get("FOLIKO_HOME")
    if configured:
        return Path(configured).expanduser()
    from foliko_cli.config import default_home as platform_home

    return platform_home()


class ImportReport:
    """Which sessions an import stored, found already there, skipped or refused."""

    def __init__(self) -> None:
        self.imported: list[str] = []
        self.unchanged: list[str] = []
        self.skipped: list[str] = []
        self.conflicts: list[str] = []

    def to_dict(self) -> dict[str, list[str]]:
        return {
            "imported": self.imported,
            "unchanged": self.unchanged,
            "skipped": self.skipped,
            "conflicts": self.conflicts,
        }


SORT_KEYS: dict[str, tuple[Callable[[SessionSummary], Any], bool]] = {
    "updated": (lambda s: (s.updated_at, s.session_id), True),
    "created": (lambda s: (s.created_at, s.session_id), True),
    "messages": (lambda s: (s.message_count, s.session_id), True),
    "name": (lambda s: s.session_id, False),
}


class AsyncFoliko:
    def __init__(
        self,
        storage: Any = None,
        model: str | ModelProvider | None = None,
        *,
        home: Path | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_steps: int = 10,
        system_prompt: str | None = None,
        models: dict[str, dict[str, Any]] | None = None,
        context_window: int | None = None,
        agents: dict[str, dict[str, Any]] | None = None,
        tools: tuple[str, ...] = (),
        skill_dirs: list[Path] | None = None,
        notify: Callable[[str], None] | None = None,
        user: str | None = None,
    ):
        self.home = home if home is not None else default_home()
        if storage is None:
            storage = os.environ.get("FOLIKO_STORAGE") or "sqlite"
        if model is None:
            model = os.environ.get("FOLIKO_MODEL") or None
        self.storage: SessionStorageAdapter = open_storage(storage, self.home)
        if user is not None:
            from foliko_cli.storage.scoped import UserScopedStorage

            self.storage = UserScopedStorage(self.storage, user)
        self.user = user
        self.framework = Framework(self.storage, home=self.home)
        self.model = model
        self.timeout = timeout
        self.max_steps = max_steps
        self.system_prompt = system_prompt
        self.models = models or {}
        self.context_window = context_window
        self.agents = agents or {}
        self.tools = tools
        self.skill_dirs = skill_dirs or []
        self.notify = notify or _log.warning
        self._handlers: dict[tuple[str, str | None], AgentChatHandler] = {}
        self._providers: list[ModelProvider] = []
        self._skills: SkillSet | None = None
        self._tools_loaded = False

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any):
        from foliko_cli.config import skill_dirs

        options = {
            "home": settings.home,
            "timeout": settings.timeout,
            "max_steps": settings.max_steps,
            "system_prompt": settings.system_prompt,
            "models": settings.models,
            "context_window": settings.context_window,
            "agents": settings.agents,
            "tools": settings.tools,
            "skill_dirs": skill_dirs(Path.cwd()),
            **overrides,
        }
        return cls(settings.storage, settings.model, **options)

    @classmethod
    def from_config(cls, **flags: Any):
        """Settings from the config files and environment, as the CLI reads them."""
        from foliko_cli.config import load_settings

        notify = flags.pop("notify", None)
        return cls.from_settings(load_settings(**flags), notify=notify)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the model connections and the storage (every connection it holds)."""
        providers, self._providers = self._providers, []
        self._handlers.clear()
        try:
            for provider in providers:
                close = getattr(provider, "aclose", None)
                if close is not None:
                    await close()
        finally:
            await self.storage.close()

    # agents, skills, tools, models

    def skills(self) -> SkillSet:
        """Skills found in the skill directories (once); problems go to ``notify``."""
        if self._skills is None:
            from foliko_cli.skills import discover_skills

            self._skills = discover_skills(self.skill_dirs)
            for problem in self._skills.problems:
                self.notify(f"skipped skill {problem}")
        return self._skills

    def _load_global_tools(self) -> None:
        if self._tools_loaded or not self.tools:
            return
        from foliko_cli.plugins import load_tool

        for reference in self.tools:
            self.framework.register_tool(load_tool(reference))
        self._tools_loaded = True

    def agent_context(self, name: str) -> AgentContext:
        from foliko_cli.agents import agent_config, build_agent

        config = agent_config(name, self.agents)
        context = self.framework.get_or_create_agent_context(name)
        for warning in build_agent(context, config, self.skills()):
            self.notify(warning)
        return context

    def model_name(
        self, model: str | ModelProvider | None = None, agent: str | None = None
    ) -> str | ModelProvider | None:
        """The model a turn uses: the one asked for, else the agent's, else the default."""
        if model is not None:
            return model
        if agent is not None:
            from foliko_cli.agents import agent_config

            configured = agent_config(agent, self.agents).model
            if configured:
                return configured
        return self.model

    def _announce_default_model(self) -> None:
        """Say once per FOLIKO_HOME that the offline echo model answers."""
        marker = self.home / _NOTICE_MARKER
        if marker.exists():
            return
        self.notify(DEFAULT_MODEL_NOTICE)
        try:
            self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
            marker.touch(mode=0o600)
        except OSError:
            return  # the notice repeats next time: harmless

    def _provider(self, chosen: str | ModelProvider | None) -> ModelProvider:
        from foliko_cli.models import resolve_model

        provider = resolve_model(chosen, self.models)
        if not isinstance(chosen, ModelProvider):
            self._providers.append(provider)
        return provider

    def _make_handler(self, provider: ModelProvider, agent: str | None) -> AgentChatHandler:
        from foliko_cli.chat import AgentChatHandler

        self._load_global_tools()
        return AgentChatHandler(
            self.framework,
            provider,
            agent=self.agent_context(agent) if agent else None,
            max_steps=self.max_steps,
            system_prompt=self.system_prompt,
            context_window=self.context_window,
        )

    def handler(
        self, model: str | ModelProvider | None = None, agent: str | None = None
    ) -> AgentChatHandler:
        chosen = self.model_name(model, agent)
        key = (chosen if isinstance(chosen, str) else repr(chosen), agent)
        handler = self._handlers.get(key)
        if handler is None:
            if chosen is None:
                self._announce_default_model()
            handler = self._make_handler(self._provider(chosen), agent)
            self._handlers[key] = handler
        return handler

    def request(self, timeout: float | None = None, **options: Any) -> RequestContext:
        """A new RequestContext (pass it to ``chat`` to trace or cancel a turn)."""
        return RequestContext(timeout=timeout or self.timeout, **options)

    # turns

    async def _turn_setup(
        self,
        session_id: str,
        *,
        new: bool,
        fork_from: str | None,
        variables: dict[str, Any] | None,
        system: str | None,
        **extra: Any,
    ) -> TurnSetup:
        from foliko_cli.chat import TurnSetup

        start_from = None
        if fork_from is not None:
            check_session_id(fork_from)
            if fork_from == session_id:
                raise UsageError(
                    f"cannot fork session {session_id!r} into itself", fix="name a new session"
                )
            if not new and await self.storage.revision(session_id) is not None:
                raise SessionExistsError(session_id)
            source = await self.get_session(fork_from)
            now = now_ms()
            start_from = SessionRecord(
                session_id,
                messages=source.messages,
                variables=source.variables,
                metadata={
                    **source.metadata,
                    "created_at": now,
                    "last_active": now,
                    "forked_from": fork_from,
                },
                compression_state=source.compression_state,
            )
        elif new:
            start_from = SessionRecord(session_id, metadata=new_metadata())
        return TurnSetup(
            start_from=start_from, variables=variables or {}, system_prompt=system, **extra
        )

    async def chat(
        self,
        session_id: str,
        message: str,
        *,
        model: str | ModelProvider | None = None,
        agent: str | None = None,
        timeout: float | None = None,
        new: bool = False,
        fork_from: str | None = None,
        variables: dict[str, Any] | None = None,
        system: str | None = None,
        request: RequestContext | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        **turn: Any,
    ) -> TurnResult:
        """One turn; ``new`` starts the session over, ``fork_from`` copies another first.

        ``on_event`` receives the stream's ``delta``, ``tool_call`` and
        ``tool_result`` events as they happen (the model then streams).
        ``turn`` holds the further TurnSetup fields (``messages``,
        ``instructions``, ``client_tools``, ``on_start``, ``on_message``,
        ``on_finish``; see chat.TurnSetup).
        """
        if on_event is None:
            check_session_id(session_id)
            _check_turn_input(message, turn)
            handler = self.handler(model, agent)
            setup = await self._turn_setup(
                session_id,
                new=new,
                fork_from=fork_from,
                variables=variables,
                system=system,
                **turn,
            )
            return await handler.chat(
                message,
                session_id=session_id,
                request=request or self.request(timeout),
                setup=setup,
            )
        result = None
        async for event in self.chat_stream(
            session_id,
            message,
            model=model,
            agent=agent,
            timeout=timeout,
            new=new,
            fork_from=fork_from,
            variables=variables,
            system=system,
            request=request,
            **turn,
        ):
            if event["type"] == "done":
                result = event["result"]
            else:
                on_event(event)
        assert result is not None
        return result

    async def chat_stream(
        self,
        session_id: str,
        message: str,
        *,
        model: str | ModelProvider | None = None,
        agent: str | None = None,
        timeout: float | None = None,
        new: bool = False,
        fork_from: str | None = None,
        variables: dict[str, Any] | None = None,
        system: str | None = None,
        request: RequestContext | None = None,
        **turn: Any,
    ) -> AsyncIterator[dict[str, Any]]:
        """The turn's events: ``delta``, ``tool_call``, ``tool_result``, then ``done``
        (whose ``result`` is the TurnResult)."""
        check_session_id(session_id)
        _check_turn_input(message, turn)
        handler = self.handler(model, agent)
        setup = await self._turn_setup(
            session_id, new=new, fork_from=fork_from, variables=variables, system=system, **turn
        )
        async for event in handler.chat_stream(
            message, session_id=session_id, request=request or self.request(timeout), setup=setup
        ):
            yield event

    async def dry_run(
        self,
        session_id: str,
        message: str,
        *,
        model: str | ModelProvider | None = None,
        agent: str | None = None,
        new: bool = False,
        fork_from: str | None = None,
        variables: dict[str, Any] | None = None,
        system: str | None = None,
    ) -> dict[str, Any]:
        """Exactly what the model would be sent for this turn; nothing is called or saved."""
        check_session_id(session_id)
        check_message_text(message)
        from foliko_cli.dryrun import CaptureModel, RequestCaptured
        from foliko_cli.models import resolve_model

        target = resolve_model(self.model_name(model, agent), self.models)
        handler = self._make_handler(CaptureModel(target), agent)
        setup = await self._turn_setup(
            session_id, new=new, fork_from=fork_from, variables=variables, system=system
        )
        try:
            await handler.chat(message, session_id=session_id, request=self.request(), setup=setup)
        except RequestCaptured as captured:
            return {
                "model": target.name,
                "system": captured.request.system,
                "messages": captured.request.messages,
                "tools": captured.request.tools,
            }
        finally:
            if target is not self.model_name(model, agent):
                close = getattr(target, "aclose", None)
                if close is not None:
                    await close()
        raise AssertionError("the capture model was not called")

    async def call_tool(
        self, session_id: str, name: str, arguments: Any, *, agent: str | None = None
    ) -> ToolResult:
        """Run one tool inside the session, saving the variables it changed."""
        check_session_id(session_id)
        handler = self.handler(self.model if self.model is not None else "echo", agent)
        return await handler.run_tool(
            name, arguments, session_id=session_id, request=self.request()
        )

    # sessions

    async def _held(self, session_id: str, work, timeout: float | None = None):
        """Run ``work()`` (a coroutine function) holding the session exclusively."""
        async with self.framework.hold_session(session_id, timeout or self.timeout):
            return await work()

    async def get_session(self, session_id: str) -> SessionRecord:
        check_session_id(session_id)
        record = await self.storage.load(session_id)
        if record is None:
            raise SessionNotFoundError(session_id)
        return record

    async def list_sessions(
        self, *, sort: str = "updated", limit: int | None = None, since: int | None = None
    ) -> list[SessionSummary]:
        """Summaries sorted by ``updated``/``created``/``messages`` (newest or largest
        first) or ``name``; ``since`` keeps sessions updated at or after that ms time."""
        if sort not in SORT_KEYS:
            raise UsageError(f"unknown sort {sort!r}", fix=f"use one of {', '.join(SORT_KEYS)}")
        summaries = await self.storage.list_summaries()
        if since is not None:
            summaries = [s for s in summaries if s.updated_at >= since]
        key, reverse = SORT_KEYS[sort]
        summaries.sort(key=key, reverse=reverse)
        return summaries[:limit] if limit is not None else summaries

    async def session_ids(self) -> list[str]:
        return sorted(await self.storage.list())

    async def delete_sessions(
        self, session_ids: list[str], *, progress: Callable[[int], None] = _no_progress
    ) -> tuple[list[str], list[str]]:
        """Delete each session; return (deleted, not found)."""
        for session_id in session_ids:
            check_session_id(session_id)
        deleted, missing = [], []
        for session_id in sorted(set(session_ids)):
            existed = await self._held(session_id, lambda sid=session_id: self.storage.delete(sid))
            self.framework.destroy_session_context(session_id)
            (deleted if existed else missing).append(session_id)
            progress(1)
        order = {sid: i for i, sid in enumerate(dict.fromkeys(session_ids))}
        return sorted(deleted, key=order.get), sorted(missing, key=order.get)

    async def rename_session(self, old_id: str, new_id: str) -> None:
        """Rename ``old_id``; both are held, in one global order, so no two renames deadlock."""
        check_session_id(old_id)
        check_session_id(new_id)
        if old_id == new_id:
            raise UsageError(f"session {old_id!r} already has that name", fix="give a new name")
        first, second = sorted((old_id, new_id))

        async def work():
            async with self.framework.hold_session(second, self.timeout):
                await self.storage.rename(old_id, new_id)

        await self._held(first, work)
        self.framework.destroy_session_context(old_id)
        self.framework.destroy_session_context(new_id)

    async def fork_session(
        self, source_id: str, target_id: str, *, upto: int | None = None
    ) -> SessionRecord:
        """A copy of ``source_id`` named ``target_id``, which must not exist; with
        ``upto``, only its first ``upto`` messages (and no compression summary)."""
        check_session_id(source_id)
        check_session_id(target_id)
        if source_id == target_id:
            raise UsageError(f"cannot fork session {source_id!r} into itself", fix="name a new one")
        first, second = sorted((source_id, target_id))

        async def work():
            async with self.framework.hold_session(second, self.timeout):
                record = await self.storage.copy(source_id, target_id)
                record.metadata["forked_from"] = source_id
                if upto is not None and upto < len(record.messages):
                    record.messages = record.messages[: max(0, upto)]
                    record.compression_state = {}
                    record.saved_at = 0
                    record.revision = await self.storage.save(record)
                return record

        return await self._held(first, work)

    async def clear_session(self, session_id: str, *, variables: bool = False) -> SessionRecord:
        """Drop the history; with ``variables``, the variables too."""
        check_session_id(session_id)

        async def work():
            record = await self.storage.load(session_id)
            if record is None:
                raise SessionNotFoundError(session_id)
            record = clear_record(record, variables=variables)
            record.revision = await self.storage.save(record)
            return record

        record = await self._held(session_id, work)
        self.framework.destroy_session_context(session_id)
        return record

    async def export_sessions(self, session_ids: list[str]) -> AsyncIterator[SessionRecord]:
        """The named sessions, each loaded once, in order."""
        for session_id in session_ids:
            yield await self.get_session(session_id)

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
        plan = []
        for record in records:
            check_session_id(record.session_id)
            existing = await self.storage.load(record.session_id)
            if existing is None:
                plan.append(record)
            elif content_hash(record) == content_hash(existing):
                report.unchanged.append(record.session_id)
            elif on_conflict == "replace":
                plan.append(record)
            elif on_conflict == "skip":
                report.skipped.append(record.session_id)
            else:
                report.conflicts.append(record.session_id)
        if report.conflicts:
            return report
        progress(len(records) - len(plan))
        for record in plan:
            await self._held(record.session_id, lambda r=record: self.storage.save(r))
            self.framework.destroy_session_context(record.session_id)
            report.imported.append(record.session_id)
            progress(1)
        return report

    async def stale_sessions(self, older_than_ms: int) -> list[str]:
        """Sessions not updated for ``older_than_ms`` (what prune deletes)."""
        cutoff = now_ms() - older_than_ms
        return [
            s.session_id for s in await self.list_sessions(sort="name") if s.updated_at < cutoff
        ]

    async def prune(
        self,
        older_than_ms: int,
        *,
        dry_run: bool = False,
        progress: Callable[[int], None] = _no_progress,
    ) -> list[str]:
        """Delete the sessions not updated for ``older_than_ms``; return their ids."""
        stale = await self.stale_sessions(older_than_ms)
        if dry_run:
            return stale
        return (await self.delete_sessions(stale, progress=progress))[0]

    async def create_session(
        self,
        session_id: str,
        *,
        messages: list[dict[str, Any]] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SessionRecord:
        """A new session holding ``messages``; ``metadata`` is merged into its own."""
        check_session_id(session_id)

        async def work():
            if await self.storage.revision(session_id) is not None:
                raise SessionExistsError(session_id)
            record = SessionRecord(
                session_id,
                messages=list(messages or []),
                metadata={**new_metadata(), **(metadata or {})},
            )
            record.revision = await self.storage.save(record)
            return record

        return await self._held(session_id, work)

    async def update_metadata(self, session_id: str, changes: dict[str, Any]) -> SessionRecord:
        """Merge ``changes`` into the session's metadata."""
        check_session_id(session_id)

        async def work():
            record = await self.storage.load(session_id)
            if record is None:
                raise SessionNotFoundError(session_id)
            record.metadata.update(changes)
            record.saved_at = now_ms()
            record.revision = await self.storage.save(record)
            return record

        record = await self._held(session_id, work)
        self.framework.destroy_session_context(session_id)
        return record

    async def append_messages(self, session_id: str, messages: list[dict[str, Any]]) -> int:
        """Add ``messages`` (canonical, stamped) after the stored ones; return the
        position of the first."""
        check_session_id(session_id)

        async def work():
            record = await self.storage.load(session_id)
            if record is None:
                raise SessionNotFoundError(session_id)
            position = len(record.messages)
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

    # variables

    async def get_variables(self, session_id: str) -> dict[str, Any]:
        return (await self.get_session(session_id)).variables

    async def update_variables(
        self, session_id: str, changes: dict[str, Any], *, unset: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        """Set ``changes`` and remove ``unset`` keys; a new session is created for a set."""
        check_session_id(session_id)

        async def work():
            record = await self.storage.load(session_id)
            if record is None:
                if unset and not changes:
                    raise SessionNotFoundError(session_id)
                record = SessionRecord(session_id, metadata=new_metadata())
            missing = [key for key in unset if key not in record.variables]
            if missing:
                raise UsageError(
                    f"variable {missing[0]!r} is not set in session {session_id!r}",
                    fix="list the session's variables",
                )
            record.variables.update(changes)
            for key in unset:
                del record.variables[key]
            record.saved_at = now_ms()
            await self.storage.save(record)
            return record.variables

        variables = await self._held(session_id, work)
        self.framework.destroy_session_context(session_id)
        return variables

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
                on_total(len(await src.list()))
            return await migrate(src, dst, dry_run=dry_run, overwrite=overwrite, progress=progress)
        finally:
            try:
                await src.close()
            finally:
                await dst.close()

    async def check(self, *, repair: bool = False) -> list[tuple[StoredProblem, str | None]]:
        """Every unreadable record, and with ``repair`` where it was moved aside."""
        problems = await self.storage.check()
        if not repair:
            return [(problem, None) for problem in problems]
        return [(problem, await self.storage.quarantine(problem)) for problem in problems]

    async def info(self) -> dict[str, Any]:
        return await self.storage.info()
