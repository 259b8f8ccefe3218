"""Fixtures: a real ``foliko serve`` per test, and the clients that talk to it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from models.fake_servers import FakeServer

from .servers import InProcessServe, ServeProcess, foliko_env


@pytest.fixture
def start_server(foliko_home: Path) -> Iterator:
    """Start servers; every one still running is killed when the test ends."""
    started: list[ServeProcess] = []

    def start(
        *args: str,
        storage: str | None = None,
        env: dict[str, str] | None = None,
        global_args: tuple[str, ...] = (),
        wait: bool = True,
    ) -> ServeProcess:
        options = [*global_args, *(["--storage", storage] if storage else [])]
        server = ServeProcess(list(args), foliko_env(foliko_home, env), options, home=foliko_home)
        started.append(server)
        return server.wait_ready() if wait else server

    yield start
    for server in started:
        server.kill()


@pytest.fixture(scope="module")
def server(request, tmp_path_factory) -> Iterator[ServeProcess | InProcessServe]:
    """One server for a whole test module, in its own home: in this process,
    unless the module is marked ``process`` (it reads the server's stderr, or
    signals it)."""
    home = tmp_path_factory.mktemp("serve-home")
    running: ServeProcess | InProcessServe
    if request.node.get_closest_marker("process") is None:
        running = InProcessServe(home)
    else:
        running = ServeProcess([], foliko_env(home), [], home=home).wait_ready()
    try:
        yield running
    finally:
        running.kill()


@pytest.fixture(scope="module")
def client(server):
    from openai import OpenAI

    with OpenAI(base_url=server.base_url, api_key="none", max_retries=0) as openai_client:
        yield openai_client


@pytest.fixture(scope="module")
def http(server):
    import httpx2 as httpx

    with httpx.Client(base_url=server.url, timeout=30) as raw:
        yield raw


@pytest.fixture
def model_server() -> Iterator[FakeServer]:
    """A fake OpenAI-compatible model server for the test (``queue`` its replies)."""
    server = FakeServer().start()
    try:
        yield server
    finally:
        server.stop()
