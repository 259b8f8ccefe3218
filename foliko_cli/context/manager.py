"""Lifecycle of every context: creation, reference counts, expiry, stats."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from foliko_cli.context.agent import AgentContext
from foliko_cli.context.request import RequestContext
from foliko_cli.context.session import SessionContext

DEFAULT_SESSION_TTL = 1800.0
DEFAULT_MAX_IDLE_SESSIONS = 10_000


P = ParamSpec("P")
R = TypeVar("R")


def _synchronised(
    method: Callable[Concatenate[ContextManager, P], R],
) -> Callable[Concatenate[ContextManager, P], R]:
    @functools.wraps(method)
    def wrapper(self: ContextManager, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._lock:
            return method(self, *args, **kwargs)

    return wrapper


class ContextManager:
    """Owns the request, session and agent context maps.

    A session context is in use while its reference count is above zero. When
    the count drops to zero it stays cached (so history is loaded once) until
    it has been idle for ``session_ttl`` seconds or more than
    ``max_idle_sessions`` idle ones exist; then it is destroyed, which keeps
    a long-lived process from growing without bound (F2). Every change is
    made under one lock, so threads may share a manager.
    """

    def __init__(
        self,
        *,
        session_factory: Callable[[str], SessionContext] = SessionContext,
        on_session_created: Callable[[SessionContext], object] | None = None,
        on_session_destroyed: Callable[[SessionContext], object] | None = None,
        session_ttl: float = DEFAULT_SESSION_TTL,
        max_idle_sessions: int = DEFAULT_MAX_IDLE_SESSIONS,
    ):
        self._session_factory = session_factory
        self._on_created = on_session_created
        self._on_destroyed = on_session_destroyed
        self.session_ttl = session_ttl
        self.max_idle_sessions = max_idle_sessions
        self._requests: dict[str, RequestContext] = {}
        self._sessions: dict[str, SessionContext] = {}
        self._agents: dict[str, AgentContext] = {}
        self._ref_counts: dict[str, int] = {}
        self._idle_since: dict[str, float] = {}
        self._lock = threading.RLock()

    # requests

    @_synchronised
    def create_request_context(self, /, **options: Any) -> RequestContext:
        ctx = RequestContext(**options)
        self._requests[ctx.request_id] = ctx
        return ctx

    def get_request_context(self, request_id: str) -> RequestContext | None:
        return self._requests.get(request_id)

    @_synchronised
    def release_request_context(self, request_id: str) -> None:
        ctx = self._requests.pop(request_id, None)
        if ctx is not None:
            ctx.cancel()

    # sessions

    @_synchronised
    def get_or_create_session_context(self, session_id: str) -> SessionContext:
        """Return the session's context and take a reference to it."""
        ctx = self._sessions.get(session_id)
        if ctx is None:
            ctx = self._session_factory(session_id)
            self._sessions[session_id] = ctx
            self._ref_counts[session_id] = 0
            if self._on_created:
                self._on_created(ctx)
        self._ref_counts[session_id] += 1
        self._idle_since.pop(session_id, None)
        return ctx

    def get_session_context(self, session_id: str) -> SessionContext | None:
        return self._sessions.get(session_id)

    @_synchronised
    def release_session_context(self, session_id: str) -> None:
        count = self._ref_counts.get(session_id)
        if count is None:
            return
        if count > 1:
            self._ref_counts[session_id] = count - 1
            return
        self._ref_counts[session_id] = 0
        self._idle_since[session_id] = time.monotonic()
        self.expire_idle_sessions()

    @_synchronised
    def destroy_session_context(self, session_id: str) -> SessionContext | None:
        ctx = self._sessions.pop(session_id, None)
        self._ref_counts.pop(session_id, None)
        self._idle_since.pop(session_id, None)
        if ctx is not None and self._on_destroyed:
            self._on_destroyed(ctx)
        return ctx

    @_synchronised
    def expire_idle_sessions(self, now: float | None = None) -> list[str]:
        """Destroy idle sessions past the TTL, then the oldest beyond the cap."""
        now = time.monotonic() if now is None else now
        expired = [
            sid for sid, since in self._idle_since.items() if now - since >= self.session_ttl
        ]
        overflow = len(self._idle_since) - len(expired) - self.max_idle_sessions
        if overflow > 0:
            already = set(expired)
            oldest_first = (sid for sid in self._idle_since if sid not in already)
            expired.extend(next(oldest_first) for _ in range(overflow))
        for session_id in expired:
            self.destroy_session_context(session_id)
        return expired

    @_synchronised
    def session_ids(self) -> list[str]:
        return list(self._sessions)

    def ref_count(self, session_id: str) -> int:
        return self._ref_counts.get(session_id, 0)

    # agents

    @_synchronised
    def get_or_create_agent_context(self, agent_id: str, agent: Any = None) -> AgentContext:
        ctx = self._agents.get(agent_id)
        if ctx is None:
            ctx = AgentContext(agent_id, agent)
            self._agents[agent_id] = ctx
        return ctx

    def get_agent_context(self, agent_id: str) -> AgentContext | None:
        return self._agents.get(agent_id)

    @_synchronised
    def remove_agent_context(self, agent_id: str) -> AgentContext | None:
        return self._agents.pop(agent_id, None)

    @_synchronised
    def stats(self) -> dict[str, int]:
        return {
            "active_requests": len(self._requests),
            "active_sessions": len(self._sessions) - len(self._idle_since),
            "idle_sessions": len(self._idle_since),
            "active_agents": len(self._agents),
        }
