"""The services one worker process runs: one AsyncFoliko on the configured
storage, a view of it per user, and a memory-backed one for turns that are
not stored (Chat Completions without a session, ``store: false``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from foliko_cli.serve.user_services import Lease, UserServices, limits_from_env
from foliko_cli.service import AsyncFoliko

if TYPE_CHECKING:
    from foliko_cli.common.settings import Settings
    from foliko_cli.serve.quotas import Quotas
    from foliko_cli.service.audit import Scope


UNATTENDED = {"elicitation": "decline"}
"""A server asks no one: an MCP tool call that needs approval is refused (unless
the config approves it) and every elicitation is declined."""


class Services:
    def __init__(self, settings: Settings, *, notify: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.notify = notify
        self.base = AsyncFoliko.from_settings(settings, notify=notify, **UNATTENDED)
        self.ephemeral = AsyncFoliko.from_settings(
            settings._replace(storage="memory", trash_keep=0), notify=notify, **UNATTENDED
        )
        capacity, idle = limits_from_env()
        self.users = UserServices(self._build_user, capacity, idle)
        self.serve_tools = frozenset(settings.serve_tools)
        self.quotas: Quotas | None = None

    def _build_user(self, principal: Principal) -> AsyncFoliko:
        user, scope = principal if isinstance(principal, tuple) else (principal, None)
        return AsyncFoliko.from_settings(
            self.settings._replace(storage=self.base.storage),
            user=user,
            notify=self.notify,
            mcp_share=self.base,
            scope=scope,
            **UNATTENDED,
        )

    def lease(self, user: str | None, scope: Scope | None = None) -> Lease:
        """The service of ``user`` (None: the shared sessions) held to ``scope``,
        kept open until the lease is released."""
        return self.users.acquire(principal(user, scope))

    def for_user(
        self,
        user: str | None,
        leases: dict[Principal, Lease] | None = None,
        scope: Scope | None = None,
    ) -> AsyncFoliko:
        """The service for ``user`` (the shared one for no user) held to ``scope``
        (None: all); a user's (or a scoped one) is leased into ``leases`` (one
        per user and scope), which the caller releases."""
        if user is None and scope is None:
            return self.base
        if leases is None:
            raise ValueError("a user's service needs a place to keep its lease")
        key = principal(user, scope)
        lease = leases.get(key)
        if lease is None:
            lease = leases[key] = self.users.acquire(key)
        return lease.service

    def model_names(self) -> list[str]:
        configured = self.settings.models or {}
        names = ["echo", *sorted(configured)]
        if self.settings.model and self.settings.model not in names:
            names.append(self.settings.model)
        return names

    async def aclose(self) -> None:
        await self.users.aclose()
        for service in (self.ephemeral, self.base):
            await service.aclose()


Principal = str | tuple[str | None, "Scope"]
"""Whose service: a user's name, or a user (None: the shared sessions) and a scope."""


def principal(user: str | None, scope: Scope | None) -> Principal:
    if scope is None:
        assert user is not None
        return user
    return (user, scope)


def scratch_id() -> str:
    return "scratch-" + os.urandom(8).hex()
