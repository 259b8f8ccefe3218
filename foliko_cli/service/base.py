"""What every part of ``AsyncFoliko`` may use: the state ``__init__`` sets, and
(for the type checker) the methods one part calls on another."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from foliko_cli.storage.base import SessionStorageAdapter

if TYPE_CHECKING:
    from foliko_cli.context.request import RequestContext
    from foliko_cli.engine.framework import Framework
    from foliko_cli.engine.handler import AgentChatHandler
    from foliko_cli.engine.skills import SkillSet
    from foliko_cli.engine.tools import Tool
    from foliko_cli.mcp.asking import Asker
    from foliko_cli.mcp.manager import MCPManager
    from foliko_cli.messages.record import SessionRecord, SessionSummary
    from foliko_cli.models.base import ModelProvider
    from foliko_cli.service.audit import AuditRecorder
    from foliko_cli.storage.access import Scope
    from foliko_cli.storage.trash import TrashEntry

T = TypeVar("T")


class ServiceBase:
    """The attributes ``AsyncFoliko.__init__`` sets, declared once for its parts."""

    home: Path
    storage: SessionStorageAdapter
    user: str | None
    _framework: Framework | None
    model: str | ModelProvider | None
    timeout: float
    max_steps: int
    system_prompt: str | None
    models: dict[str, dict[str, Any]]
    context_window: int | None
    agents: dict[str, dict[str, Any]]
    tools: tuple[str, ...]
    skill_dirs: list[Path]
    notify: Callable[[str], None]
    _handlers: dict[tuple[str, str | None], AgentChatHandler]
    _providers: list[ModelProvider]
    _skills: SkillSet | None
    _tools_loaded: bool
    mcp_servers: dict[str, dict[str, Any]]
    _mcp: MCPManager | None
    _mcp_share: ServiceBase | None
    _interaction: tuple[Asker | None, bool, str | None]
    _mcp_offered: dict[str | None, tuple[list[str], list[str]]]
    _mcp_generation: int
    trash_keep: int
    _trash_purged_at: int
    scope: Scope | None
    _audit: AuditRecorder | None

    @property
    def audit(self) -> AuditRecorder:
        """Where the calls of clients are recorded (the store's audit log)."""
        if self._audit is None:
            from foliko_cli.service.audit import AuditRecorder

            self._audit = AuditRecorder(self.storage, self.notify)
        return self._audit

    @property
    def framework(self) -> Framework:
        """The seed's Framework over this service's storage (the three context
        layers, the session queues, the tools), made on first need: listing or
        reading sessions needs none of it."""
        if self._framework is None:
            from foliko_cli.engine.framework import Framework

            self._framework = Framework(self.storage, home=self.home)
            self._framework.on_wait = self._waiting
        return self._framework

    def _resolve_model(self, chosen: str | ModelProvider | None) -> ModelProvider:
        """The provider for ``chosen`` (a name, or a provider as it is); its key comes
        from the environment, the config or the key store in the home, in that order."""
        from foliko_cli.models import resolve_model

        if chosen is None or chosen == "echo":  # the offline model needs no key
            return resolve_model(chosen, self.models)
        from foliko_cli.common.keys import KeyStore

        return resolve_model(chosen, self.models, keys=KeyStore(self.home))

    def _waiting(self, session_id: str, holder: str | None) -> None:
        self.notify(f"waiting for session {session_id!r} (held by {holder or 'another process'})…")

    async def _held(
        self, session_id: str, work: Callable[[], Awaitable[T]], timeout: float | None = None
    ) -> T:
        """Run ``work()`` (a coroutine function) holding the session exclusively."""
        async with self.framework.hold_session(session_id, timeout or self.timeout):
            return await work()

    if TYPE_CHECKING:
        # Defined by the other parts (managing, tooling, trash); declared here so
        # each part type-checks alone. mypy checks the definitions match.

        @property
        def mcp(self) -> MCPManager: ...

        async def get_session(self, session_id: str) -> SessionRecord: ...

        async def list_sessions(
            self, *, sort: str = "updated", limit: int | None = None, since: int | None = None
        ) -> list[SessionSummary]: ...

        def model_name(
            self, model: str | ModelProvider | None = None, agent: str | None = None
        ) -> str | ModelProvider | None: ...

        async def handler(
            self, model: str | ModelProvider | None = None, agent: str | None = None
        ) -> AgentChatHandler: ...

        def request(self, timeout: float | None = None, **options: Any) -> RequestContext: ...

        async def _read_resource(self, source: str) -> list[Any]: ...

        async def _make_handler(
            self, provider: ModelProvider, agent: str | None
        ) -> AgentChatHandler: ...

        def _stand_ins(self) -> tuple[Tool, ...]: ...

        def _keeps_trash(self, session_id: str) -> bool: ...

        async def _remove(self, session_id: str, reason: str, *, keep: bool = True) -> bool: ...

        async def _rewrite(
            self, record: SessionRecord, reason: str, write: Callable[[], Awaitable[T]]
        ) -> T: ...

        async def _purge_trash(self, *, force: bool = False) -> list[TrashEntry]: ...
