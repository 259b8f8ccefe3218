"""One MCP server for the life of the process: started once, reused, stopped at close.

The ``mcp`` SDK runs each connection in anyio task groups, whose cancel
scopes must be entered and left by one task. So every connection lives in a
task of its own (its *supervisor*), on the event loop that runs the turns:
the supervisor enters the transport and the client session on an
``AsyncExitStack``, lists the tools, then waits until the server goes away
or the connection is closed, and leaves them in order. Turns call tools
through the session from their own tasks. Whatever the SDK raises when a
server dies (an ``ExceptionGroup`` from its task groups) ends inside the
supervisor and becomes the connection's state and reason: nothing reaches a
turn but a tool error.

While it runs, the supervisor also keeps the tool list current: a
``tools/list_changed`` notification (on a 2026-07-28 connection, through a
``subscriptions/listen`` stream it keeps open) is passed to ``on_changed``
at once and makes the supervisor list the tools again and hand them to
``on_tools``. A server's question to the user (an elicitation) goes to
``on_elicit``.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, cast

from foliko_cli.engine.tools import ToolOutput
from foliko_cli.errors import ToolError
from foliko_cli.mcp.asking import DECLINE, Answer, Elicitation
from foliko_cli.mcp.server_config import ServerConfig, UnsetVariableError

if TYPE_CHECKING:
    import asyncio

CLIENT_NAME = "foliko"
_CLIENT_PACKAGES = ("mcp", "mcp_types", "httpx2", "anyio", "pydantic")
MAX_TOOL_PAGES = 100
STDERR_TAIL_CHARS = 300
T = TypeVar("T")
ProgressCallback = Callable[[float, float | None, str | None], Awaitable[None]]


class ServerTool(NamedTuple):
    """A tool as the server lists it (its own name, before ``SERVER__`` is added)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool = False
    """The tool's annotations say it does not modify its environment (``readOnlyHint``)."""


class _Call:
    """A call in flight: its ``call_timeout`` and the turn's request, both stopped
    while a question of the server's waits on the user."""

    def __init__(self, deadline: asyncio.Timeout, request: Any):
        self.deadline = deadline
        self.request = request

    @contextlib.contextmanager
    def waiting_on_user(self) -> Iterator[None]:
        import asyncio

        loop = asyncio.get_running_loop()
        when = self.deadline.when()
        left = None if when is None else when - loop.time()
        self.deadline.reschedule(None)
        try:
            if self.request is None:
                yield
            else:
                with self.request.waiting_on_user():
                    yield
        finally:
            if left is not None:
                self.deadline.reschedule(loop.time() + left)


class _WatchedReadStream:
    """The transport's read stream, noting when it ends (the server went away)."""

    def __init__(self, inner: Any, ended: Any):
        self._inner = inner
        self._ended = ended

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except Exception:
            self._ended.set()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._inner.__anext__()
        except (StopAsyncIteration, Exception):
            self._ended.set()
            raise

    async def __aenter__(self) -> _WatchedReadStream:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        return cast("bool | None", await self._inner.__aexit__(*exc))


class _Watched:
    """A transport whose read stream reports its end through ``ended``."""

    def __init__(self, transport: Any, ended: Any):
        self._transport = transport
        self._ended = ended

    async def __aenter__(self) -> tuple[Any, Any]:
        read, write = await self._transport.__aenter__()
        return _WatchedReadStream(read, self._ended), write

    async def __aexit__(self, *exc: Any) -> bool | None:
        return cast("bool | None", await self._transport.__aexit__(*exc))


def _keep_sdk_logs_off_stderr() -> None:
    """The SDK logs server mishaps (with tracebacks); without a handler of the
    application's, Python would print them on stderr. They stay available to
    an application that configures logging."""
    import logging

    from foliko_cli.mcp.logs import filter_secrets

    logger = logging.getLogger("mcp")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())
    filter_secrets("mcp")  # its records may quote a server's answer: no secret in them


def _load_sdk() -> None:
    """Import what a connection uses, before its start-up is timed: on a loaded
    machine the import alone takes seconds, and ``startup_timeout`` is the server's."""
    import anyio  # noqa: F401
    import mcp_types  # noqa: F401
    from mcp import Client  # noqa: F401
    from mcp.client import stdio, streamable_http  # noqa: F401


def _innermost(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


class ServerConnection:
    """States: ``idle`` (not started), ``cached`` (not started, its tools known
    from the last time it listed them), ``ready``, ``exited`` (died after
    starting), ``failed`` (could not start; ``error`` says why) and ``closed``."""

    def __init__(
        self,
        config: ServerConfig,
        *,
        on_tools: Callable[[ServerConnection], None] | None = None,
        on_changed: Callable[[ServerConnection], None] | None = None,
        on_elicit: Callable[[Elicitation], Awaitable[Answer]] | None = None,
        home: Any = None,
    ):
        self.config = config
        self.home = home
        """Where an OAuth server's tokens live (``oauth/store.py``)."""
        self._auth: Any = None
        self.state = "idle"
        self.error: str | None = None
        self.tools: list[ServerTool] = []
        """What the server lists (or, before it starts, what it listed last time)."""
        self.restarts = 0
        self.backed_off = False
        """Failed because it failed to start a short while ago (``cache.failure``)."""
        self.on_tools = on_tools
        self.on_changed = on_changed
        self.on_elicit = on_elicit
        self._tools_changed: Any = None
        self._calls: list[_Call] = []
        self._client: Any = None
        self._scope: Any = None
        self._task: asyncio.Task[None] | None = None
        self._settled: asyncio.Event | None = None
        self._transport_secrets: tuple[str, ...] = ()
        self._lock: asyncio.Lock | None = None
        self._stopping = False

    @property
    def name(self) -> str:
        return self.config.name

    # starting and stopping

    async def start(self) -> bool:
        """Start the server unless it runs or has failed; True when it is ready.

        A server that died after starting is started again (once per death);
        if that fails, it stays failed.
        """
        import asyncio  # not at import: a turn that starts no server runs without it

        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.state == "exited":
                await self._stop()
                self.restarts += 1
                self.state = "idle"
            if self.state in ("idle", "cached"):
                self._settled = asyncio.Event()
                self._task = asyncio.get_running_loop().create_task(
                    self._supervise(self._settled), name=f"mcp server {self.name}"
                )
                await self._settled.wait()
            return self.state == "ready"

    @property
    def running(self) -> bool:
        """Whether a server process (or connection) of this server's is up."""
        return self._task is not None

    async def aclose(self) -> None:
        await self._stop()
        self.state = "closed"

    async def _stop(self) -> None:
        self._stopping = True
        if self._scope is not None:
            self._scope.cancel()
        if self._task is not None:
            import asyncio

            await asyncio.gather(self._task, return_exceptions=True)
        self._task = None
        self._stopping = False

    async def _supervise(self, settled: asyncio.Event) -> None:
        import tempfile

        started = False
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
            try:
                _load_sdk()
                import anyio

                ended = anyio.Event()
                self._scope = scope = anyio.CancelScope()
                scope.deadline = anyio.current_time() + self.config.startup_timeout
                with scope:
                    async with AsyncExitStack() as stack:
                        await self._connect(stack, errlog, ended)
                        watching = await stack.enter_async_context(anyio.create_task_group())
                        await watching.start(self._follow_tool_list, watching)
                        scope.deadline = math.inf
                        started = True
                        self.state, self.error = "ready", None
                        self._listed()
                        settled.set()
                        await ended.wait()
                        watching.cancel_scope.cancel()
                if self._stopping:
                    pass
                elif started:
                    self._ended("exited", "the server closed the connection", errlog)
                elif scope.cancelled_caught:
                    timeout = self.config.startup_timeout
                    self._ended("failed", f"did not start within {timeout:g}s", errlog)
            except UnsetVariableError as exc:
                self._ended("failed", str(exc), None)
            except Exception as exc:
                reason = self.login_problem or self._describe(exc)
                self._ended("exited" if started else "failed", reason, errlog)
            finally:
                self._client = None
                if not started and self.state != "failed":
                    self._ended("failed", "stopped while starting", None)
                settled.set()

    async def _connect(self, stack: AsyncExitStack, errlog: Any, ended: Any) -> None:
        import anyio
        from mcp import Client
        from mcp_types import Implementation

        from foliko_cli import __version__
        from foliko_cli.mcp.logs import log_level
        from foliko_cli.mcp.transport import open_transport

        _keep_sdk_logs_off_stderr()
        transport = open_transport(self.config, errlog, self.home)
        self._transport_secrets, self._auth = transport.secrets, transport.auth
        client = Client(
            _Watched(transport.streams, ended),
            client_info=Implementation(name=CLIENT_NAME, version=__version__),
            cache=None,
            message_handler=self._on_message,
            elicitation_callback=self._on_elicitation,
            logging_callback=self._on_log,
            log_level=log_level(self.name),
        )
        self._client = await stack.enter_async_context(client)
        if transport.listening is not None:
            await transport.listening.wait()
        self._tools_changed = anyio.Event()  # a change announced from now on is followed
        self.tools = await self._list_tools(self._client)

    @property
    def protocol_version(self) -> str | None:
        """The protocol version negotiated with the running server."""
        return None if self._client is None else self._client.protocol_version

    @property
    def login_problem(self) -> str | None:
        """Why the server cannot be used until the user logs in (OAuth), if so."""
        problem = getattr(self._auth, "problem", None)
        return None if problem is None else str(problem)

    def _listed(self) -> None:
        if self.on_tools is not None:
            self.on_tools(self)

    # the tool list and the server's questions

    async def _on_message(self, message: Any) -> None:
        from mcp_types import ToolListChangedNotification

        if isinstance(message, ToolListChangedNotification):
            self._tool_list_changed()

    def _tool_list_changed(self) -> None:
        """The list known is outdated from now on (``on_changed``, at once: the
        process may end before the tools are listed again)."""
        if self.on_changed is not None:
            self.on_changed(self)
        if self._tools_changed is not None:
            self._tools_changed.set()

    async def _follow_tool_list(self, watching: Any, *, task_status: Any) -> None:
        """List the tools again each time the server says they changed; started
        (``task_status``) once a 2026-07-28 server's listen stream is open, so
        that no change is announced before foliko listens."""
        import anyio
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        client = self._client
        capability = client.server_capabilities.tools
        announces = capability is not None and bool(capability.list_changed)
        if announces and client.protocol_version in MODERN_PROTOCOL_VERSIONS:
            await watching.start(self._listen, client)
        task_status.started()
        while True:
            await self._tools_changed.wait()
            self._tools_changed = anyio.Event()
            try:
                self.tools = await self._list_tools(client)
            except Exception:
                return  # the connection is going away; its supervisor says why
            self._listed()

    async def _listen(self, client: Any, *, task_status: Any) -> None:
        """A 2026-07-28 server sends ``tools/list_changed`` only on a listen stream."""
        listening = False
        try:
            async with client.listen(tools_list_changed=True) as changes:
                task_status.started()
                listening = True
                async for _ in changes:
                    self._tool_list_changed()
        except Exception:
            pass  # no stream, or it was lost: the tools are listed again at the next start
        if not listening:
            task_status.started()

    async def _on_log(self, params: Any) -> None:
        from foliko_cli.mcp.logs import log_notification

        log_notification(self.name, params)

    async def _on_elicitation(self, context: Any, params: Any) -> Any:
        from mcp_types import ElicitResult

        if getattr(params, "mode", "form") == "url":
            request = Elicitation(self.name, params.message, "url", url=params.url)
        else:
            request = Elicitation(self.name, params.message, schema=params.requested_schema)
        with contextlib.ExitStack() as waiting:
            for call in list(self._calls):
                waiting.enter_context(call.waiting_on_user())
            answer = DECLINE if self.on_elicit is None else await self.on_elicit(request)
        return ElicitResult(action=answer.action, content=answer.content)

    @staticmethod
    async def _list_tools(client: Any) -> list[ServerTool]:
        tools: list[ServerTool] = []
        cursor = None
        for _ in range(MAX_TOOL_PAGES):
            page = await client.list_tools(cursor=cursor)
            for tool in page.tools:
                schema = dict(tool.input_schema or {})
                schema.setdefault("type", "object")
                description = tool.description or tool.title or f"Tool {tool.name}."
                read_only = bool(tool.annotations and tool.annotations.read_only_hint)
                tools.append(ServerTool(tool.name, description, schema, read_only))
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    def _tail(self, errlog: Any) -> str:
        if errlog is None:
            return ""
        try:
            errlog.flush()
            errlog.seek(0)
            lines = [line.strip() for line in errlog.read().splitlines() if line.strip()]
        except (OSError, ValueError):
            return ""
        return lines[-1][-STDERR_TAIL_CHARS:] if lines else ""

    @property
    def _secrets(self) -> tuple[str, ...]:
        """What the server's answers must never show back: the transport's
        secrets, and the OAuth client secret and tokens as they are now."""
        from foliko_cli.mcp.transport import transport_secrets

        return transport_secrets(self._transport_secrets, self._auth)

    def _describe(self, exc: BaseException) -> str:
        """One line for what went wrong, from the innermost useful exception."""
        exc = _innermost(exc)
        if isinstance(exc, ImportError) and (exc.name or "").split(".")[0] in _CLIENT_PACKAGES:
            from foliko_cli.common.extras import extra_hint

            return extra_hint("an MCP server", "mcp")
        cwd = os.path.expanduser(self.config.cwd) if self.config.cwd else None
        if isinstance(exc, FileNotFoundError):
            if cwd is not None and exc.filename == cwd:
                return f"working directory not found: {cwd}"
            return f"command not found: {exc.filename or self.config.command}"
        if isinstance(exc, PermissionError):
            return f"permission denied: {exc.filename or self.config.command}"
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        name = type(exc).__name__
        return f"{name}: {text}" if text else name

    def _ended(self, state: str, reason: str, errlog: Any) -> None:
        tail = self._tail(errlog)
        if tail and tail not in reason:
            reason = f"{reason} (stderr: {tail})"
        self.state, self.error = state, _scrub(reason, self._secrets)

    # calling

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        request: Any = None,
        progress: ProgressCallback | None = None,
    ) -> str | ToolOutput:
        """The result's text (with its images, if it has any); any failure raises
        ToolError, for the model to read.

        ``call_timeout`` (and the timeout of ``request``, the turn's
        RequestContext) does not run while the server's question waits on the user.
        ``progress`` gets the server's progress notifications for the call.
        """
        where = f"MCP server {self.name!r}"
        if not await self.start() or self._client is None:
            raise ToolError(f"{where} is not available: {self.error}")
        client = self._client
        import asyncio

        call = _Call(asyncio.timeout(self.config.call_timeout), request)
        self._calls.append(call)
        try:
            async with call.deadline:
                result = await client.call_tool(tool, arguments, progress_callback=progress)
                # What the server announced before it answered (tools/list_changed)
                # waits in tasks of its own: let them run before the turn goes on.
                await asyncio.sleep(0)
        except Exception as exc:
            raise ToolError(self._call_problem(tool, exc)) from None
        finally:
            self._calls.remove(call)
        from foliko_cli.mcp.results import result_images, result_text

        text = _scrub(result_text(result), self._secrets)
        if result.is_error:
            raise ToolError(f"{tool} on {where} reported an error: {text}")
        images = result_images(result, tool)
        return ToolOutput(text, tuple(images)) if images else text

    async def request(self, what: str, send: Callable[[Any], Awaitable[T]]) -> T:
        """``send(client)`` on the started server within ``call_timeout`` (resources,
        prompts; the time a question of the server's waits on the user is not
        counted); any failure raises ToolError, one line naming ``what``."""
        where = f"MCP server {self.name!r}"
        if not await self.start() or self._client is None:
            raise ToolError(f"{where} is not available: {self.error}")
        import asyncio

        call = _Call(asyncio.timeout(self.config.call_timeout), None)
        self._calls.append(call)
        try:
            async with call.deadline:
                return await send(self._client)
        except Exception as exc:
            raise ToolError(self._call_problem(what, exc)) from None
        finally:
            self._calls.remove(call)

    def _call_problem(self, tool: str, exc: Exception) -> str:
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED

        where = f"MCP server {self.name!r}"
        code = exc.error.code if isinstance(exc, MCPError) else None
        if isinstance(exc, TimeoutError):  # the call's deadline (call_timeout)
            return (
                f"{tool} on {where} did not finish within {self.config.call_timeout:g}s "
                "(call_timeout) and was cancelled"
            )
        if code == CONNECTION_CLOSED or self.state == "exited":
            self.state = "exited"
            self.error = self.error or f"the connection closed during a call to {tool}"
            return (
                f"{where} went away during the call to {tool} "
                "(it exited or closed the connection); it is restarted for the next call"
            )
        message = exc.error.message if isinstance(exc, MCPError) else self._describe(exc)
        return _scrub(f"{tool} on {where} failed: {message}", self._secrets)


def _scrub(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` without ``secrets`` (the transport's redaction, loaded when first needed:
    a turn whose tools come from the cache never starts the server)."""
    from foliko_cli.mcp.transport import scrub

    return scrub(text, secrets)
