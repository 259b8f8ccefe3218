"""``Foliko``: the synchronous twin of ``AsyncFoliko``, for the CLI and scripts.

Every method is the service's coroutine of the same name, run to its end on
one event loop that lives as long as the facade. Called from a thread that
is already running an event loop (a notebook, an async framework), the loop
is driven from a worker thread instead, so the facade works there too
(``AsyncFoliko`` is the better fit inside a loop). SIGINT and SIGTERM
cancel the running operation and surface as ``Interrupted`` (exit 130 or
143) — unless it had already committed, in which case its result stands.
"""

from __future__ import annotations

import functools
import signal
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from foliko_cli.errors import Interrupted, SessionNotFoundError
from foliko_cli.service import AsyncFoliko, ImportReport, check_message_text

if TYPE_CHECKING:
    import asyncio
    from pathlib import Path

    from foliko_cli.context.request import RequestContext
    from foliko_cli.engine.framework import Framework
    from foliko_cli.engine.skills import SkillSet
    from foliko_cli.mcp.manager import MCPManager
    from foliko_cli.messages.record import SessionRecord
    from foliko_cli.storage.base import SessionStorageAdapter

__all__ = ["Foliko", "ImportReport", "check_message_text"]

T = TypeVar("T")
P = ParamSpec("P")

INTERRUPTED = "interrupted before the operation finished"
READS = frozenset(
    {
        "get_session",
        "list_sessions",
        "session_ids",
        "get_variables",
        "search",
        "usage",
        "info",
        "compactions",
        "session_tree",
    }
)
"""Operations that only read: they may run without an event loop (see ``_without_loop``)."""
INTERRUPTED_TURN = "interrupted; the turn was not saved"


def _loop_running_here() -> bool:
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _without_loop(make: Callable[[], Coroutine[Any, Any, T]]) -> tuple[bool, T | None]:
    """Run a coroutine that never waits to its end with no event loop: ``(True,
    value)``; ``(False, None)`` when it needed one (it is closed, nothing kept).

    On SQLite, JSON files and memory a read never waits, so ``sessions list``
    or ``show`` runs without importing asyncio at all (P1). Only reads come
    here: one that turns out to need a loop is simply run again on one.
    """
    coroutine = make()
    try:
        coroutine.send(None)
    except StopIteration as done:
        return True, done.value
    except RuntimeError as exc:
        if "no running event loop" not in str(exc):
            raise
        return False, None
    coroutine.close()
    return False, None


def _takes_arguments_of(
    source: Callable[Concatenate[Any, P], None],
) -> Callable[[Callable[..., None]], Callable[Concatenate[Any, P], None]]:
    """For type checkers: the decorated ``__init__`` takes what ``source`` takes
    (it passes them on); at run time it is returned as it is."""

    def same(init: Callable[..., None]) -> Callable[Concatenate[Any, P], None]:
        return init

    return same


class _LoopRunner:
    """One event loop for the facade's lifetime, made on first need; calls are serialised."""

    def __init__(self) -> None:
        self._runner: asyncio.Runner | None = None
        self._lock = threading.Lock()

    def read(self, make: Callable[[], Coroutine[Any, Any, T]], interrupted: str) -> T:
        """A read: without an event loop while none was needed yet (see ``_without_loop``)."""
        if self._runner is None:
            try:
                finished, value = _without_loop(make)
            except KeyboardInterrupt:
                raise Interrupted(interrupted) from None
            if finished:
                return value  # type: ignore[return-value]
        return self.run(make(), interrupted)

    def run(self, coroutine: Coroutine[Any, Any, T], interrupted: str) -> T:
        with self._lock:
            if self._runner is None:
                import asyncio

                self._runner = asyncio.Runner()
            if _loop_running_here():
                return self._in_worker_thread(coroutine, interrupted)
            return self._here(coroutine, interrupted)

    def _here(self, coroutine: Coroutine[Any, Any, T], interrupted: str) -> T:
        import asyncio

        assert self._runner is not None
        loop = self._runner.get_loop()
        terminated = threading.Event()
        main_thread = threading.current_thread() is threading.main_thread()

        async def guarded() -> T:
            if main_thread:
                task = asyncio.current_task()

                def on_sigterm() -> None:
                    terminated.set()
                    if task:
                        task.cancel()

                loop.add_signal_handler(signal.SIGTERM, on_sigterm)
            try:
                return await coroutine
            finally:
                if main_thread:
                    loop.remove_signal_handler(signal.SIGTERM)

        try:
            return self._runner.run(guarded())
        except KeyboardInterrupt:
            raise Interrupted(interrupted) from None
        except asyncio.CancelledError:
            if terminated.is_set():
                raise Interrupted(interrupted, signal_number=signal.SIGTERM) from None
            raise

    def _in_worker_thread(self, coroutine: Coroutine[Any, Any, T], interrupted: str) -> T:
        values: list[T] = []
        errors: list[BaseException] = []

        def work() -> None:
            try:
                values.append(self._here(coroutine, interrupted))
            except BaseException as exc:
                errors.append(exc)

        _in_thread(work)
        if errors:
            raise errors[0]
        return values[0]

    def close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            _in_thread(runner.close) if _loop_running_here() else runner.close()


def _in_thread(work: Callable[[], None]) -> None:
    worker = threading.Thread(target=work, name="foliko-facade")
    worker.start()
    worker.join()


def _blocking(
    coroutine_function: Callable[Concatenate[AsyncFoliko, P], Coroutine[Any, Any, T]],
    interrupted: str = INTERRUPTED,
) -> Callable[Concatenate[Foliko, P], T]:
    """The facade's method for the service's coroutine function, with its signature
    (less the coroutine) for type checkers."""
    name = coroutine_function.__name__

    if name in READS:

        @functools.wraps(coroutine_function)
        def read(self: Foliko, *args: P.args, **kwargs: P.kwargs) -> T:
            bound: Callable[P, Coroutine[Any, Any, T]] = getattr(self.service, name)
            return self._loop.read(lambda: bound(*args, **kwargs), interrupted)

        return read

    @functools.wraps(coroutine_function)
    def method(self: Foliko, *args: P.args, **kwargs: P.kwargs) -> T:
        run: Coroutine[Any, Any, T] = getattr(self.service, name)(*args, **kwargs)
        return self._loop.run(run, interrupted)

    return method


class Foliko:
    """Takes the same arguments as ``AsyncFoliko``; see its methods for each call."""

    if TYPE_CHECKING:  # the service's own, passed through by __getattr__
        storage: SessionStorageAdapter
        framework: Framework
        home: Path
        user: str | None
        trash_keep: int

        @property
        def mcp(self) -> MCPManager: ...

        def skills(self) -> SkillSet: ...

        def request(self, timeout: float | None = None, **options: Any) -> RequestContext: ...

    @_takes_arguments_of(AsyncFoliko.__init__)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.service = AsyncFoliko(*args, **kwargs)
        self._loop = _LoopRunner()

    @classmethod
    def from_settings(cls, settings: Any, **overrides: Any) -> Foliko:
        facade = cls.__new__(cls)
        facade.service = AsyncFoliko.from_settings(settings, **overrides)
        facade._loop = _LoopRunner()
        return facade

    @classmethod
    def from_config(cls, **flags: Any) -> Foliko:
        facade = cls.__new__(cls)
        facade.service = AsyncFoliko.from_config(**flags)
        facade._loop = _LoopRunner()
        return facade

    def __getattr__(self, name: str) -> Any:
        """Attributes and plain methods of the service (storage, framework, skills, ...)."""
        if name in ("service", "_loop"):
            raise AttributeError(name)
        return getattr(self.service, name)

    def __enter__(self) -> Foliko:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine of one's own over ``self.service`` on the facade's
        event loop, as its methods run: SIGINT or SIGTERM cancels it
        (``Interrupted``)."""
        return self._loop.run(coroutine, INTERRUPTED)

    def close(self) -> None:
        try:
            self._loop.read(self.service.aclose, INTERRUPTED)
        finally:
            self._loop.close()

    chat = _blocking(AsyncFoliko.chat, INTERRUPTED_TURN)
    dry_run = _blocking(AsyncFoliko.dry_run)
    call_tool = _blocking(AsyncFoliko.call_tool)
    get_session = _blocking(AsyncFoliko.get_session)
    list_sessions = _blocking(AsyncFoliko.list_sessions)
    session_ids = _blocking(AsyncFoliko.session_ids)
    delete_sessions = _blocking(AsyncFoliko.delete_sessions)
    rename_session = _blocking(AsyncFoliko.rename_session)
    fork_session = _blocking(AsyncFoliko.fork_session)
    rewind_session = _blocking(AsyncFoliko.rewind_session)
    compact = _blocking(AsyncFoliko.compact)
    compactions = _blocking(AsyncFoliko.compactions)
    uncompact = _blocking(AsyncFoliko.uncompact)
    session_tree = _blocking(AsyncFoliko.session_tree)
    latest_session_id = _blocking(AsyncFoliko.latest_session_id)
    clear_session = _blocking(AsyncFoliko.clear_session)
    import_sessions = _blocking(AsyncFoliko.import_sessions)
    prune = _blocking(AsyncFoliko.prune)
    list_trash = _blocking(AsyncFoliko.list_trash)
    restore_session = _blocking(AsyncFoliko.restore_session)
    empty_trash = _blocking(AsyncFoliko.empty_trash)
    get_variables = _blocking(AsyncFoliko.get_variables)
    update_variables = _blocking(AsyncFoliko.update_variables)
    create_session = _blocking(AsyncFoliko.create_session)
    update_metadata = _blocking(AsyncFoliko.update_metadata)
    append_messages = _blocking(AsyncFoliko.append_messages)
    migrate = _blocking(AsyncFoliko.migrate)
    check = _blocking(AsyncFoliko.check)
    info = _blocking(AsyncFoliko.info)
    agent_context = _blocking(AsyncFoliko.agent_context)
    describe_agent = _blocking(AsyncFoliko.describe_agent)
    tool_rows = _blocking(AsyncFoliko.tool_rows)
    handler = _blocking(AsyncFoliko.handler)
    start_mcp_servers = _blocking(AsyncFoliko.start_mcp_servers)
    mcp_status = _blocking(AsyncFoliko.mcp_status)
    mcp_tool_list = _blocking(AsyncFoliko.mcp_tool_list)
    mcp_tools = _blocking(AsyncFoliko.mcp_tools)
    mcp_resources = _blocking(AsyncFoliko.mcp_resources)
    mcp_prompts = _blocking(AsyncFoliko.mcp_prompts)
    mcp_prompt = _blocking(AsyncFoliko.mcp_prompt)
    search = _blocking(AsyncFoliko.search)
    usage = _blocking(AsyncFoliko.usage)

    def export_sessions(
        self, session_ids: list[str], *, skip_missing: bool = False
    ) -> Iterator[SessionRecord]:
        """The named sessions, each loaded once, in order (see ``AsyncFoliko``)."""
        for session_id in session_ids:
            try:
                yield self.get_session(session_id)
            except SessionNotFoundError:
                if not skip_missing:
                    raise
