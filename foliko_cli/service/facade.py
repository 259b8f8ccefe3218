"""``Foliko``: the synchronous twin of ``AsyncFoliko``, for the CLI and scripts.

Every public method of the service has a twin here with the same signature:
the service's coroutine run to its end on one event loop that lives as long
as the facade (reads and turns that never wait run without one: see
common/loop.py). Called from a thread that is already running an event loop
(a notebook, an async framework), the loop is driven from a worker thread
instead, so the facade works there too (``AsyncFoliko`` is the better fit
inside a loop). Anything the service has that is not listed here is an
AttributeError, never a coroutine nobody awaits.

SIGINT and SIGTERM during a call surface as ``Interrupted`` (exit 130 or
143), never swallowed: before the operation committed, nothing of it is
kept; after, its result is on the exception (``Interrupted.result``) and the
message says it was saved.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from foliko_cli.common.loop import NeedsLoop, run_without_loop
from foliko_cli.errors import Interrupted, SessionNotFoundError
from foliko_cli.service import AsyncFoliko, ImportReport, check_message_text

if TYPE_CHECKING:
    import asyncio
    from contextlib import AbstractContextManager
    from pathlib import Path
    from typing import Unpack

    from foliko_cli.context.request import RequestContext
    from foliko_cli.engine.agents import AgentConfig
    from foliko_cli.engine.framework import Framework
    from foliko_cli.engine.skills import SkillSet
    from foliko_cli.engine.turn import TurnParams, TurnRequest
    from foliko_cli.mcp.manager import MCPManager
    from foliko_cli.messages.record import SessionRecord
    from foliko_cli.models.base import ModelProvider
    from foliko_cli.storage.base import SessionStorageAdapter

__all__ = ["Foliko", "ImportReport", "check_message_text"]

T = TypeVar("T")
P = ParamSpec("P")

SIGNALS = (2, 15)
"""SIGINT and SIGTERM (the signal module, an enum, is imported when one is handled)."""
INTERRUPTED = (
    "interrupted before the operation finished",
    "interrupted after the operation finished",
)
INTERRUPTED_TURN = ("interrupted; the turn was not saved", "interrupted after the turn was saved")
READS = frozenset(
    {
        "get_session",
        "session_window",
        "session_tail",
        "export_record",
        "saved_fragments",
        "fragment",
        "list_sessions",
        "session_ids",
        "session_labels",
        "get_state",
        "transcript",
        "export_document",
        "get_variables",
        "search",
        "usage",
        "info",
        "compactions",
        "session_tree",
    }
)
"""Operations that only read: they may run without an event loop (see ``_without_loop``)."""
TURNS = frozenset({"chat"})
"""Operations that may run without an event loop when they never wait (common/loop.py)."""


def _loop_running_here() -> bool:
    from foliko_cli.common.loop import running_loop

    return running_loop() is not None


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
    except NeedsLoop:
        return False, None
    coroutine.close()
    return False, None


@contextlib.contextmanager
def _signals_held(received: list[int]) -> Iterator[None]:
    """While the block runs, SIGINT and SIGTERM are only noted in ``received``
    (in the main thread; elsewhere Python delivers none)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    import signal

    previous = {
        sig: signal.signal(sig, lambda number, _: received.append(number)) for sig in SIGNALS
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def _takes_arguments_of(
    source: Callable[Concatenate[Any, P], None],
) -> Callable[[Callable[..., None]], Callable[Concatenate[Any, P], None]]:
    """For type checkers: the decorated ``__init__`` takes what ``source`` takes
    (it passes them on); at run time it is returned as it is."""

    def same(init: Callable[..., None]) -> Callable[Concatenate[Any, P], None]:
        return init

    return same


class _LoopRunner:
    """One event loop for the facade's lifetime, made on first need; calls are
    serialised. ``interrupted`` names what a signal during a call means, before
    and after the operation committed."""

    def __init__(self) -> None:
        self._runner: asyncio.Runner | None = None
        self._lock = threading.RLock()

    def read(self, make: Callable[[], Coroutine[Any, Any, T]], interrupted: tuple[str, str]) -> T:
        """A read: without an event loop while none was needed yet (see ``_without_loop``)."""
        if self._runner is None:
            try:
                finished, value = _without_loop(make)
            except KeyboardInterrupt:
                raise Interrupted(interrupted[0]) from None
            if finished:
                return value  # type: ignore[return-value]
        return self.run(make(), interrupted)

    def turn(self, make: Callable[[], Coroutine[Any, Any, T]], interrupted: tuple[str, str]) -> T:
        """A turn: without an event loop when it never waits (see common/loop.py),
        signals held until it has ended; else on the loop."""
        if _loop_running_here():
            return self.run(make(), interrupted)
        received: list[int] = []
        with self._lock:
            with _signals_held(received):
                try:
                    value = run_without_loop(make())
                except NeedsLoop:
                    needs_loop = True
                except BaseException as exc:
                    if not received:
                        raise
                    raise Interrupted(interrupted[0], signal_number=received[0]) from exc
                else:
                    needs_loop = False
            if received:
                if needs_loop:
                    raise Interrupted(interrupted[0], signal_number=received[0])
                raise Interrupted(interrupted[1], signal_number=received[0], result=value)
            if needs_loop:
                return self.run(make(), interrupted)
            return value

    def run(self, coroutine: Coroutine[Any, Any, T], interrupted: tuple[str, str]) -> T:
        with self._lock:
            if self._runner is None:
                import asyncio

                self._runner = asyncio.Runner()
            if _loop_running_here():
                return self._in_worker_thread(coroutine, interrupted)
            return self._here(coroutine, interrupted)

    def _here(self, coroutine: Coroutine[Any, Any, T], interrupted: tuple[str, str]) -> T:
        import asyncio

        assert self._runner is not None
        loop = self._runner.get_loop()
        received: list[int] = []
        main_thread = threading.current_thread() is threading.main_thread()

        async def guarded() -> T:
            if not main_thread:
                return await coroutine
            import signal

            task = asyncio.current_task()
            previous = {sig: signal.getsignal(sig) for sig in SIGNALS}

            def on_signal(number: int) -> None:
                received.append(number)
                if task:
                    task.cancel()

            for sig in SIGNALS:
                loop.add_signal_handler(sig, on_signal, sig)
            try:
                return await coroutine
            finally:
                for sig, handler in previous.items():
                    loop.remove_signal_handler(sig)
                    signal.signal(sig, signal.SIG_DFL if handler is None else handler)

        try:
            value = self._runner.run(guarded())
        except KeyboardInterrupt:
            raise Interrupted(interrupted[0]) from None
        except asyncio.CancelledError:
            if received:
                raise Interrupted(interrupted[0], signal_number=received[0]) from None
            raise
        if received:  # it had committed when the signal came: say so, never swallow it
            raise Interrupted(interrupted[1], signal_number=received[0], result=value)
        return value

    def _in_worker_thread(
        self, coroutine: Coroutine[Any, Any, T], interrupted: tuple[str, str]
    ) -> T:
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
    interrupted: tuple[str, str] = INTERRUPTED,
) -> Callable[Concatenate[Foliko, P], T]:
    """The facade's method for the service's coroutine function, with its signature
    (less the coroutine) for type checkers."""
    name = coroutine_function.__name__
    how = "read" if name in READS else "turn" if name in TURNS else "run"

    def method(self: Foliko, /, *args: P.args, **kwargs: P.kwargs) -> T:
        bound: Callable[P, Coroutine[Any, Any, T]] = getattr(self.service, name)
        if how == "run" or (how == "turn" and kwargs.get("on_event") is not None):
            return self._loop.run(bound(*args, **kwargs), interrupted)
        run = self._loop.read if how == "read" else self._loop.turn
        return run(lambda: bound(*args, **kwargs), interrupted)

    # what functools.wraps sets, for help() and inspect.signature (wraps costs start-up time)
    method.__name__ = name
    method.__qualname__ = f"Foliko.{name}"
    method.__doc__ = coroutine_function.__doc__
    method.__wrapped__ = coroutine_function  # type: ignore[attr-defined]
    return method


class Foliko:
    """Takes the same arguments as ``AsyncFoliko``; see its methods for each call."""

    @_takes_arguments_of(AsyncFoliko.__init__)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.service = AsyncFoliko(*args, **kwargs)
        self._loop = _LoopRunner()

    @classmethod
    def from_settings(cls, settings: Any, **overrides: Any) -> Foliko:
        """See ``AsyncFoliko.from_settings``."""
        return cls._over(AsyncFoliko.from_settings(settings, **overrides))

    @classmethod
    def from_config(cls, **flags: Any) -> Foliko:
        """Settings from the config files and environment, as the CLI reads them."""
        return cls._over(AsyncFoliko.from_config(**flags))

    @classmethod
    def _over(cls, service: AsyncFoliko) -> Foliko:
        facade = cls.__new__(cls)
        facade.service = service
        facade._loop = _LoopRunner()
        return facade

    def __enter__(self) -> Foliko:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine of one's own over ``self.service`` on the facade's
        event loop, as its methods run: SIGINT or SIGTERM raises ``Interrupted``."""
        return self._loop.run(coroutine, INTERRUPTED)

    def close(self) -> None:
        """The twin of ``aclose``: stop the MCP servers, close the connections and
        the storage, then the event loop."""
        try:
            self._loop.read(self.service.aclose, INTERRUPTED)
        finally:
            self._loop.close()

    # the service's state and its plain methods, as they are

    @property
    def storage(self) -> SessionStorageAdapter:
        return self.service.storage

    @property
    def framework(self) -> Framework:
        return self.service.framework

    @property
    def home(self) -> Path:
        return self.service.home

    @property
    def user(self) -> str | None:
        return self.service.user

    @property
    def trash_keep(self) -> int:
        return self.service.trash_keep

    @property
    def mcp(self) -> MCPManager:
        return self.service.mcp

    def skills(self) -> SkillSet:
        """See ``AsyncFoliko.skills``."""
        return self.service.skills()

    def agent_config(self, name: str) -> AgentConfig:
        """See ``AsyncFoliko.agent_config``."""
        return self.service.agent_config(name)

    def listening_for_waits(
        self, listener: Callable[[str, str | None], None]
    ) -> AbstractContextManager[None]:
        """See ``AsyncFoliko.listening_for_waits``."""
        return self.service.listening_for_waits(listener)

    def check_model(self, name: str) -> None:
        """See ``AsyncFoliko.check_model``."""
        self.service.check_model(name)

    def request(self, timeout: float | None = None, **options: Any) -> RequestContext:
        """See ``AsyncFoliko.request``."""
        return self.service.request(timeout, **options)

    def model_name(
        self, model: str | ModelProvider | None = None, agent: str | None = None
    ) -> str | ModelProvider | None:
        """See ``AsyncFoliko.model_name``."""
        return self.service.model_name(model, agent)

    # the service's coroutines, run to their end

    chat = _blocking(AsyncFoliko.chat, INTERRUPTED_TURN)
    run_turn = _blocking(AsyncFoliko.run_turn, INTERRUPTED_TURN)
    dry_run = _blocking(AsyncFoliko.dry_run)
    count_tokens = _blocking(AsyncFoliko.count_tokens)
    call_tool = _blocking(AsyncFoliko.call_tool)
    get_session = _blocking(AsyncFoliko.get_session)
    session_window = _blocking(AsyncFoliko.session_window)
    session_tail = _blocking(AsyncFoliko.session_tail)
    export_record = _blocking(AsyncFoliko.export_record)
    list_sessions = _blocking(AsyncFoliko.list_sessions)
    session_ids = _blocking(AsyncFoliko.session_ids)
    session_labels = _blocking(AsyncFoliko.session_labels)
    delete_sessions = _blocking(AsyncFoliko.delete_sessions)
    rename_session = _blocking(AsyncFoliko.rename_session)
    fork_session = _blocking(AsyncFoliko.fork_session)
    rewind_session = _blocking(AsyncFoliko.rewind_session)
    splice_messages = _blocking(AsyncFoliko.splice_messages)
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
    forget = _blocking(AsyncFoliko.forget)
    forget_receipts = _blocking(AsyncFoliko.forget_receipts)
    get_state = _blocking(AsyncFoliko.get_state)
    transcript = _blocking(AsyncFoliko.transcript)
    export_document = _blocking(AsyncFoliko.export_document)
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
    save_fragment = _blocking(AsyncFoliko.save_fragment)
    saved_fragments = _blocking(AsyncFoliko.saved_fragments)
    fragment = _blocking(AsyncFoliko.fragment)
    remove_fragment = _blocking(AsyncFoliko.remove_fragment)
    usage = _blocking(AsyncFoliko.usage)
    check_access = _blocking(AsyncFoliko.check_access)
    audit_entries = _blocking(AsyncFoliko.audit_entries)
    prune_audit = _blocking(AsyncFoliko.prune_audit)

    # the service's streams, read one item at a time

    @functools.wraps(AsyncFoliko.chat_stream)
    def chat_stream(
        self,
        session_id: str | TurnRequest,
        message: str | None = None,
        **params: Unpack[TurnParams],
    ) -> Iterator[dict[str, Any]]:
        stream = self.service.chat_stream(session_id, message, **params)
        try:
            while True:
                try:
                    yield self._loop.run(anext(stream), INTERRUPTED_TURN)
                except StopAsyncIteration:
                    return
        finally:
            self._loop.run(stream.aclose(), INTERRUPTED_TURN)

    def export_sessions(
        self, session_ids: list[str], *, skip_missing: bool = False
    ) -> Iterator[SessionRecord]:
        """The named sessions, each loaded once, in order; with ``skip_missing``,
        one deleted or renamed meanwhile is left out instead of failing (each a
        ``get_session``, so a local store needs no event loop)."""
        for session_id in session_ids:
            try:
                yield self.export_record(session_id)
            except SessionNotFoundError:
                if not skip_missing:
                    raise
