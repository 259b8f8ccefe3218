"""The services one worker process runs: one AsyncFoliko on the configured
storage, a view of it per user, and a memory-backed one for turns that are
not stored (Chat Completions without a session, ``store: false``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from foliko_cli.service import AsyncFoliko
from foliko_cli.storage.scoped import UserScopedStorage

if TYPE_CHECKING:
    from foliko_cli.config import Settings
    from foliko_cli.serve.quotas import Quotas


class Services:
    def __init__(self, settings: Settings, *, notify=None):
        self.settings = settings
        self.notify = notify
        self.base = AsyncFoliko.from_settings(settings, notify=notify)
        self.ephemeral = AsyncFoliko.from_settings(
            settings._replace(storage="memory"), notify=notify
        )
        self._users: dict[str, AsyncFoliko] = {}
        self.serve_tools = frozenset(settings.serve_tools)
        self.quotas: Quotas | None = None

    def for_user(self, user: str | None) -> AsyncFoliko:
        if user is None:
            return self.base
        service = self._users.get(user)
        if service is None:
            scoped = UserScopedStorage(self.base.storage, user, owns_inner=False)
            service = AsyncFoliko.from_settings(
                self.settings._replace(storage=scoped), notify=self.notify
            )
            self._users[user] = service
        return service

    def model_names(self) -> list[str]:
        configured = self.settings.models or {}
        names = ["echo", *sorted(configured)]
        if self.settings.model and self.settings.model not in names:
            names.append(self.settings.model)
        return names

    async def aclose(self) -> None:
        services = [*self._users.values(), self.ephemeral, self.base]
        self._users.clear()
        for service in services:
            await service.aclose()


def scratch_id() -> str:
    return "scratch-" + os.urandom(8).hex()


async def unstored_turn(
    services: Services,
    history: list[dict[str, Any]],
    run,
    *,
    system_prompt: str | None = None,
):
    """Run ``run(service, session_id)`` on a scratch copy of ``history`` that is
    dropped afterwards (nothing reaches the configured storage)."""
    service = services.ephemeral
    session_id = scratch_id()
    metadata = {"system_prompt": system_prompt} if system_prompt else None
    await service.create_session(session_id, messages=history, metadata=metadata)
    try:
        return await run(service, session_id)
    finally:
        await service.delete_sessions([session_id])
