"""The Framework: three context variables, the context manager, tools, storage.

``run_*`` methods take a function and its arguments. A plain function runs at
once with the context set; a coroutine function (or any function returning an
awaitable) gives back a coroutine that keeps the context set while it is
awaited. Each asyncio task and each thread sees only the contexts set on its
own path (``contextvars``), so concurrent requests never see each other's.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import time
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from foliko_cli.common.loop import run_to_completion, running_loop
from foliko_cli.context import AgentContext, ContextManager, RequestContext, SessionContext
from foliko_cli.context.manager import DEFAULT_MAX_IDLE_SESSIONS, DEFAULT_SESSION_TTL
from foliko_cli.engine.tools import (
    BUILTIN_TOOLS,
    Tool,
    ToolContext,
    ToolRegistry,
    ToolResult,
    run_tool,
)
from foliko_cli.errors import (
    AgentNotFoundError,
    BusyRejectedError,
    SessionBusyError,
    TurnInterruptedError,
)
from foliko_cli.storage.base import SessionStorageAdapter
from foliko_cli.storage.queues import IN_THIS_PROCESS, SessionQueues

T = TypeVar("T")
V = TypeVar("V")

WAIT_NOTICE_AFTER = 1.0
INTERRUPT_POLL_S = 0.25
"""How often a turn looks for a request that it stop (``if_busy="interrupt"``)."""
SESSION_CREATED = "session:context-created"
SESSION_DESTROYED = "session:context-destroyed"
_wait_listener: contextvars.ContextVar[Callable[[str, str | None], None] | None] = (
    contextvars.ContextVar("foliko_wait_listener", default=None)
)


@contextlib.contextmanager
def listening_for_waits(listener: Callable[[str, str | None], None]) -> Iterator[None]:
    """Tell ``listener(session_id, holder)`` when work started inside this block
    (in this task, and the tasks it starts meanwhile) waits for a session that
    something else holds: at once for a holder in this process, after
    WAIT_NOTICE_AFTER for one elsewhere (as ``on_wait`` is told)."""
    token = _wait_listener.set(listener)
    try:
        yield
    finally:
        _wait_listener.reset(token)


async def _release(lock: contextlib.AbstractAsyncContextManager[None]) -> None:
    """Leave a storage lock to its end, even when a cancellation arrives meanwhile
    (then raised after)."""
    _, cancelled = await run_to_completion(lock.__aexit__(None, None, None))
    if cancelled:
        import asyncio

        raise asyncio.CancelledError


def _tell_waiting(session_id: str, holder: str | None) -> None:
    listener = _wait_listener.get()
    if listener is not None:
        listener(session_id, holder)


Handler = Callable[..., Any]


class EventEmitter:
    """A minimal synchronous event emitter (on / off / emit): the Framework's
    ``session:context-created`` and ``session:context-destroyed``."""

    def __init__(self) -> None:
        self._handlers: dict[str, list[Handler]] = {}

    def on(self, event: str, handler: Handler) -> Handler:
        self._handlers.setdefault(event, []).append(handler)
        return handler

    def off(self, event: str, handler: Handler) -> bool:
        handlers = self._handlers.get(event, [])
        if handler in handlers:
            handlers.remove(handler)
            return True
        return False

    def emit(self, event: str, *args: Any) -> int:
        """Call every handler of ``event`` in registration order; return how many ran."""
        handlers = list(self._handlers.get(event, ()))
        for handler in handlers:
            handler(*args)
        return len(handlers)


class Framework(EventEmitter):
    def __init__(
        self,
        storage: Any = "memory",
        *,
        home: Path | None = None,
        session_ttl: float | None = None,
        max_idle_sessions: int | None = None,
    ):
        super().__init__()
        self._request_var: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar(
            "foliko_request", default=None
        )
        self._session_var: contextvars.ContextVar[SessionContext | None] = contextvars.ContextVar(
            "foliko_session", default=None
        )
        self._agent_var: contextvars.ContextVar[AgentContext | None] = contextvars.ContextVar(
            "foliko_agent", default=None
        )
        self.context_manager = ContextManager(
            session_factory=lambda sid: SessionContext(sid, self.session_storage),
            on_session_created=lambda ctx: self.emit(SESSION_CREATED, ctx),
            on_session_destroyed=lambda ctx: self.emit(SESSION_DESTROYED, ctx),
            session_ttl=DEFAULT_SESSION_TTL if session_ttl is None else session_ttl,
            max_idle_sessions=(
                DEFAULT_MAX_IDLE_SESSIONS if max_idle_sessions is None else max_idle_sessions
            ),
        )
        self.session_queues = SessionQueues()
        self.on_wait: Callable[[str, str | None], None] | None = None
        self.tools = ToolRegistry(BUILTIN_TOOLS)
        self.home = home or Path.cwd()
        self.session_storage: SessionStorageAdapter = self.configure_storage(storage)

    # storage

    def configure_storage(self, spec: Any) -> SessionStorageAdapter:
        from foliko_cli.storage import open_storage

        self.session_storage = open_storage(spec, self.home)
        for session_id in self.context_manager.session_ids():
            context = self.context_manager.get_session_context(session_id)
            if context is not None:
                context.storage = self.session_storage
        return self.session_storage

    def get_session_storage(self) -> SessionStorageAdapter:
        return self.session_storage

    @contextlib.asynccontextmanager
    async def hold_session(
        self,
        session_id: str,
        timeout: float,
        *,
        wait: float | None = None,
        if_busy: str = "wait",
    ) -> AsyncIterator[None]:
        """Exclusive use of a session: first in this process (FIFO), then in storage.

        Waits at most ``wait`` seconds (default ``timeout``); a busy error names
        ``timeout``, the limit the user set. The storage lock is released even
        when a cancellation arrives during the release. ``if_busy`` is what to
        do when something else holds the session: ``wait`` for it;
        ``reject`` (BusyRejectedError at once); ``interrupt``: ask its holder,
        through the store, to stop (storage/base.py rule 10), then wait. While
        held, a request to stop is looked for every ``INTERRUPT_POLL_S``: the
        block is cancelled and TurnInterruptedError raised (a block that
        swallows the cancellation, as a turn's write does, ends as it ends).
        """
        wait = timeout if wait is None else wait
        if if_busy == "wait":
            queue, lock = await self._enter(session_id, wait, timeout)
        else:
            try:
                queue, lock = await self._enter(session_id, 0.0, timeout)
            except SessionBusyError as exc:
                if if_busy == "reject":
                    raise BusyRejectedError(session_id, exc.holder) from None
                queue, lock = await self._interrupt(session_id, wait, timeout)
        try:
            if running_loop() is None:  # nothing else runs meanwhile (common/loop.py)
                yield
            else:
                async with self._watching(session_id):
                    yield
        finally:
            try:
                await _release(lock)
            finally:
                await queue.__aexit__(None, None, None)

    async def _enter(self, session_id: str, wait: float, timeout: float) -> tuple[Any, Any]:
        """The session's place in this process's queue, then its storage lock:
        both entered, for the caller to leave (the lock first)."""
        deadline = time.monotonic() + wait
        if wait and self.session_queues.busy(session_id):
            _tell_waiting(session_id, IN_THIS_PROCESS)
        queue = self.session_queues.hold(session_id, wait)
        await queue.__aenter__()
        try:
            return queue, await self._storage_lock(session_id, deadline, timeout)
        except BaseException:
            await queue.__aexit__(None, None, None)
            raise

    async def _interrupt(self, session_id: str, wait: float, timeout: float) -> tuple[Any, Any]:
        """Ask the session's holder to stop (until ``wait`` has passed), wait for
        it, and withdraw the request once held (or given up)."""
        from foliko_cli.common.clock import now_ms

        storage = self.session_storage
        await storage.set_interrupt(session_id, now_ms() + int(wait * 1000) + 1)
        try:
            return await self._enter(session_id, wait, timeout)
        finally:
            await run_to_completion(storage.set_interrupt(session_id, 0))

    @contextlib.asynccontextmanager
    async def _watching(self, session_id: str) -> AsyncIterator[None]:
        """Cancel the block when a request to stop comes (see ``hold_session``);
        the first look is ``INTERRUPT_POLL_S`` in: a shorter block costs a timer."""
        import asyncio

        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        storage = self.session_storage
        fired = False
        checker: asyncio.Future[None] | None = None

        async def check() -> None:
            nonlocal fired
            while True:
                try:
                    if await storage.interrupt_requested(session_id):
                        break
                except Exception:  # a blip: looked at again on the next tick
                    pass
                await asyncio.sleep(INTERRUPT_POLL_S)
            fired = True
            task.cancel()

        def start() -> None:
            nonlocal checker
            checker = asyncio.ensure_future(check())

        timer = loop.call_later(INTERRUPT_POLL_S, start)
        try:
            yield
        except asyncio.CancelledError:
            if fired:
                raise TurnInterruptedError(session_id) from None
            raise
        finally:
            timer.cancel()
            if checker is not None:
                checker.cancel()
            if fired:
                task.uncancel()

    async def _storage_lock(
        self, session_id: str, deadline: float, timeout: float
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """The entered storage lock; after ``WAIT_NOTICE_AFTER`` s of waiting,
        ``on_wait(session_id, holder)`` is told once who holds it."""
        patience = max(0.0, min(WAIT_NOTICE_AFTER, deadline - time.monotonic()))
        told = False
        while True:
            lock = self.session_storage.lock(session_id, patience)
            try:
                await lock.__aenter__()
            except SessionBusyError as exc:
                patience = max(0.0, deadline - time.monotonic())
                if told or patience == 0:
                    raise SessionBusyError(session_id, timeout, exc.holder) from None
                told = True
                if self.on_wait is not None:
                    self.on_wait(session_id, exc.holder)
                _tell_waiting(session_id, exc.holder)
            else:
                return lock

    # running with a context set

    def _run_with(
        self,
        var: contextvars.ContextVar[V],
        value: V,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        on_exit: Callable[[], None] | None = None,
    ) -> T:
        def call() -> T:
            var.set(value)
            return fn(*args, **kwargs)

        try:
            result = contextvars.copy_context().run(call)
        except BaseException:
            if on_exit:
                on_exit()
            raise
        if not inspect.isawaitable(result):
            if on_exit:
                on_exit()
            return result

        async def await_with_context() -> Any:
            token = var.set(value)
            try:
                return await result
            finally:
                var.reset(token)
                if on_exit:
                    on_exit()

        return await_with_context()  # type: ignore[return-value]

    @contextlib.contextmanager
    def bind(
        self,
        request: RequestContext | None = None,
        session: SessionContext | None = None,
        agent: AgentContext | None = None,
    ) -> Iterator[None]:
        """Set the given layers in the current context until the block ends."""
        pairs: list[tuple[contextvars.ContextVar[Any], object]] = [
            (self._request_var, request),
            (self._session_var, session),
            (self._agent_var, agent),
        ]
        tokens = [(var, var.set(value)) for var, value in pairs if value is not None]
        try:
            yield
        finally:
            for var, token in reversed(tokens):
                var.reset(token)

    # request layer

    def run_with_context(
        self, context: RequestContext, fn: Callable[..., T], *args: Any, **kwargs: Any
    ) -> T:
        return self._run_with(self._request_var, context, fn, args, kwargs)

    def get_request_context(self) -> RequestContext | None:
        return self._request_var.get()

    def with_request(
        self, options: dict[str, Any] | None, fn: Callable[..., T], *args: Any, **kwargs: Any
    ) -> T:
        """Create a RequestContext from ``options`` and run ``fn`` in it."""
        manager = self.context_manager
        context = manager.create_request_context(**(options or {}))
        return self._run_with(
            self._request_var,
            context,
            fn,
            args,
            kwargs,
            lambda: manager.release_request_context(context.request_id),
        )

    # session layer

    def get_or_create_session_context(self, session_id: str) -> SessionContext:
        """Return the session's context, taking a reference; pair with release."""
        return self.context_manager.get_or_create_session_context(session_id)

    def release_session_context(self, session_id: str) -> None:
        self.context_manager.release_session_context(session_id)

    def run_in_session(self, session_id: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        context = self.get_or_create_session_context(session_id)
        return self._run_with(
            self._session_var,
            context,
            fn,
            args,
            kwargs,
            lambda: self.release_session_context(session_id),
        )

    def get_session_context(self) -> SessionContext | None:
        return self._session_var.get()

    def current_session_id(self) -> str | None:
        context = self._session_var.get()
        return context.session_id if context else None

    def destroy_session_context(self, session_id: str) -> bool:
        return self.context_manager.destroy_session_context(session_id) is not None

    # agent layer

    def get_or_create_agent_context(self, agent_id: str, agent: Any = None) -> AgentContext:
        return self.context_manager.get_or_create_agent_context(agent_id, agent)

    def run_with_agent(self, agent_id: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        context = self.context_manager.get_agent_context(agent_id)
        if context is None:
            raise AgentNotFoundError(agent_id)
        return self._run_with(self._agent_var, context, fn, args, kwargs)

    def get_agent_context(self) -> AgentContext | None:
        return self._agent_var.get()

    # all three

    def run_in_full_context(
        self,
        request_options: dict[str, Any] | RequestContext | None,
        session_id: str,
        agent_id: str,
        fn: Callable[..., T],
        *args: Any,
        **kwargs: Any,
    ) -> T:
        request = (
            request_options
            if isinstance(request_options, RequestContext)
            else RequestContext(**(request_options or {}))
        )
        self.get_or_create_agent_context(agent_id)
        # the nested runners' generic result is T; mypy infers Any through them
        result: T = self.run_with_context(
            request,
            self.run_in_session,
            session_id,
            self.run_with_agent,
            agent_id,
            fn,
            *args,
            **kwargs,
        )
        return result

    def get_execution_context(self) -> dict[str, Any]:
        """Deprecated: the seed's single-context accessor."""
        warnings.warn(
            "get_execution_context() is deprecated; use get_session_context() "
            "and get_request_context()",
            DeprecationWarning,
            stacklevel=2,
        )
        request = self.get_request_context()
        return {
            "session_id": self.current_session_id(),
            "request_id": request.request_id if request else None,
        }

    # tools

    def register_tool(self, tool: Tool) -> None:
        self.tools.register(tool)

    def unregister_tool(self, name: str) -> bool:
        return self.tools.unregister(name)

    def resolve_tools(self) -> dict[str, Tool]:
        """Global tools, overridden by the current agent's tools of the same name."""
        tools = {tool.name: tool for tool in self.tools.all()}
        agent = self.get_agent_context()
        if agent is not None:
            tools.update(agent.tools)
        return tools

    def tool_context(self) -> ToolContext:
        return ToolContext(
            self.get_session_context(), self.get_request_context(), self.get_agent_context()
        )

    async def execute_tool(
        self,
        name: str,
        arguments: Any,
        offered: Mapping[str, Tool] | None = None,
        *,
        typed: bool = False,
    ) -> ToolResult:
        """Run tool ``name``; with ``offered``, only one of those (any other is
        unknown); ``typed``: the user wrote the call (see ToolContext)."""
        tools = self.resolve_tools() if offered is None else offered
        context = self.tool_context()._replace(typed=typed)
        return await run_tool(tools.get(name), name, arguments, context)
