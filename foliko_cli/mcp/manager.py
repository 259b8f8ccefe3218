"""The MCP servers of one process: which to start, their tools, their state, shutdown.

The manager owns one ``ServerConnection`` per configured server, created
and started only when a chat (or a listing) needs that server, and closes
them all in ``aclose``. A server that cannot start is reported once as a
warning; the chat goes on without its tools.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from foliko_cli.errors import UsageError
from foliko_cli.mcp.config import ServerConfig, server_configs
from foliko_cli.mcp.connection import ServerConnection, ServerTool
from foliko_cli.mcp.names import exposed_name
from foliko_cli.tools import Tool


def _tool(connection: ServerConnection, tool: ServerTool) -> Tool:
    async def execute(arguments: dict[str, Any], framework: Any) -> str:
        return await connection.call(tool.name, arguments)

    return Tool(
        exposed_name(connection.name, tool.name), tool.description, execute, tool.input_schema
    )


class MCPManager:
    """With ``shared``, the servers not marked ``per_user`` are ``shared``'s
    connections (one process for every manager built on it); only the others
    are this manager's own, started and closed by it."""

    def __init__(self, table: Mapping[str, Mapping[str, Any]], shared: MCPManager | None = None):
        self.configs: dict[str, ServerConfig] = (
            shared.configs if shared is not None else server_configs(table)
        )
        self.shared = shared
        self._connections: dict[str, ServerConnection] = {}
        self._warned: set[str] = shared._warned if shared is not None else set()

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
            self._connections[name] = ServerConnection(self.configs[name])
        return self._connections[name]

    async def start(self, names: Iterable[str]) -> list[str]:
        """Start the servers (together); return one warning per problem not yet reported."""
        connections = [self.connection(name) for name in dict.fromkeys(names)]
        await asyncio.gather(*(c.start() for c in connections if c.state in ("idle", "exited")))
        warnings = []
        for connection in connections:
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
            if connection.state == "ready" and tool not in listed
        ]

    def server_tools(self, name: str) -> list[ServerTool]:
        """What the model is offered from server ``name`` (after ``tools``/``exclude``)."""
        connection = self.connection(name)
        return [tool for tool in connection.tools if connection.config.offers(tool.name)]

    def tools(self, names: Iterable[str]) -> list[Tool]:
        """foliko tools for the started servers among ``names``."""
        return [
            _tool(self.connection(name), tool)
            for name in dict.fromkeys(names)
            for tool in self.server_tools(name)
        ]

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
        await asyncio.gather(*(c.aclose() for c in self._connections.values()))
