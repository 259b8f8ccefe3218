"""``foliko serve``: the sessions over HTTP, OpenAI-compatible (see foliko_cli/serve/)."""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Callable
from typing import Any, NamedTuple, NoReturn

import click

from foliko_cli.cli.app import settings_for
from foliko_cli.cli.output import note
from foliko_cli.errors import FolikoError, ServeStartError, UsageError

DEFAULT_GRACE = 10.0


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def listen_options(default_port: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Where a server listens and who may call it: ``--host``, ``--port``,
    ``--api-keys``, ``--allowed-host``, ``--allow-origin`` (``foliko serve`` and
    ``foliko mcp serve --http``)."""
    options = [
        click.option(
            "--host", default="127.0.0.1", show_default=True, help="Address to listen on."
        ),
        click.option(
            "--port", default=default_port, show_default=True, type=click.IntRange(0, 65535)
        ),
        click.option(
            "--api-keys",
            "api_keys",
            type=click.Path(dir_okay=False),
            metavar="FILE",
            help='TOML file of [keys] "KEY" = "user" (mode 600); then every request needs '
            "Authorization: Bearer KEY and each user sees only their own sessions. A key "
            'may be limited: "KEY" = {user = "ann", scope = "read", sessions = ["proj-*"]}.',
        ),
        click.option(
            "--allowed-host",
            "allowed_hosts",
            multiple=True,
            metavar="NAME",
            help="A Host name to answer to besides loopback and the address listened on "
            "(repeatable; *.example.com for its subdomains); others get 421.",
        ),
        click.option(
            "--allow-origin",
            "allow_origins",
            multiple=True,
            metavar="ORIGIN",
            help="A web site (scheme://host[:port]) whose pages may call the server, with "
            "CORS (repeatable); other sites get 403.",
        ),
    ]

    def apply(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            command = option(command)
        return command

    return apply


class Listen(NamedTuple):
    host: str
    port: int
    api_keys: str | None
    allowed_hosts: tuple[str, ...]
    allow_origins: tuple[str, ...]


@click.command()
@listen_options(8080)
@click.option(
    "--workers", default=1, show_default=True, type=click.IntRange(1, 64), help="Processes."
)
@click.option(
    "--grace",
    default=DEFAULT_GRACE,
    show_default=True,
    type=click.FloatRange(0, 3600),
    metavar="S",
    help="On SIGTERM/SIGINT, seconds running turns get to finish; the rest are not saved.",
)
@click.option(
    "--header-timeout",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0.01, 3600),
    metavar="S",
    help="Close a connection whose request headers are not in after S seconds.",
)
@click.option(
    "--keep-alive",
    default=15.0,
    show_default=True,
    type=click.FloatRange(0.01, 3600),
    metavar="S",
    help="Close a connection idle S seconds between requests.",
)
@click.option(
    "--max-connections",
    default=1000,
    show_default=True,
    type=click.IntRange(1),
    metavar="N",
    help="Per worker; past N open connections requests get 503.",
)
@click.option(
    "--max-header-bytes",
    default=64 * 1024,
    show_default=True,
    type=click.IntRange(1024),
    metavar="N",
    help="Larger request headers get 431.",
)
@click.option(
    "--log-format",
    type=click.Choice(("text", "json")),
    default="text",
    show_default=True,
    help="The access log on stderr: one line, or one JSON object, per request.",
)
@click.option("--no-access-log", is_flag=True, help="Write no access log.")
@click.pass_context
def serve(
    ctx: click.Context,
    host: str,
    port: int,
    api_keys: str | None,
    allowed_hosts: tuple[str, ...],
    allow_origins: tuple[str, ...],
    workers: int,
    grace: float,
    header_timeout: float,
    keep_alive: float,
    max_connections: int,
    max_header_bytes: int,
    log_format: str,
    no_access_log: bool,
) -> None:
    """Serve the sessions over HTTP: OpenAI Responses, Conversations and Chat
    Completions, the native /v1/sessions API and a web page at /.

    \b
    Examples:
      foliko serve
      foliko --storage postgresql://db/foliko serve --host 0.0.0.0 --api-keys keys.toml
    """
    require_serve_extra("foliko serve")
    from foliko_cli.serve.connections import Limits

    start(
        ctx,
        Listen(host, port, api_keys, allowed_hosts, allow_origins),
        "foliko serve",
        access_log=None if no_access_log else log_format,
        workers=workers,
        grace=grace,
        limits=Limits(header_timeout, keep_alive, max_connections, max_header_bytes),
    )


def require_serve_extra(what: str) -> None:
    """A usage error naming the 'serve' extra when its packages are not installed."""
    try:
        import httptools  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        from foliko_cli.common.extras import extra_hint

        raise UsageError(extra_hint(what, "serve")) from None


def start(
    ctx: click.Context,
    listen: Listen,
    what: str,
    *,
    access_log: str | None = "text",
    workers: int = 1,
    grace: float = DEFAULT_GRACE,
    limits: Any = None,
    mcp_only: bool = False,
    allow_write: bool = False,
    sessions: tuple[str, ...] = (),
) -> NoReturn:
    """Check the options, then serve until SIGTERM/SIGINT (exit 0). ``mcp_only``:
    only ``/mcp`` (and ``/healthz``), behind the same guard and keys."""
    require_serve_extra(what)
    settings = settings_for(ctx)  # an unknown key in the config's tables exits 2 here
    root = ctx.find_root().obj or {}
    if root.get("user") is not None:
        raise UsageError(
            f"{what} serves every user of its --api-keys file, not one --user",
            fix="leave out --user",
        )
    host = listen.host
    if listen.api_keys is None and not is_loopback(host):
        raise UsageError(
            f"refusing to serve on {host} without --api-keys",
            fix="pass --api-keys FILE, or listen on 127.0.0.1",
        )
    from foliko_cli.serve.app import ServeOptions
    from foliko_cli.serve.guard import WILDCARD_HOSTS, normalize_origin
    from foliko_cli.serve.runner import DEFAULT_LIMITS, run

    try:
        origins = tuple(normalize_origin(origin) for origin in listen.allow_origins)
    except ValueError as exc:
        raise UsageError(f"--allow-origin {exc}") from None
    options = ServeOptions(
        storage=root.get("storage"),
        api_keys=listen.api_keys,
        access_log=access_log,
        allowed_hosts=(*listen.allowed_hosts, *(() if host in WILDCARD_HOSTS else (host,))),
        allow_origins=origins,
        mcp_only=mcp_only,
        allow_write=allow_write,
        sessions=sessions,
    )
    if listen.api_keys is not None:
        from pathlib import Path

        from foliko_cli.serve.auth import load_keys

        load_keys(Path(listen.api_keys))
    from foliko_cli.serve.user_services import limits_from_env

    limits_from_env()  # a bad FOLIKO_SERVE_USER_CACHE / _IDLE exits 2 here, before any worker
    from foliko_cli.service.library import open_storage

    open_storage(settings.storage, settings.home)  # so does a bad --storage (nothing is opened)
    try:
        started = run(
            options,
            host=host,
            port=listen.port,
            workers=workers,
            grace=grace,
            ready=_ready,
            limits=DEFAULT_LIMITS if limits is None else limits,
        )
    except OSError as exc:
        raise bind_error(exc, host, listen.port) from None
    if not started:
        raise FolikoError("the server did not start (see the error above)")
    sys.exit(0)


def bind_error(exc: OSError, host: str, port: int) -> FolikoError:
    """The one line for an address that cannot be listened on (exit 3)."""
    import errno

    if exc.errno == errno.EADDRINUSE:
        problem = f"port {port} on {host} is already in use"
        fix = "choose another with --port N (or stop what listens there)"
    elif exc.errno == errno.EACCES:
        problem = f"port {port} on {host} needs privileges foliko does not have"
        fix = "choose a port above 1023 with --port N"
    else:
        problem = f"cannot listen on {host} port {port} ({exc.strerror or exc})"
        fix = "check --host, or choose another port with --port N"
    return ServeStartError(problem, fix=fix)


def _ready(url: str) -> None:
    note(f"listening on {url}")
    sys.stderr.flush()
