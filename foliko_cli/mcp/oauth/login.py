"""``login``: authorize foliko for one server now, in the user's browser (or,
with the client-credentials grant, by its secret); ``logout``: forget it."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from foliko_cli.errors import MCPServerError, UsageError
from foliko_cli.mcp.oauth.store import TokenFile, token_path
from foliko_cli.mcp.server_config import ServerConfig


def _oauth_server(config: ServerConfig) -> None:
    if config.auth != "oauth":
        raise UsageError(
            f"MCP server {config.name!r} does not use OAuth; "
            f'set auth = "oauth" in [mcp_servers.{config.name}] if it needs a login'
        )


async def login(config: ServerConfig, home: Path, open_url: Callable[[str], None]) -> int:
    """Authorize anew (earlier tokens are dropped first) and list the server's
    tools with the new token; their number. ``open_url`` shows the user the
    authorization URL."""
    _oauth_server(config)
    from mcp import Client
    from mcp_types import Implementation

    from foliko_cli import __version__
    from foliko_cli.mcp.connection import CLIENT_NAME, _innermost, _keep_sdk_logs_off_stderr
    from foliko_cli.mcp.oauth.loopback import Loopback
    from foliko_cli.mcp.oauth.provider import Login
    from foliko_cli.mcp.transport import open_transport, scrub, transport_secrets

    _keep_sdk_logs_off_stderr()
    TokenFile(token_path(home, config.name), config.url or "").forget_tokens()
    loopback = Loopback(config.redirect_port or 0)
    try:
        await loopback.start()
    except OSError as exc:
        raise UsageError(
            f"cannot listen for the authorization's redirect on 127.0.0.1 "
            f"port {loopback.port} ({exc.strerror}); free it or change redirect_port"
        ) from None
    transport = None
    try:
        with tempfile.TemporaryFile("w+", encoding="utf-8") as errlog:
            transport = open_transport(config, errlog, home, Login(open_url, loopback))
            client = Client(
                transport.streams,
                client_info=Implementation(name=CLIENT_NAME, version=__version__),
                cache=None,
            )
            async with client:
                return len((await client.list_tools()).tools)
    except Exception as exc:
        problem = getattr(transport.auth if transport else None, "problem", None)
        if problem is not None:
            raise UsageError(str(problem)) from None
        inner = _innermost(exc)
        text = str(inner).strip().splitlines()[0] if str(inner).strip() else ""
        reason = f"{type(inner).__name__}: {text}" if text else type(inner).__name__
        secrets = transport_secrets(transport.secrets, transport.auth) if transport else ()
        raise MCPServerError(
            f"login to MCP server {config.name!r} failed: {scrub(reason, secrets)}"
        ) from None
    finally:
        await loopback.close()


def logout(config: ServerConfig, home: Path) -> bool:
    """Forget the server's tokens and registration; False when there were none."""
    _oauth_server(config)
    return TokenFile(token_path(home, config.name), config.url or "").remove()
