"""How to reach one server: a stdio child process or a Streamable HTTP endpoint.

A stdio child gets a small safe environment plus the server's own ``env``;
nothing else of foliko's environment (API keys, storage URLs) reaches it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from foliko_cli.mcp.server_config import ServerConfig, expand, references

SAFE_VARIABLES = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TMPDIR",
    "TZ",
)
HTTP_CONNECT_TIMEOUT = 30.0
HTTP_READ_TIMEOUT = 300.0


LISTEN_WAIT = 2.0
"""At most this long, after the handshake, for the server's GET stream to open."""


class Transport(NamedTuple):
    """An ``mcp`` transport (an async context manager) and the secrets it carries."""

    streams: Any
    secrets: tuple[str, ...]
    auth: Any = None
    """The OAuth provider (``auth = "oauth"``), whose ``problem`` says why it
    stopped a connection that needs the user's login."""
    listening: ListenGate | None = None
    """Over HTTP: whether the server's GET stream has been answered."""


class ListenGate:
    """When the server's own stream (the GET a client opens once a server gave it
    a session) has been answered, so that foliko's first request follows it.

    The SDK (mcp 2.3, ``streamable_http.post_writer``) opens that stream in a
    task of its own as the handshake ends, so the first request may reach the
    server first. A server then cannot tell that GET from the resumption of a
    request's stream that closed meanwhile (SEP-1699: the resumption carries
    ``Last-Event-ID``, the fresh stream none): the conformance suite's
    ``sse-retry`` server answers the request on it, and the client, done,
    never resumes with ``Last-Event-ID``. Waiting for the stream's answer (a
    stream, or a 405 from a server without one) before the first request puts
    them in order. Only a server that gave a session gets a GET stream.
    """

    def __init__(self, url: str) -> None:
        import anyio
        import httpx2

        self.url = httpx2.URL(url)
        self.session = False
        self.answered = anyio.Event()

    async def on_response(self, response: Any) -> None:
        """An ``httpx2`` response hook: called as each response's headers arrive."""
        request = response.request
        if request.url != self.url:
            return
        if request.method == "GET":
            self.answered.set()
        elif response.headers.get("mcp-session-id"):
            self.session = True

    async def wait(self) -> None:
        import anyio

        if self.session:
            with anyio.move_on_after(LISTEN_WAIT):
                await self.answered.wait()


def child_environment(
    config: ServerConfig, environment: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The whole environment of the server's process."""
    environment = os.environ if environment is None else environment
    base = {
        name: value
        for name, value in environment.items()
        if (name in SAFE_VARIABLES or name.startswith("LC_")) and not value.startswith("()")
    }
    own = {
        name: expand(value, environment, f"[mcp_servers.{config.name}] env.{name}")
        for name, value in config.env
    }
    return {**base, **own}


def _expanded_values(config: ServerConfig, environment: Mapping[str, str]) -> tuple[str, ...]:
    """Values of ``env`` entries that came from ``${VAR}`` references."""
    return tuple(environment[name] for name, value in config.env if references(value))


@asynccontextmanager
async def _http_streams(url: str, client: Any) -> AsyncIterator[Any]:
    from mcp.client.streamable_http import streamable_http_client

    async with client, streamable_http_client(url, http_client=client) as streams:
        yield streams


def open_transport(
    config: ServerConfig, errlog: TextIO, home: Path | None = None, login: Any = None
) -> Transport:
    """The transport for ``config``; a ``${VAR}`` that is not set raises UnsetVariableError.

    Every header value counts as a secret (they are credentials, typically),
    and so do the URL's password and query string, and every ``env`` value
    read from a ``${VAR}``. An OAuth server's tokens live under ``home``;
    ``login`` (``oauth.provider.Login``) lets it authorize in the browser.
    """
    if config.command is not None:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        from foliko_cli.mcp.group import ending_group

        environment = child_environment(config)
        parameters = StdioServerParameters(
            command=config.command,
            args=list(config.args),
            env=environment,
            cwd=os.path.expanduser(config.cwd) if config.cwd else None,
        )
        return Transport(
            ending_group(stdio_client(parameters, errlog=errlog)),
            _expanded_values(config, environment),
        )
    import httpx2

    headers = {
        key: expand(value, os.environ, f"[mcp_servers.{config.name}] headers.{key}")
        for key, value in config.headers
    }
    auth = None
    if config.auth == "oauth":
        from foliko_cli.common.settings import load_settings
        from foliko_cli.mcp.oauth.provider import build_auth

        auth = build_auth(config, home or load_settings().home, login)
    url = config.url or ""
    gate = ListenGate(url)
    client = httpx2.AsyncClient(
        headers=headers,
        auth=auth,
        timeout=httpx2.Timeout(HTTP_CONNECT_TIMEOUT, read=HTTP_READ_TIMEOUT),
        event_hooks={"response": [gate.on_response]},
    )
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    credentials = [value.partition(" ")[2] for value in headers.values()]  # after "Bearer"
    secrets = (*headers.values(), *credentials, parts.password or "", parts.query)
    if auth is not None and auth.secret:
        secrets = (*secrets, auth.secret)
    return Transport(_http_streams(url, client), tuple(s for s in secrets if s), auth, gate)


def transport_secrets(secrets: tuple[str, ...], auth: Any) -> tuple[str, ...]:
    """A transport's secrets and, for OAuth, its provider's as they are now."""
    return (*secrets, *auth.secrets()) if auth is not None else secrets


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with every secret hidden, in every form a server may echo it."""
    from foliko_cli.common.redaction import scrub as hidden

    return hidden(text, secrets)
