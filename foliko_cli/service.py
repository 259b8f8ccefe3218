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
from foliko_cli.errors import CorruptSessionError, SessionNotFoundError, UsageError
from foliko_cli.framework import Framework
from foliko_cli.models.base import ModelProvider
from foliko_cli.storage import open_storage
from foliko_cli.storage.base import SessionExistsError, SessionStorageAdapter, StoredProblem
from foliko_cli.storage.record import (
    ROLES,
    SessionRecord,
    SessionState,
    SessionSummary,
    check_session_id,
    clear_record,
    content_hash,
    new_metadata,
)
from foliko_cli.tools import Tool, ToolResult
from foliko_cli.turns import cut_compression, drop_turns, keep_turns

if TYPE_CHECKING:
    from foliko_cli.chat import AgentChatHandler, TurnResult, TurnSetup
    from foliko_cli.config import Settings
    from foliko_cli.context.agent import AgentContext
    from foliko_cli.mcp.manager import MCPManager
    from foliko_cli.skills import SkillSet
    from foliko_cli.storage.migrate import MigrationReport
    from foliko_cli.storage.search import SearchHit

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


TURN_FIELDS = frozenset(
    {"messages", "instructions", "client_tools", "on_start", "on_message", "on_finish"}
)


def forked(
    source: SessionRecord, target_id: str, turns: int | None, upto: int | None = None
) -> SessionRecord:
    """A new session ``target_id`` holding ``source``'s history: all of it, its
    first ``turns`` turns, or its first ``upto`` messages."""
    kept = len(source.messages)
    if turns is not None:
        kept = keep_turns(source.messages, turns, session_id=source.session_id)
    elif upto is not None:
        kept = min(max(0, upto), kept)
    now = now_ms()
    return SessionRecord(
        target_id,
        messages=[dict(m) for m in source.messages[:kept]],
        variables=dict(source.variables),
        metadata={
            **source.metadata,
            "created_at": now,
            "last_active": now,
            "forked_from": source.session_id,
            "message_count": kept,
        },
        compression_state=cut_compression(source.compression_state, kept),
    )


class PruneReport:
    """What prune deleted, kept because it became active, found gone or could not read."""

    def __init__(self) -> None:
        self.deleted: list[str] = []
        self.active: list[str] = []
        self.gone: list[str] = []
        self.unreadable: list[str] = []

    def to_dict(self) -> dict[str, list[str]]:
        return {
            "deleted": self.deleted,
            "active": self.active,
            "gone": self.gone,
            "unreadable": self.unreadable,
        }


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
        mcp_servers: dict[str, dict[str, Any]] | None = None,
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
        self.framework.on_wait = self._waiting
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
        self.mcp_servers = mcp_servers or {}
        self._mcp: MCPManager | None = None

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
            "mcp_servers": settings.mcp_servers,
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
        """Stop the MCP servers, close the model connections and the storage."""
        providers = {id(p): p for p in self._providers}
        providers.update((id(h.model), h.model) for h in self._handlers.values())
        self._providers, self._handlers = [], {}
        manager, self._mcp = self._mcp, None
        try:
            if manager is not None:
                await manager.aclose()
            for provider in providers.values():
                await provider.aclose()
        finally:
            await self.storage.close()

    def _waiting(self, session_id: str, holder: str | None) -> None:
        self.notify(f"waiting for session {session_id!r} (held by {holder or 'another process'})…")

    # agents, skills, tools, models

    def skills(self) -> SkillSet:
        """Skills found in the skill directories (once); problems go to ``notify``."""
        if self._skills is None:
            from foliko_cli.skills import discover_skills

            self._skills = discover_skills(self.skill_dirs)
            for problem in self._skills.problems:
                self.notify(f"skipped skill {problem}")
        return self._skills

    async def _load_global_tools(self) -> None:
        """Plugin tools from the config and the tools of the enabled MCP servers, once."""
        if self._tools_loaded:
            return
        if self.tools:
            from foliko_cli.plugins import load_tool

            for reference in self.tools:
                self.framework.register_tool(load_tool(reference))
        if self.mcp_servers:
            for tool in await self.mcp_tools(self.mcp.enabled()):
                self.framework.register_tool(tool)
        self._tools_loaded = True

    async def agent_context(self, name: str) -> AgentContext:
        """The agent's context, filled from its config (tools, skills, MCP servers)."""
        from foliko_cli.agents import agent_config, build_agent

        config = agent_config(name, self.agents)
        context = self.framework.get_or_create_agent_context(name)
        for warning in build_agent(context, config, self.skills()):
            self.notify(warning)
        if config.mcp_servers:
            for tool in await self.mcp_tools(list(config.mcp_servers), owner=f"agent {name!r}"):
                context.register_tool(tool)
        return context

    # MCP servers (F12)

    @property
    def mcp(self) -> MCPManager:
        """The configured MCP servers, checked on first use, started only when needed."""
        if self._mcp is None:
            from foliko_cli.mcp.manager import MCPManager

            self._mcp = MCPManager(self.mcp_servers)
        return self._mcp

    async def start_mcp_servers(self, names: list[str] | None = None) -> None:
        """Start the servers (all configured ones by default); problems go to ``notify``."""
        names = list(self.mcp.configs) if names is None else names
        if names:
            for warning in await self.mcp.start(names):
                self.notify(warning)

    async def mcp_status(self) -> list[dict[str, Any]]:
        """Every configured server, started, with its state, tool count and any error."""
        names = list(self.mcp.configs)
        if names:
            await self.mcp.start(names)
        return [self.mcp.status(name) for name in names]

    async def mcp_tool_list(self, server: str | None = None) -> list[dict[str, Any]]:
        """Each tool of the server (or of every server), also those the config leaves out."""
        if server is not None:
            await self.mcp.start(self.mcp.check([server], "mcp tools"))
            return self.mcp.tool_rows([server])
        await self.start_mcp_servers()
        return self.mcp.tool_rows(self.mcp.configs)

    async def mcp_tools(self, names: list[str], *, owner: str = "the config") -> list[Tool]:
        """The tools of these servers, each started once for this service's life."""
        await self.start_mcp_servers(self.mcp.check(names, owner))
        return self.mcp.tools(names)

    async def tool_rows(self) -> list[dict[str, Any]]:
        """Every tool a chat may use: built-ins, enabled plugins (the one in effect
        when names clash), the MCP servers' tools, and installed plugins not enabled."""
        from foliko_cli.plugins import entry_point_tools, load_tool
        from foliko_cli.tools import BUILTIN_TOOLS

        def row(name: str, source: str, enabled: bool, description: str) -> dict[str, Any]:
            return {"name": name, "source": source, "enabled": enabled, "description": description}

        rows = {t.name: row(t.name, "built-in", True, t.description) for t in BUILTIN_TOOLS}
        for reference in self.tools:
            if reference not in rows:
                tool = load_tool(reference)
                rows[tool.name] = row(tool.name, reference, True, tool.description)
        listed = list(rows.values())
        if self.mcp_servers:
            listed += [
                row(r["name"], f"mcp {r['server']}", r["enabled"], r["description"])
                for r in await self.mcp_tool_list()
                if r["offered"]
            ]
        known = {r["source"] for r in listed} | {r["name"] for r in listed}
        for name, entry in sorted(entry_point_tools().items()):
            if name not in known:
                listed.append(row(name, f"plugin {entry.value}", False, ""))
        return listed

    async def describe_agent(self, name: str) -> dict[str, Any]:
        """An agent's model, tools, skills and the system prompt its turns start with."""
        from foliko_cli.prompts import agent_system_prompt

        context = await self.agent_context(name)
        chosen = self.model_name(None, name)
        return {
            "name": name,
            "model": chosen if isinstance(chosen, str) else getattr(chosen, "name", "echo"),
            "tools": sorted(context.tools),
            "skills": [s.name for s in context.skills],
            "system_prompt": agent_system_prompt(context),
        }

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
        self._providers.append(provider)
        return provider

    async def _make_handler(self, provider: ModelProvider, agent: str | None) -> AgentChatHandler:
        from foliko_cli.chat import AgentChatHandler

        await self._load_global_tools()
        return AgentChatHandler(
            self.framework,
            provider,
            agent=await self.agent_context(agent) if agent else None,
            max_steps=self.max_steps,
            system_prompt=self.system_prompt,
            context_window=self.context_window,
        )

    async def handler(
        self, model: str | ModelProvider | None = None, agent: str | None = None
    ) -> AgentChatHandler:
        """The chat handler for this model and agent, built once and reused."""
        chosen = self.model_name(model, agent)
        key = (chosen if isinstance(chosen, str) else repr(chosen), agent)
        handler = self._handlers.get(key)
        if handler is None:
            if chosen is None:
                self._announce_default_model()
            handler = await self._make_handler(self._provider(chosen), agent)
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
        turns: int | None = None,
        **extra: Any,
    ) -> TurnSetup:
        from foliko_cli.chat import TurnSetup

        start_from, expected = None, None
        if fork_from is not None:
            check_session_id(fork_from)
            if fork_from == session_id:
                raise UsageError(
                    f"cannot fork session {session_id!r} into itself", fix="name a new session"
                )
            if not new and await self.storage.revision(session_id) is not None:
                raise SessionExistsError(session_id)
            start_from = forked(await self.get_session(fork_from), session_id, turns)
            expected = None if new else 0
        elif turns is not None:
            raise UsageError("a number of turns to keep needs a session to fork from")
        elif new:
            start_from = SessionRecord(session_id, metadata=new_metadata())
        return TurnSetup(
            start_from=start_from,
            variables=variables or {},
            system_prompt=system,
            expected_revision=expected,
            **extra,
        )

    async def latest_session_id(self) -> str:
        """The most recently active session (what ``chat --continue`` continues)."""
        latest = await self.list_sessions(sort="updated", limit=1)
        if not latest:
            raise UsageError("there is no session to continue yet", fix="name one to start it")
        return latest[0].session_id

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
        turns: int | None = None,
        regenerate: bool = False,
        options: dict[str, Any] | None = None,
        schema: dict[str, Any] | None = None,
        request: RequestContext | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        **turn: Any,
    ) -> TurnResult:
        """One turn; ``new`` starts the session over, ``fork_from`` copies another
        first (its first ``turns`` turns when given); ``regenerate`` replaces the
        session's last turn by a new answer to its user message (``message``
        is then None), in one write.

        ``options`` are model options (``temperature``, ``max_tokens``, ...)
        over the model's configured ones; ``schema`` is a JSON Schema the
        reply must follow. ``on_event`` receives the stream's ``delta``,
        ``tool_call`` and ``tool_result`` events as they happen (the model
        then streams).
        ``turn`` holds the further TurnSetup fields (``messages``,
        ``instructions``, ``client_tools``, ``on_start``, ``on_message``,
        ``on_finish``; see chat.TurnSetup).
        """
        setup_options = {"new": new, "fork_from": fork_from, "variables": variables}
        setup_options.update(system=system, turns=turns, regenerate=regenerate)
        if on_event is None:
            from foliko_cli.chat import TurnOptions

            handler = await self.handler(model, agent)
            message, setup = await self._prepare(session_id, message, turn=turn, **setup_options)
            return await handler.chat(
                message,
                session_id=session_id,
                request=request or self.request(timeout),
                setup=setup,
                options=TurnOptions(options or {}, schema),
            )
        result = None
        async for event in self.chat_stream(
            session_id,
            message,
            model=model,
            agent=agent,
            timeout=timeout,
            request=request,
            options=options,
            schema=schema,
            **setup_options,
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
        turns: int | None = None,
        regenerate: bool = False,
        options: dict[str, Any] | None = None,
        schema: dict[str, Any] | None = None,
        request: RequestContext | None = None,
        **turn: Any,
    ) -> AsyncIterator[dict[str, Any]]:
        """The turn's events: ``delta``, ``tool_call``, ``tool_result``, then ``done``
        (whose ``result`` is the TurnResult). Options as for ``chat``."""
        from foliko_cli.chat import TurnOptions

        handler = await self.handler(model, agent)
        message, setup = await self._prepare(
            session_id,
            message,
            new=new,
            fork_from=fork_from,
            variables=variables,
            system=system,
            turns=turns,
            regenerate=regenerate,
            turn=turn,
        )
        async for event in handler.chat_stream(
            message,
            session_id=session_id,
            request=request or self.request(timeout),
            setup=setup,
            options=TurnOptions(options or {}, schema),
        ):
            yield event

    async def _prepare(
        self,
        session_id: str,
        message: str | None,
        *,
        regenerate: bool,
        turn: dict[str, Any] | None = None,
        **options: Any,
    ) -> tuple[str, TurnSetup]:
        """Check the turn's input and build its setup; a regenerated turn's message
        is the user message of the turn it replaces. ``turn`` holds the further
        TurnSetup fields (``messages``, ``instructions``, ...)."""
        check_session_id(session_id)
        turn = turn or {}
        unknown = set(turn) - TURN_FIELDS
        if unknown:
            raise TypeError(f"unexpected turn option {sorted(unknown)[0]!r}")
        if not regenerate:
            if message is None:
                raise UsageError("no message to send", fix="give one")
            if message != "" or not turn.get("messages"):
                check_message_text(message)  # a turn that only continues may have none
            return message, await self._turn_setup(session_id, **options, **turn)
        if message is not None or options["new"] or options["fork_from"] is not None:
            raise UsageError(
                "regenerating a turn reuses its message",
                fix="give no message, and neither start over nor fork",
            )
        setup = await self._turn_setup(session_id, **options, **turn)
        record = await self.get_session(session_id)
        kept = drop_turns(record.messages, 1, session_id=session_id)
        message = str(record.messages[kept].get("content") or "")
        start_from = SessionRecord(
            session_id,
            messages=record.messages[:kept],
            variables=record.variables,
            metadata=record.metadata,
            compression_state=cut_compression(record.compression_state, kept),
        )
        return check_message_text(message), setup._replace(
            start_from=start_from, expected_revision=record.revision
        )

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
        turns: int | None = None,
        regenerate: bool = False,
        options: dict[str, Any] | None = None,
        schema: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Exactly what the model would be sent for this turn; nothing is called or saved."""
        from foliko_cli.chat import TurnOptions
        from foliko_cli.dryrun import CaptureModel, RequestCaptured
        from foliko_cli.models import resolve_model

        message, setup = await self._prepare(
            session_id,
            message,
            new=new,
            fork_from=fork_from,
            variables=variables,
            system=system,
            turns=turns,
            regenerate=regenerate,
        )
        target = resolve_model(self.model_name(model, agent), self.models)
        handler = await self._make_handler(CaptureModel(target), agent)
        try:
            await handler.chat(
                message,
                session_id=session_id,
                request=self.request(),
                setup=setup,
                options=TurnOptions(options or {}, schema),
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
            if target is not self.model_name(model, agent):
                await target.aclose()
        raise AssertionError("the capture model was not called")

    async def call_tool(
        self, session_id: str, name: str, arguments: Any, *, agent: str | None = None
    ) -> ToolResult:
        """Run one tool inside the session, saving the variables it changed."""
        check_session_id(session_id)
        handler = await self.handler(self.model if self.model is not None else "echo", agent)
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

        async def work():
            async with self.framework.hold_session(second, self.timeout):
                if await self.storage.revision(target_id) is not None:
                    raise SessionExistsError(target_id)
                copy = forked(await self.get_session(source_id), target_id, turns, upto)
                copy.revision = await self.storage.save(copy, expected_revision=0)
                return copy

        return await self._held(first, work)

    async def rewind_session(self, session_id: str, *, turns: int = 1) -> SessionRecord:
        """Remove the last ``turns`` turns (a locked, explicit rewrite of the history)."""
        check_session_id(session_id)

        async def work():
            record = await self.get_session(session_id)
            kept = drop_turns(record.messages, turns, session_id=session_id)
            record.messages = record.messages[:kept]
            record.compression_state = cut_compression(record.compression_state, kept)
            record.saved_at = now_ms()
            record.revision = await self.storage.save(record, expected_revision=record.revision)
            return record

        record = await self._held(session_id, work)
        self.framework.destroy_session_context(session_id)
        return record

    async def clear_session(self, session_id: str, *, variables: bool = False) -> SessionRecord:
        """Drop the history; with ``variables``, the variables too."""
        check_session_id(session_id)

        async def work():
            record = await self.storage.load(session_id)
            if record is None:
                raise SessionNotFoundError(session_id)
            expected = record.revision
            record = clear_record(record, variables=variables)
            record.revision = await self.storage.save(record, expected_revision=expected)
            return record

        record = await self._held(session_id, work)
        self.framework.destroy_session_context(session_id)
        return record

    async def export_sessions(
        self, session_ids: list[str], *, skip_missing: bool = False
    ) -> AsyncIterator[SessionRecord]:
        """The named sessions, each loaded once, in order; with ``skip_missing``,
        one deleted or renamed meanwhile is left out instead of failing."""
        for session_id in session_ids:
            try:
                yield await self.get_session(session_id)
            except SessionNotFoundError:
                if not skip_missing:
                    raise

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
        if on_conflict == "fail":
            for record in records:
                existing = await self.storage.load(record.session_id)
                if existing is not None and content_hash(record) != content_hash(existing):
                    report.conflicts.append(record.session_id)
            if report.conflicts:
                return report
        for record in records:
            outcome = await self._held(
                record.session_id, lambda r=record: self._import_one(r, on_conflict)
            )
            getattr(report, outcome).append(record.session_id)
            self.framework.destroy_session_context(record.session_id)
            progress(1)
        return report

    async def _import_one(self, record: SessionRecord, on_conflict: str) -> str:
        """Store one record, deciding under its lock on what is stored now."""
        existing = await self.storage.load(record.session_id)
        if existing is not None and content_hash(record) == content_hash(existing):
            return "unchanged"
        if existing is not None and on_conflict != "replace":
            return "skipped" if on_conflict == "skip" else "conflicts"
        await self.storage.save(record, expected_revision=existing.revision if existing else 0)
        return "imported"

    async def prune(
        self,
        older_than_ms: int,
        *,
        dry_run: bool = False,
        progress: Callable[[int], None] = _no_progress,
        on_total: Callable[[int], None] | None = None,
    ) -> PruneReport:
        """Delete the sessions not updated for ``older_than_ms``.

        Each is re-read under its lock first: one that got a turn meanwhile is
        kept. Unreadable sessions are reported, never deleted.
        """
        cutoff = now_ms() - older_than_ms
        report = PruneReport()
        stale = []
        for summary in sorted(await self.storage.list_summaries(), key=lambda s: s.session_id):
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
            outcome = await self._held(session_id, lambda s=session_id: self._prune_one(s, cutoff))
            getattr(report, outcome).append(session_id)
            self.framework.destroy_session_context(session_id)
            progress(1)
        return report

    async def _prune_one(self, session_id: str, cutoff: int) -> str:
        try:
            state = await self.storage.load_state(session_id)
        except CorruptSessionError:
            return "unreadable"
        if state is None:
            return "gone"
        if state.saved_at >= cutoff:
            return "active"
        await self.storage.delete(session_id, expected_revision=state.revision)
        return "deleted"

    # history

    async def search(
        self,
        query: str,
        *,
        session_id: str | None = None,
        role: str | None = None,
        since: int | None = None,
        limit: int = 20,
    ) -> list[SearchHit]:
        """Messages holding every word, "phrase" and prefix* of ``query``, best first.

        ``since`` keeps messages written at or after that ms time. Backends with
        a full-text index (SQLite, PostgreSQL) search it; the others are scanned.
        """
        from foliko_cli.storage.search import Searchable, SearchQuery, parse_query, scan_search

        if session_id is not None:
            check_session_id(session_id)
        if role is not None and role not in ROLES:
            raise UsageError(f"unknown role {role!r}", fix=f"use one of {', '.join(sorted(ROLES))}")
        if limit < 1:
            raise UsageError(f"the limit must be at least 1, not {limit}", fix="give 1 or more")
        search_query = SearchQuery(query, parse_query(query), session_id, role, since, limit)
        if isinstance(self.storage, Searchable):
            return await self.storage.search(search_query)
        return await scan_search(self.storage, search_query)

    async def usage(self, *, since: int | None = None, by: str = "session") -> dict[str, Any]:
        """Token and cost totals of the assistant messages written at or after
        ``since`` (ms), per ``session``, ``model`` or UTC ``day``, and in all."""
        from foliko_cli.usage import GROUPINGS, summarise

        if by not in GROUPINGS:
            raise UsageError(f"unknown grouping {by!r}", fix=f"use one of {', '.join(GROUPINGS)}")
        summaries = await self.storage.list_summaries()
        ids = sorted(
            s.session_id
            for s in summaries
            if s.error is None and (since is None or s.updated_at >= since)
        )

        async def records() -> AsyncIterator[SessionRecord]:
            for start in range(0, len(ids), 500):
                found = await self.storage.load_many(ids[start : start + 500])
                for session_id in ids[start : start + 500]:
                    if session_id in found:
                        yield found[session_id]

        return summarise([record async for record in records()], by=by, since=since)

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
            record = SessionRecord(
                session_id,
                messages=list(messages or []),
                metadata={**new_metadata(), **(metadata or {})},
            )
            record.revision = await self.storage.save(record, expected_revision=0)
            return record

        return await self._held(session_id, work)

    async def update_metadata(self, session_id: str, changes: dict[str, Any]) -> SessionRecord:
        """Merge ``changes`` into the session's metadata (the history is not read:
        the returned record holds no messages)."""
        check_session_id(session_id)

        async def work():
            record = await self.storage.load_state(session_id)
            if record is None:
                raise SessionNotFoundError(session_id)
            record.metadata.update(changes, last_active=now_ms())
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
        position of the first."""
        check_session_id(session_id)

        async def work():
            record = await self.storage.load_state(session_id)
            if record is None:
                raise SessionNotFoundError(session_id)
            position = record.first_seq
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

        async def work():
            record = await self.storage.load_state(session_id)
            if record is None:
                if not create:
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
            record.metadata["last_active"] = now_ms()
            state = SessionState(record.variables, record.metadata, record.compression_state)
            await self.storage.append(session_id, [], state, expected_revision=record.revision)
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
        """Every unreadable record, and with ``repair`` where it was moved aside.

        A repair re-reads the session under its lock first, so a session that
        was deleted and created anew meanwhile is left alone (None). Stray
        files (``StoredProblem.stray``) are removed.
        """
        problems = await self.storage.check()
        if not repair:
            return [(problem, None) for problem in problems]
        return [(problem, await self._repair(problem)) for problem in problems]

    async def _repair(self, problem: StoredProblem) -> str | None:
        async def work() -> str | None:
            try:
                await self.storage.load(problem.session_id)
            except CorruptSessionError:
                return await self.storage.quarantine(problem)
            return None

        if problem.stray:
            return await self.storage.quarantine(problem)
        try:
            check_session_id(problem.session_id)
        except UsageError:
            return await self.storage.quarantine(problem)
        return await self._held(problem.session_id, work)

    async def info(self) -> dict[str, Any]:
        return await self.storage.info()
