"""``foliko mcp``: the MCP servers in the config, their state, tools, resources
and prompts; ``foliko mcp serve``: foliko's own sessions as an MCP server over stdio
(or Streamable HTTP with ``--http``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from foliko_cli.cli.app import open_facade
from foliko_cli.cli.output import emit_rows, format_option, note
from foliko_cli.cli.params import storage_option
from foliko_cli.cli.serve import Listen, listen_options, start
from foliko_cli.errors import MCPServerError, UsageError

if TYPE_CHECKING:
    from types import ModuleType

    from foliko_cli.common.settings import Settings
    from foliko_cli.service.facade import Foliko
    from foliko_cli.service.library import ServerConfig

_NONE_CONFIGURED = "no MCP servers configured; add [mcp_servers.NAME] to foliko.toml"


_SHORT_DESCRIPTION = 80


def _yes_no(value: bool) -> str:
    return "yes" if value else "no"


def _complete_servers(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Server names from the config; silent when the config cannot be read."""
    try:
        from foliko_cli.common.settings import load_settings

        names = load_settings().mcp_servers
    except Exception:
        return []
    return [name for name in sorted(names) if name.startswith(incomplete)]


def _short(text: str) -> str:
    """A description's first line, cut for a table (JSON and TSV keep it whole)."""
    line = (text or "").strip().split("\n", 1)[0]
    return line if len(line) <= _SHORT_DESCRIPTION else line[: _SHORT_DESCRIPTION - 1] + "…"


@click.group()
def mcp() -> None:
    """Model Context Protocol servers, configured as [mcp_servers.NAME].

    \b
    Example:
      foliko mcp list
      foliko mcp tools files --json
      foliko mcp resources files
      foliko mcp prompts files
      foliko mcp serve
    """


@mcp.command("list")
@format_option
@click.pass_context
def list_servers(ctx: click.Context, fmt: str) -> None:
    """Start every configured server and show its state, tool count and any error.

    \b
    Example:
      foliko mcp list --json
    """
    rows = open_facade(ctx).mcp_status()
    emit_rows(
        rows,
        {
            "name": "name",
            "transport": "transport",
            "enabled": "enabled",
            "state": "state",
            "tools": "tools",
            "error": "error",
        },
        fmt,
        human={"enabled": _yes_no},
    )
    if not rows:
        note(_NONE_CONFIGURED)


@mcp.command("tools")
@click.argument("server", required=False, shell_complete=_complete_servers)
@format_option
@click.pass_context
def list_tools(ctx: click.Context, server: str | None, fmt: str) -> None:
    """The tools of SERVER (or of every server), as the model sees them: SERVER__TOOL.

    JSON and NDJSON carry each tool's input schema. Tools the config's
    tools/exclude leave out are listed with offered = no.

    \b
    Example:
      foliko mcp tools
      foliko mcp tools files --json
    """
    facade = open_facade(ctx)
    rows = facade.mcp_tool_list(server)
    if server is not None:
        status = facade.mcp.status(server)
        if status["state"] != "ready":
            raise MCPServerError(
                f"MCP server {server!r} is not available: {status['error']}; "
                "see 'foliko mcp list' and fix its [mcp_servers] table"
            )
    emit_rows(
        rows,
        {"name": "name", "offered": "offered", "description": "description"},
        fmt,
        human={"offered": _yes_no, "description": _short},
    )
    if not facade.mcp.configs:
        note(_NONE_CONFIGURED)


def _arguments(arguments: list[dict[str, Any]]) -> str:
    """``topic*, style``: a prompt's arguments, the required ones starred."""
    return ", ".join(a["name"] + ("*" if a["required"] else "") for a in arguments)


@mcp.command("resources")
@click.argument("server", required=False, shell_complete=_complete_servers)
@format_option
@click.pass_context
def list_resources(ctx: click.Context, server: str | None, fmt: str) -> None:
    """The resources of SERVER (or of every server): attach one with -a mcp:SERVER:URI.

    Resource templates are listed too (template = yes; fill in the URI's
    {placeholders} to attach one). A server that has no resources lists none.

    \b
    Example:
      foliko mcp resources files
      foliko chat -s s1 -a mcp:files:file:///notes.md "Summarise this"
    """
    facade = open_facade(ctx)
    rows = facade.mcp_resources(server)
    emit_rows(
        rows,
        {
            "server": "server",
            "uri": "uri",
            "mime_type": "mime type",
            "template": "template",
            "description": "description",
        },
        fmt,
        human={"template": _yes_no, "description": _short},
    )
    _note_none(facade, server, rows, "resources")


def _note_none(facade: Foliko, server: str | None, rows: list[Any], kind: str) -> None:
    """Say on stderr why a listing is empty: no server configured, or none of ``kind``."""
    if not facade.mcp.configs:
        note(_NONE_CONFIGURED)
    elif server is not None and not rows:
        note(f"MCP server {server!r} has no {kind}")


@mcp.command("prompts")
@click.argument("server", required=False, shell_complete=_complete_servers)
@format_option
@click.pass_context
def list_prompts(ctx: click.Context, server: str | None, fmt: str) -> None:
    """The prompts of SERVER (or of every server): send one with /prompt SERVER__NAME key=value.

    The table stars required arguments; JSON carries each argument's description.
    A server that has no prompts lists none.

    \b
    Example:
      foliko mcp prompts files
      foliko chat -s s1 "/prompt files__review path=README.md"
    """
    facade = open_facade(ctx)
    rows = facade.mcp_prompts(server)
    emit_rows(
        rows,
        {"name": "name", "arguments": "arguments", "description": "description"},
        fmt,
        human={"arguments": _arguments, "description": _short},
    )
    _note_none(facade, server, rows, "prompts")


@mcp.command("serve")
@storage_option
@click.option(
    "--http",
    is_flag=True,
    help="Serve over Streamable HTTP at /mcp (with foliko serve's Host/Origin checks "
    "and --api-keys) instead of stdio.",
)
@click.option(
    "--allow-write",
    is_flag=True,
    help="Also offer the tools that change sessions (chat). Without it the server only reads.",
)
@click.option(
    "--sessions",
    "patterns",
    multiple=True,
    metavar="PATTERN",
    help="Only the sessions whose id matches PATTERN (a glob: 'proj-*'; or since:DATE, "
    "those created since); repeat for more. Any other session is not found.",
)
@listen_options(8000)
@click.pass_context
def serve_sessions(
    ctx: click.Context,
    http: bool,
    allow_write: bool,
    patterns: tuple[str, ...],
    host: str,
    port: int,
    api_keys: str | None,
    allowed_hosts: tuple[str, ...],
    allow_origins: tuple[str, ...],
) -> None:
    """Offer the sessions to other MCP hosts, over stdin and stdout (or HTTP).

    Tools list_sessions, search_sessions and read_session (read only), and
    with --allow-write chat (one turn); each session as the resource
    foliko://sessions/ID; each agent of the config as a prompt. --sessions
    limits what the host sees; a session outside is "not found" everywhere.
    Every call is recorded in the audit log (foliko audit), never its content.
    It serves until stdin ends (exit 0; requests still running are cancelled,
    a chat turn then not saved) or
    SIGINT/SIGTERM (exit 130/143); diagnostics go to stderr, stdout carries
    protocol messages only. With --user NAME, NAME's sessions (as foliko serve
    --api-keys keeps them). foliko serve offers the same at /mcp.

    With --http the same server listens at http://HOST:PORT/mcp (Streamable
    HTTP, stateless, JSON answers) until SIGTERM/SIGINT (exit 0), behind foliko
    serve's guard: Host and Origin checked, --api-keys for several users.

    \b
    Examples (an MCP host's config, e.g. Claude Desktop's; then over HTTP):
      {"mcpServers": {"foliko": {"command": "foliko", "args": ["mcp", "serve"]}}}
      foliko mcp serve --sessions 'shop-*'
      foliko mcp serve --http --port 8000 --allow-write
    """
    try:
        import mcp.server  # noqa: F401
    except ImportError:
        from foliko_cli.common.extras import extra_hint

        raise UsageError(extra_hint("foliko mcp serve", "mcp")) from None
    from foliko_cli.service.audit import Scope

    scope = Scope.of(allow_write, patterns)  # a bad pattern exits 2 here
    listen = Listen(host, port, api_keys, allowed_hosts, allow_origins)
    if http:
        start(
            ctx,
            listen,
            "foliko mcp serve --http",
            mcp_only=True,
            allow_write=allow_write,
            sessions=patterns,
        )
    given = [
        param.opts[0]
        for param in ctx.command.params
        if param.name in Listen._fields
        and ctx.get_parameter_source(param.name) is not click.core.ParameterSource.DEFAULT
    ]
    if given:
        raise UsageError(f"{given[0]} is for serving over HTTP", fix="add --http")
    from foliko_cli.mcp_server.stdio import serve_stdio

    facade = open_facade(ctx, ask=False, scope=scope)  # stdin carries the protocol
    facade.run(serve_stdio(facade.service))


def _oauth_config(ctx: click.Context, server: str) -> tuple[Settings, ServerConfig]:
    from foliko_cli.cli.app import settings_for
    from foliko_cli.service.library import server_config

    settings = settings_for(ctx)
    entry = settings.mcp_servers.get(server)
    if entry is None:
        known = ", ".join(sorted(settings.mcp_servers)) or "none configured"
        raise UsageError(
            f"unknown MCP server {server!r} (known: {known}); "
            f"define it as [mcp_servers.{server}] in foliko.toml"
        )
    return settings, server_config(server, entry)


def _show_authorization(url: str) -> None:
    """Show the URL (the browser may not open, or be on another machine), then
    open it with ``webbrowser``, which honours $BROWSER."""
    import threading
    import webbrowser

    note(f"authorize foliko in your browser (opening it now) or at: {url}")
    # A browser command may wait until the page is done; the redirect it ends
    # with needs this process's event loop, so the command runs in a thread.
    threading.Thread(target=_open_quietly, args=(webbrowser, url), daemon=True).start()


def _open_quietly(webbrowser: ModuleType, url: str) -> None:
    import contextlib

    with contextlib.suppress(webbrowser.Error, OSError):
        webbrowser.open(url)


@mcp.command("login")
@click.argument("server", shell_complete=_complete_servers)
@click.pass_context
def login(ctx: click.Context, server: str) -> None:
    """Authorize foliko for SERVER (auth = "oauth"), in your browser.

    The page opens in the browser ($BROWSER, else the system's); the
    authorization comes back to a listener on 127.0.0.1. With grant =
    "client_credentials" no browser is needed. The tokens are kept in
    FOLIKO_HOME/mcp-auth/SERVER.json (readable by you only) and refreshed
    before they expire.

    \b
    Example:
      foliko mcp login github
    """
    import asyncio

    from foliko_cli.service.library import mcp_login as authorize

    settings, config = _oauth_config(ctx, server)
    tools = asyncio.run(authorize(config, settings.home, _show_authorization))
    note(f"logged in to MCP server {server!r} ({tools} tools)")


@mcp.command("logout")
@click.argument("server", shell_complete=_complete_servers)
@click.pass_context
def logout(ctx: click.Context, server: str) -> None:
    """Forget SERVER's tokens and client registration.

    \b
    Example:
      foliko mcp logout github
    """
    from foliko_cli.service.library import mcp_logout as forget

    settings, config = _oauth_config(ctx, server)
    if forget(config, settings.home):
        note(f"logged out of MCP server {server!r}")
    else:
        note(f"MCP server {server!r} had no login to forget")
