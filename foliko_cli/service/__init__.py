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

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from foliko_cli.common.clock import DEFAULT_TIMEOUT
from foliko_cli.errors import UsageError
from foliko_cli.service.common import (
    ImportReport,
    PruneReport,
    check_message_text,
    default_home,
    log_notice,
)
from foliko_cli.service.compaction import CompactionMixin
from foliko_cli.service.forks import ForksMixin
from foliko_cli.service.maintenance import MaintenanceMixin
from foliko_cli.service.managing import SessionsMixin
from foliko_cli.service.tooling import ToolsMixin
from foliko_cli.service.trash import DEFAULT_KEEP_MS, TrashMixin
from foliko_cli.service.turning import TurnsMixin
from foliko_cli.storage import open_storage
from foliko_cli.storage.base import SessionStorageAdapter

if TYPE_CHECKING:
    from foliko_cli.common.settings import Settings
    from foliko_cli.engine.handler import AgentChatHandler
    from foliko_cli.engine.skills import SkillSet
    from foliko_cli.mcp.asking import Asker
    from foliko_cli.mcp.manager import MCPManager
    from foliko_cli.models.base import ModelProvider
    from foliko_cli.service.audit import AuditRecorder
    from foliko_cli.storage.access import Scope


__all__ = ["AsyncFoliko", "ImportReport", "PruneReport", "check_message_text", "default_home"]


class AsyncFoliko(
    ToolsMixin,
    TurnsMixin,
    SessionsMixin,
    CompactionMixin,
    ForksMixin,
    TrashMixin,
    MaintenanceMixin,
):
    def __init__(
        self,
        storage: Any = None,
        model: str | ModelProvider | None = None,
        *,
        home: str | os.PathLike[str] | None = None,
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
        mcp_share: AsyncFoliko | None = None,
        trash_keep: int | str = DEFAULT_KEEP_MS,
        asker: Asker | None = None,
        approve_all: bool = False,
        elicitation: str | None = None,
        scope: Scope | None = None,
    ):
        self.home = Path(home).expanduser() if home is not None else default_home()
        if storage is None:
            storage = os.environ.get("FOLIKO_STORAGE") or "sqlite"
        if model is None:
            model = os.environ.get("FOLIKO_MODEL") or None
        self.storage: SessionStorageAdapter = open_storage(storage, self.home)
        if user is not None:  # a view that never closes an adapter it was given
            from foliko_cli.storage.scoped import UserScopedStorage

            given = isinstance(storage, SessionStorageAdapter)
            self.storage = UserScopedStorage(self.storage, user, owns_inner=not given)
        if scope is not None:  # a client's view: what it may see, whether it may write
            from foliko_cli.storage.access import ScopedStorage

            given = user is None and isinstance(storage, SessionStorageAdapter)
            self.storage = ScopedStorage(self.storage, scope, owns_inner=not given)
        self.scope = scope
        self._audit: AuditRecorder | None = None
        self.user = user
        self._framework = None
        self.model = model
        self.timeout = timeout
        self.max_steps = max_steps
        self.system_prompt = system_prompt
        self.models = models or {}
        self.context_window = context_window
        self.agents = agents or {}
        self.tools = tools
        self.skill_dirs = skill_dirs or []
        self.notify = notify or log_notice
        self._handlers: dict[tuple[str, str | None], AgentChatHandler] = {}
        self._providers: list[ModelProvider] = []
        self._skills: SkillSet | None = None
        self._tools_loaded = False
        self.mcp_servers = mcp_servers or {}
        self._mcp: MCPManager | None = None
        self._mcp_share = mcp_share
        self._interaction = (asker, approve_all, elicitation)
        self._mcp_offered: dict[str | None, tuple[list[str], list[str]]] = {}
        self._mcp_generation = 0
        self.trash_keep = _keep_ms(trash_keep)
        self._trash_purged_at = 0

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> Self:
        from foliko_cli.common.settings import skill_dirs

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
            "trash_keep": settings.trash_keep,
            **overrides,
        }
        return cls(settings.storage, settings.model, **options)

    @classmethod
    def from_config(cls, **flags: Any) -> Self:
        """Settings from the config files and environment, as the CLI reads them."""
        from foliko_cli.common.settings import load_settings

        notify = flags.pop("notify", None)
        settings = load_settings(**flags)
        service = cls.from_settings(settings, notify=notify)
        if settings.untrusted is not None:
            service.notify(settings.untrusted.message())
        return service

    async def __aenter__(self) -> Self:
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
            if self._audit is not None:
                await self._audit.flush()
            if manager is not None:
                await manager.aclose()
            for provider in providers.values():
                await provider.aclose()
        finally:
            await self.storage.close()


def _keep_ms(keep: int | str) -> int:
    """How long the trash keeps what was removed: milliseconds or a duration
    (``"30d"``); 0 turns the trash off."""
    if type(keep) is int and keep >= 0:
        return keep
    from foliko_cli.common.settings import parse_keep

    try:
        return parse_keep(keep)
    except ValueError as exc:
        raise UsageError(f"trash_keep: {exc}", fix="give a duration such as 30d, or 0") from None
