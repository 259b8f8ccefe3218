"""The synchronous facade the CLI (and scripts) use.

Each call creates a RequestContext, loads the session from the configured
backend, does its work and saves; the asyncio core runs on one event loop
that lives as long as the facade. Start-up is a feature (P1): the framework,
the chat engine and asyncio itself are imported only when a command needs
them, and plain reads of a backend that never waits (SQLite, JSON files)
run without an event loop.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from foliko_cli.clock import now_ms
from foliko_cli.context.request import DEFAULT_TIMEOUT
from foliko_cli.errors import SessionNotFoundError, UsageError
from foliko_cli.storage import open_storage
from foliko_cli.storage.base import SessionExistsError, SessionStorageAdapter
from foliko_cli.storage.record import (
    SessionRecord,
    SessionSummary,
    check_session_id,
    clear_record,
    content_hash,
    new_metadata,
)

if TYPE_CHECKING:
    import asyncio

    from foliko_cli.chat import AgentChatHandler, TurnResult, TurnSetup
    from foliko_cli.config import Settings
    from foliko_cli.context.agent import AgentContext
    from foliko_cli.framework import Framework
    from foliko_cli.models.base import ModelProvider
    from foliko_cli.skills import SkillSet
    from foliko_cli.tools import ToolResult

T = TypeVar("T")

MAX_MESSAGE_CHARS = 16 * 1024 * 1024


def check_message_text(message: str) -> str:
    if not message.strip():
        raise UsageError("the message is empty; pass MESSAGE or pipe text on stdin")
    if len(message) > MAX_MESSAGE_CHARS:
        raise UsageError(
            f"the message is {len(message):,} characters, over the limit of "
            f"{MAX_MESSAGE_CHARS:,}; shorten it"
        )
    return message


def _no_progress(count: int) -> None:
    return None


def _stderr(message: str) -> None:
    print(f"foliko: {message}", file=sys.stderr)


class Foliko:
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
    ):
        if home is None:
            from foliko_cli.config import foliko_home

            home = foliko_home()
        self.home = home
        self.storage: SessionStorageAdapter = open_storage(
            storage if storage is not None else "sqlite", home
        )
        self._framework: Framework | None = None
        self.model = model
        self.timeout = timeout
        self.max_steps = max_steps
        self.system_prompt = system_prompt
        self.models = models or {}
        self.context_window = context_window
        self.agents = agents or {}
        self.tools = tools
        self.skill_dirs = skill_dirs or []
        self.notify = notify or _stderr
        self._runner: asyncio.Runner | None = None
        self._handlers: dict[tuple[str, str | None], AgentChatHandler] = {}
        self._skills: SkillSet | None = None
        self._tools_loaded = False

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> Foliko:
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

    def __enter__(self) -> Foliko:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._read(self.storage.close)
        if self._runner is not None:
            self._run(self.close_models())
            self._runner.close()

    async def close_models(self) -> None:
        """Close every model provider's connections (``aclose``)."""
        for handler in self._handlers.values():
            await handler.model.aclose()

    @property
    def framework(self) -> Framework:
        if self._framework is None:
            from foliko_cli.framework import Framework

            self._framework = Framework(self.storage, home=self.home)
        return self._framework

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self._runner is None:
            import asyncio

            self._runner = asyncio.Runner()
        return self._runner.run(coroutine)

    def _read(self, start: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run a read-only storage call; without an event loop when it never waits."""
        if self._runner is None:
            coroutine = start()
            try:
                coroutine.send(None)
            except StopIteration as finished:
                return finished.value
            except RuntimeError as exc:
                if "event loop" not in str(exc):
                    raise
            coroutine.close()
        return self._run(start())

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

    def _model_name(self, model: str | ModelProvider | None, agent: str | None):
        if model is not None:
            return model
        if agent is not None:
            from foliko_cli.agents import agent_config

            configured = agent_config(agent, self.agents).model
            if configured:
                return configured
        return self.model

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
        from foliko_cli.models import announce_default_model, resolve_model

        chosen = self._model_name(model, agent)
        key = (chosen if isinstance(chosen, str) else repr(chosen), agent)
        handler = self._handlers.get(key)
        if handler is None:
            if chosen is None:
                announce_default_model()
            handler = self._make_handler(resolve_model(chosen, self.models), agent)
            self._handlers[key] = handler
        return handler

    def _request(self, timeout: float | None):
        return self.framework.context_manager.create_request_context(
            timeout=timeout or self.timeout
        )

    def _turn_setup(
        self,
        session_id: str,
        *,
        new: bool,
        fork_from: str | None,
        variables: dict[str, Any] | None,
        system: str | None,
    ) -> TurnSetup:
        from foliko_cli.chat import TurnSetup

        start_from = None
        if fork_from is not None:
            check_session_id(fork_from)
            if fork_from == session_id:
                raise UsageError(f"cannot fork session {session_id!r} into itself; name a new one")
            if not new and self._run(self.storage.revision(session_id)) is not None:
                raise SessionExistsError(session_id)
            source = self.get_session(fork_from)
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
        return TurnSetup(start_from=start_from, variables=variables or {}, system_prompt=system)

    def chat(
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
        on_event: Callable[[dict[str, Any]], None] | None = None,
        options: dict[str, Any] | None = None,
        schema: dict[str, Any] | None = None,
    ) -> TurnResult:
        """One turn; ``new`` starts the session over, ``fork_from`` copies another first.

        ``on_event`` receives the stream's ``delta``, ``tool_call`` and
        ``tool_result`` events as they happen. ``options`` are model options
        (``temperature``, ``max_tokens``, ...) over the model's configured ones;
        ``schema`` is a JSON Schema the reply must follow.
        """
        from foliko_cli.chat import TurnOptions

        check_session_id(session_id)
        check_message_text(message)
        handler = self.handler(model, agent)
        setup = self._turn_setup(
            session_id, new=new, fork_from=fork_from, variables=variables, system=system
        )
        request = self._request(timeout)
        turn_options = TurnOptions(options or {}, schema)

        async def turn() -> TurnResult:
            if on_event is None:
                return await handler.chat(
                    message,
                    session_id=session_id,
                    request=request,
                    setup=setup,
                    options=turn_options,
                )
            result = None
            async for event in handler.chat_stream(
                message,
                session_id=session_id,
                request=request,
                setup=setup,
                options=turn_options,
            ):
                if event["type"] == "done":
                    result = event["result"]
                else:
                    on_event(event)
            return result

        try:
            return self._run(turn())
        finally:
            self.framework.context_manager.release_request_context(request.request_id)

    def dry_run(
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
        options: dict[str, Any] | None = None,
        schema: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Exactly what the model would be sent for this turn; nothing is called or saved."""
        check_session_id(session_id)
        check_message_text(message)
        from foliko_cli.chat import TurnOptions
        from foliko_cli.dryrun import CaptureModel, RequestCaptured
        from foliko_cli.models import resolve_model

        target = resolve_model(self._model_name(model, agent), self.models)
        handler = self._make_handler(CaptureModel(target), agent)
        setup = self._turn_setup(
            session_id, new=new, fork_from=fork_from, variables=variables, system=system
        )
        request = self._request(None)
        try:
            self._run(
                handler.chat(
                    message,
                    session_id=session_id,
                    request=request,
                    setup=setup,
                    options=TurnOptions(options or {}, schema),
                )
            )
        except RequestCaptured as captured:
            shown = {
                "model": target.name,
                "system": captured.request.system,
                "messages": captured.request.messages,
                "tools": captured.request.tools,
                "options": dict(captured.request.options),
            }
            if captured.request.schema is not None:
                shown["schema"] = captured.request.schema
            return shown
        finally:
            self.framework.context_manager.release_request_context(request.request_id)
        raise AssertionError("the capture model was not called")

    def call_tool(
        self, session_id: str, name: str, arguments: Any, *, agent: str | None = None
    ) -> ToolResult:
        """Run one tool inside the session, saving the variables it changed."""
        check_session_id(session_id)
        handler = self.handler(self.model if self.model is not None else "echo", agent)
        request = self._request(None)
        try:
            return self._run(
                handler.run_tool(name, arguments, session_id=session_id, request=request)
            )
        finally:
            self.framework.context_manager.release_request_context(request.request_id)

    # sessions

    def _held(self, session_id: str, work, timeout: float | None = None):
        """Run ``work()`` (a coroutine function) holding the session exclusively."""

        async def run():
            async with self.framework.hold_session(session_id, timeout or self.timeout):
                return await work()

        return self._run(run())

    def get_session(self, session_id: str) -> SessionRecord:
        check_session_id(session_id)
        record = self._read(lambda: self.storage.load(session_id))
        if record is None:
            raise SessionNotFoundError(session_id)
        return record

    def list_sessions(
        self, *, sort: str = "updated", limit: int | None = None, since: int | None = None
    ) -> list[SessionSummary]:
        """Summaries sorted by ``updated``/``created``/``messages`` (newest or largest
        first) or ``name``; ``since`` keeps sessions updated at or after that ms time."""
        summaries = self._read(self.storage.list_summaries)
        if since is not None:
            summaries = [s for s in summaries if s.updated_at >= since]
        key, reverse = SORT_KEYS[sort]
        summaries.sort(key=key, reverse=reverse)
        return summaries[:limit] if limit is not None else summaries

    def delete_sessions(
        self, session_ids: list[str], *, progress: Callable[[int], None] = _no_progress
    ) -> tuple[list[str], list[str]]:
        """Delete each session; return (deleted, not found)."""
        for session_id in session_ids:
            check_session_id(session_id)
        deleted, missing = [], []
        for session_id in dict.fromkeys(session_ids):
            existed = self._held(session_id, lambda sid=session_id: self.storage.delete(sid))
            self.framework.destroy_session_context(session_id)
            (deleted if existed else missing).append(session_id)
            progress(1)
        return deleted, missing

    def rename_session(self, old_id: str, new_id: str) -> None:
        check_session_id(old_id)
        check_session_id(new_id)
        if old_id == new_id:
            raise UsageError(f"session {old_id!r} already has that name")

        async def work():
            async with self.framework.hold_session(new_id, self.timeout):
                await self.storage.rename(old_id, new_id)

        self._held(old_id, work)
        self.framework.destroy_session_context(old_id)
        self.framework.destroy_session_context(new_id)

    def clear_session(self, session_id: str, *, variables: bool = False) -> SessionRecord:
        """Drop the history; with ``variables``, the variables too."""
        check_session_id(session_id)

        async def work():
            record = await self.storage.load(session_id)
            if record is None:
                raise SessionNotFoundError(session_id)
            record = clear_record(record, variables=variables)
            record.revision = await self.storage.save(record)
            return record

        return self._held(session_id, work)

    def session_ids(self) -> list[str]:
        return sorted(self._read(self.storage.list))

    def export_sessions(self, session_ids: list[str]) -> Iterator[SessionRecord]:
        """The named sessions, each loaded once, in order."""
        for session_id in session_ids:
            yield self.get_session(session_id)

    def import_sessions(
        self,
        records: list[SessionRecord],
        *,
        on_conflict: str = "skip",
        progress: Callable[[int], None] = _no_progress,
    ) -> ImportReport:
        """Store each record; identical ones are left alone, so re-importing is a no-op."""
        report = ImportReport()
        plan = []
        for record in records:
            check_session_id(record.session_id)
            existing = self._run(self.storage.load(record.session_id))
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
            self._held(record.session_id, lambda r=record: self.storage.save(r))
            self.framework.destroy_session_context(record.session_id)
            report.imported.append(record.session_id)
            progress(1)
        return report

    def stale_sessions(self, older_than_ms: int) -> list[str]:
        """Sessions not updated for ``older_than_ms`` (what prune deletes)."""
        cutoff = now_ms() - older_than_ms
        return [s.session_id for s in self.list_sessions(sort="name") if s.updated_at < cutoff]

    # variables

    def get_variables(self, session_id: str) -> dict[str, Any]:
        return self.get_session(session_id).variables

    def update_variables(
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
                    f"variable {missing[0]!r} is not set in session {session_id!r}; "
                    f"see 'foliko sessions vars {session_id}'"
                )
            record.variables.update(changes)
            for key in unset:
                del record.variables[key]
            record.saved_at = now_ms()
            await self.storage.save(record)
            return record.variables

        return self._held(session_id, work)


class ImportReport:
    """Which sessions an import stored, found already there, skipped or refused."""

    def __init__(self) -> None:
        self.imported: list[str] = []
        self.unchanged: list[str] = []
        self.skipped: list[str] = []
        self.conflicts: list[str] = []


SORT_KEYS: dict[str, tuple[Callable[[SessionSummary], Any], bool]] = {
    "updated": (lambda s: (s.updated_at, s.session_id), True),
    "created": (lambda s: (s.created_at, s.session_id), True),
    "messages": (lambda s: (s.message_count, s.session_id), True),
    "name": (lambda s: s.session_id, False),
}
