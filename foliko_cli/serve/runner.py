"""Running the app on uvicorn, with the shutdown ``foliko serve`` promises.

SIGTERM and SIGINT stop accepting connections, give running requests
``grace`` seconds, cancel the rest (their turns are not saved), close the
services and return: the command exits 0. With several workers the parent
binds the socket, announces it and lets uvicorn's supervisor run one
process per worker, each with its own services, which ends with the parent
(lifetime.py). Every connection has the limits of connections.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import uvicorn

from foliko_cli.serve.app import OPTIONS_ENV, ServeOptions, create_app
from foliko_cli.serve.connections import Limits, ServeConfig

if TYPE_CHECKING:
    from starlette.applications import Starlette

DEFAULT_LIMITS = Limits()


class GracefulServer(uvicorn.Server):
    """uvicorn's server, announcing readiness and not re-raising the signal
    that stopped it (uvicorn does, which would end the process by it)."""

    def __init__(self, config: uvicorn.Config, ready: Callable[[str], None] | None = None):
        super().__init__(config)
        self.ready = ready

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {
            sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.ready is not None and self.started:
            self.ready(self.url())

    def url(self) -> str:
        for server in self.servers:
            for sock in server.sockets:
                host, port = sock.getsockname()[:2]
                shown = f"[{host}]" if ":" in host else host
                return f"http://{shown}:{port}"
        return f"http://{self.config.host}:{self.config.port}"


def listening_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound as uvicorn binds it; OSError when it cannot be
    (uvicorn would log the error and exit by itself)."""
    sock = socket.socket(family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _config(
    app: Starlette | str,
    *,
    host: str,
    port: int,
    workers: int,
    grace: float,
    limits: Limits,
    factory: bool = False,
) -> ServeConfig:
    return ServeConfig(
        app,
        limits=limits,
        host=host,
        port=port,
        workers=workers,
        factory=factory,
        timeout_graceful_shutdown=grace,
        log_level="warning",
        access_log=False,
        lifespan="on",
        server_header=False,
    )


def run(
    options: ServeOptions,
    *,
    host: str,
    port: int,
    workers: int,
    grace: float,
    ready: Callable[[str], None],
    limits: Limits = DEFAULT_LIMITS,
) -> bool:
    """Serve until a signal; False when the server could not start. An address
    that cannot be bound (a port in use) raises OSError before anything starts."""
    if workers == 1:
        app = create_app(options)
        config = _config(app, host=host, port=port, workers=1, grace=grace, limits=limits)
        sock = listening_socket(host, port)
        server = GracefulServer(config, ready)
        server.run(sockets=[sock])
        return server.started
    from uvicorn.supervisors import Multiprocess

    os.environ[OPTIONS_ENV] = options._replace(parent_pid=os.getpid(), grace=grace).to_env()
    config = _config(
        "foliko_cli.serve.app:app_from_environment",
        host=host,
        port=port,
        workers=workers,
        grace=grace,
        limits=limits,
        factory=True,
    )
    sock = listening_socket(host, port)
    sock.listen(config.backlog)  # connections queue until a worker accepts them
    bound_host, bound_port = sock.getsockname()[:2]
    ready(f"http://{bound_host}:{bound_port}")
    Multiprocess(config, sockets=[sock]).run()
    return True
