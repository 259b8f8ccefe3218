"""The MCP servers of one process: their tools, when they start, their state, shutdown.

The manager owns one ``ServerConnection`` per configured server and closes
them all in ``aclose``. A turn is offered a server's tools without starting
it when its tool list is cached (``cache.py``): the server starts when the
model first calls one of them. Only a server with no fresh cached list is
started for the turn, to list its tools. A server that cannot start is
reported once as a warning; the chat goes on without its tools.

Before a call runs, the manager sees that it is approved (``approve`` in the
server's table, a read-only tool, or the user through the ``Asker``), and it
answers the server's elicitations the same way (``asking.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from foliko_cli.common.loop import require_loop
from foliko_cli.engine.tools import Tool
from foliko_cli.errors import MCPLoginError, ToolError, UsageError
from foliko_cli.mcp.asking import DECLINE, Answer, Elicitation, Interaction, Progress, ToolCall
from foliko_cli.mcp.connection import ServerConnection, ServerTool
from foliko_cli.mcp.names import exposed_name
from foliko_cli.mcp.server_config import ServerConfig, server_configs

if TYPE_CHECKING:
    from foliko_cli.mcp.cache import ToolCache


def _stop_for_login(connections: Iterable[ServerConnection]) -> None:
    """A server that needs the user's login stops the turn (a tool error would
    leave the model to guess); the one line names the command that logs in."""
    for connection in connections:
        if connection.login_problem is not None:
            raise MCPLoginError(connection.login_problem)


class MCPManager:
    """With ``shared``, the servers not marked ``per_user`` are ``shared``'s
    connections (one process for every manager built on it); only the others
    are this manager's own, started and closed by it.

    ``home`` holds the cache of tool lists (none without it); ``notify`` gets
    the problems no tool result tells the user of."""

    def __init__(
        self,
        table: Mapping[str, Mapping[str, Any]],
        shared: MCPManager | None = None,
        *,
        home: Path | None = None,
        interaction: Interaction | None = None,
        notify: Callable[[str], None] | None = None,
    ):
        self.configs: dict[str, ServerConfig] = (
            shared.configs if shared is not None else server_configs(table)
        )
        self.shared = shared
        self.interaction = interaction or Interaction()
        self.notify = notify or (lambda message: None)
        self._generation = 0
        self._lists: dict[str, list[ServerTool]] = {}
        self._connections: dict[str, ServerConnection] = {}
        self._warned: set[str] = shared._warned if shared is not None else set()
        self.cache: ToolCache | None = None
        self.home = home
        if home is not None:
            from foliko_cli.mcp.cache import ToolCache

            self.cache = ToolCache(home)

    def enabled(self) -> list[str]:
        """The servers every chat gets (``enabled = true``, the default)."""
        return [name for name, config in self.configs.items() if config.enabled]

    def check(self, names: Iterable[str], owner: str) -> list[str]:
        """``names`` if each is a configured server; else a usage error naming ``owner``."""
        names = list(names)
        for name in names:
            if name not in self.configs:
                known = ", ".join(self.configs) or "none configured"
                raise UsageError(
                    f"{owner}: unknown MCP server {name!r} (known: {known}); "
                    f"define it as [mcp_servers.{name}] in foliko.toml"
                )
        return names

    def connection(self, name: str) -> ServerConnection:
        if self.shared is not None and not self.configs[name].per_user:
            return self.shared.connection(name)
        if name not in self._connections:
            connection = ServerConnection(
                self.configs[name],
                on_tools=self._listed,
                on_changed=self._outdated,
                on_elicit=self.elicit,
                home=self.home,
            )
            cached = self.cache.load(connection.config) if self.cache is not None else None
            if cached is not None:
                connection.tools = self._lists[name] = cached
                connection.state = "cached"
            self._connections[name] = connection
        return self._connections[name]

    def _listed(self, connection: ServerConnection) -> None:
        """The server listed its tools (it started, or said they changed)."""
        if self.cache is not None:
            self.cache.store(connection.config, connection.tools)
        if self._lists.get(connection.name) != connection.tools:
            self._lists[connection.name] = connection.tools
            self._generation += 1

    def _outdated(self, connection: ServerConnection) -> None:
        """The server said its tools changed: its cached list goes before it is
        listed again (should this process end first, the next one starts it)."""
        if self.cache is not None:
            self.cache.forget(connection.config)

    @property
    def generation(self) -> int:
        """Grows each time a server's tool list changes (the tools built before are outdated)."""
        return self._generation + (self.shared.generation if self.shared is not None else 0)

    async def start(self, names: Iterable[str]) -> list[str]:
        """Start the servers (together); return one warning per problem not yet reported."""
        connections = [self.connection(name) for name in dict.fromkeys(names)]
        await _start_all(c for c in connections if c.state in ("idle", "cached", "exited"))
        return self._new_warnings(connections)

    async def prepare(self, names: Iterable[str]) -> list[str]:
        """Make the tools of these servers known, starting only those whose tool
        list is not cached, nor that failed to start within the back-off
        (``cache.BACKOFF_SECONDS``); return the warnings ``start`` would."""
        connections = [self.connection(name) for name in dict.fromkeys(names)]
        for connection in connections:
            self._back_off(connection)
        await _start_all(c for c in connections if c.state in ("idle", "exited"))
        _stop_for_login(connections)
        return self._new_warnings(connections)

    def _back_off(self, connection: ServerConnection) -> None:
        """Leave a server that failed to start a short while ago failed, saying when
        it is tried again (the explicit ``start`` of ``mcp list`` tries at once)."""
        failure = self.cache.failure(connection.config) if self.cache is not None else None
        if failure is not None and connection.state == "idle":
            from foliko_cli.mcp.cache import BACKOFF_SECONDS

            age, error = failure
            connection.state, connection.error, connection.backed_off = "failed", error, True
            connection.error += (
                f" ({age:.0f} s ago; it is tried again {BACKOFF_SECONDS - age:.0f} s from now, "
                "or at once when its config changes)"
            )

    def _new_warnings(self, connections: list[ServerConnection]) -> list[str]:
        warnings = []
        for connection in connections:
            failed_now = connection.state == "failed" and not connection.backed_off
            if failed_now and self.cache is not None and connection.login_problem is None:
                self.cache.failed(connection.config, connection.error)
            for problem in self._problems(connection):
                if problem not in self._warned:
                    self._warned.add(problem)
                    warnings.append(problem)
        return warnings

    @staticmethod
    def _problems(connection: ServerConnection) -> list[str]:
        name = connection.name
        if connection.state == "failed":
            return [
                f"MCP server {name!r} failed to start: {connection.error}; its tools are left out"
            ]
        listed = {tool.name for tool in connection.tools}
        wanted = connection.config.tools or ()
        return [
            f"MCP server {name!r} has no tool {tool!r} (named in its 'tools'); "
            "list the tools it has"
            for tool in wanted
            if connection.state in ("ready", "cached") and tool not in listed
        ]

    def server_tools(self, name: str) -> list[ServerTool]:
        """What the model is offered from server ``name`` (after ``tools``/``exclude``)."""
        connection = self.connection(name)
        if connection.state == "failed":
            return []
        return [tool for tool in connection.tools if connection.config.offers(tool.name)]

    def tools(self, names: Iterable[str], beside: Iterable[str] = ()) -> list[Tool]:
        """foliko tools for the servers among ``names`` whose tools are known.

        Two servers' tools (of ``names`` and ``beside``, the servers a turn
        has anyway) that would reach the model under one name are a usage
        error naming both: rename a server, or exclude one of the tools."""
        names = list(dict.fromkeys(names))
        built: dict[str, tuple[str, ServerTool]] = {}
        for name in dict.fromkeys([*beside, *names]):
            for tool in self.server_tools(name):
                exposed = exposed_name(name, tool.name)
                if exposed in built:
                    other, clash = built[exposed]
                    raise UsageError(
                        f"MCP server {other!r} tool {clash.name!r} and MCP server {name!r} "
                        f"tool {tool.name!r} are both named {exposed!r} for the model; rename "
                        f"one of the servers or add one tool to its 'exclude'"
                    )
                built[exposed] = (name, tool)
        return [
            self._tool(server, tool, exposed)
            for exposed, (server, tool) in built.items()
            if server in names
        ]

    def _tool(self, server: str, tool: ServerTool, exposed: str) -> Tool:
        connection = self.connection(server)

        async def execute(arguments: dict[str, Any], context: Any) -> Any:
            request = getattr(context, "request", None)
            typed = getattr(context, "typed", False)
            await self.authorize(connection, tool, exposed, arguments, request, typed)
            show = getattr(self.interaction.asker, "progress", None)

            async def progress(done: float, total: float | None, message: str | None) -> None:
                if show is not None:
                    show(Progress(server, exposed, done, total, message))

            try:
                return await connection.call(
                    tool.name, arguments, request, progress if show is not None else None
                )
            except ToolError:
                _stop_for_login([connection])
                raise
            finally:
                if show is not None:
                    show(Progress(server, exposed, done=True))
                if connection.login_problem is None:
                    for warning in self._new_warnings([connection]):
                        self.notify(warning)

        return Tool(exposed, tool.description, execute, tool.input_schema)

    # approval and elicitation

    async def authorize(
        self,
        connection: ServerConnection,
        tool: ServerTool,
        exposed: str,
        arguments: dict[str, Any],
        request: Any = None,
        typed: bool = False,
    ) -> None:
        """Return when the call may run; else raise the ToolError the model reads.
        A call the user typed (``typed``) is theirs to make: approval guards the
        model's choices. The time the user takes to answer does not count toward
        ``request``'s timeout."""
        config = connection.config
        if typed or self.interaction.approve_all or config.approves(tool.name) or tool.read_only:
            return
        asker = self.interaction.asker
        call = ToolCall(config.name, tool.name, exposed, dict(arguments))
        if asker is None:
            decision = "unasked"
        else:
            with request.waiting_on_user() if request is not None else contextlib.nullcontext():
                decision = await asker.approve(call)
        if decision == "approved":
            return
        if decision == "declined":
            raise ToolError(f"the user did not approve this call of {exposed}; it was not run")
        if asker is None:
            self._warn(
                f"MCP tool {exposed!r} was refused: it needs approval and there is no one to "
                f'ask; approve it with approve = "always" or approve = ["{tool.name}"] in '
                f"[mcp_servers.{config.name}]"
            )
        raise ToolError(
            f"{exposed} needs the user's approval and there was no one to ask; it was not "
            "run (the user can approve it in foliko's config)"
        )

    async def elicit(self, request: Elicitation) -> Answer:
        """The answer to a server's question, by the policy of its config (or the
        interaction's): ask the user, accept the defaults, or decline."""
        if request.mode == "url":
            self._warn(
                f"MCP server {request.server!r} asked to send the user to {request.url} "
                f"({request.message}); foliko declines URL-mode requests: open it yourself "
                "if you trust it"
            )
            return DECLINE
        policy = self.interaction.elicitation or self.configs[request.server].elicitation
        if policy == "ask":
            asker = self.interaction.asker
            answer = None if asker is None else await asker.elicit(request)
            if answer is not None:
                return answer
            self._warn(
                f"MCP server {request.server!r} asked a question and it was declined: there "
                f'is no one to ask; elicitation = "defaults" in [mcp_servers.{request.server}] '
                "accepts its defaults instead"
            )
        elif policy == "defaults":
            from foliko_cli.mcp.forms import defaults_answer

            return defaults_answer(request.schema or {})
        return DECLINE

    def _warn(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            self.notify(message)

    # listings

    def tool_rows(self, names: Iterable[str]) -> list[dict[str, Any]]:
        """Every listed tool of these servers, with whether the model is offered it."""
        rows = []
        for name in names:
            connection = self.connection(name)
            for tool in connection.tools:
                rows.append(
                    {
                        "name": exposed_name(name, tool.name),
                        "server": name,
                        "tool": tool.name,
                        "offered": connection.config.offers(tool.name),
                        "enabled": connection.config.enabled,
                        "read_only": tool.read_only,
                        "description": tool.description,
                        "input_schema": tool.input_schema,
                    }
                )
        return rows

    def status(self, name: str) -> dict[str, Any]:
        config = self.configs[name]
        connection = self.connection(name)
        return {
            "name": name,
            "transport": config.transport,
            "target": config.target,
            "enabled": config.enabled,
            "state": connection.state,
            "tools": len(self.server_tools(name)),
            "restarts": connection.restarts,
            "error": connection.error,
        }

    async def aclose(self) -> None:
        """Stop the servers that run (together), and close the rest."""
        running = [c for c in self._connections.values() if c.running]
        for connection in self._connections.values():
            if not connection.running:
                await connection.aclose()
        if running:
            import asyncio

            await asyncio.gather(*(c.aclose() for c in running))


async def _start_all(connections: Iterable[ServerConnection]) -> None:
    """Start these servers together; none to start needs no event loop (a turn
    that offers cached tool lists runs without one: see common/loop.py)."""
    starting = list(connections)
    if not starting:
        return
    require_loop("starting MCP servers")
    import asyncio

    await asyncio.gather(*(c.start() for c in starting))
