"""Real MCP servers for the tests: ``stdio_server.py`` (written with the ``mcp``
package) and the reference server ``@modelcontextprotocol/server-everything``
from npm, installed once into ~/.cache/foliko-tests/npm (tests/npm_cache.py).

Without npm the everything-server tests skip, except under
FOLIKO_REQUIRE_SERVICES=1, where that is a failure.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from npm_cache import NPM_CACHE as CACHE_ROOT
from npm_cache import npm_install
from storage.services import require_or_skip

from foliko_cli.cli.main import cli

EVERYTHING_PACKAGE = "@modelcontextprotocol/server-everything"
NPM_CACHE = CACHE_ROOT / "npm"
LISTEN_TIMEOUT_S = 30
PROMPT_WAIT_S = 60


@pytest.fixture
def invoke():
    """Run a foliko command in-process (the mcp package is imported once per test run)."""
    runner = CliRunner()

    def run(*args: str, env: dict[str, str] | None = None):
        return runner.invoke(cli, list(args), env=env, catch_exceptions=False)

    return run


@pytest.fixture
def chooser(monkeypatch) -> Iterator[str]:
    """A model whose tool calls are its own choices (``chooses_tools``): what
    approval is for. The name to pass as ``-m``; the environment points at it."""
    from models.fake_servers import FakeServer, chooses_tools

    server = FakeServer()
    server.default = chooses_tools
    server.start()
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    yield "openai:chooser"
    server.stop()


@pytest.fixture
def spawn(foliko_home: Path):
    """The installed foliko on a pseudo-terminal (pexpect), in the test's directory."""
    pexpect = pytest.importorskip("pexpect")
    children = []

    def start(*args: str):
        env = {**os.environ, "FOLIKO_HOME": str(foliko_home), "FOLIKO_MODEL": "echo"}
        child = pexpect.spawn(
            str(Path(sys.executable).with_name("foliko")),
            list(args),
            env=env,
            encoding="utf-8",
            echo=False,
            timeout=PROMPT_WAIT_S,
            dimensions=(24, 200),
            # SIGINT stays ignored across exec under nohup: give the child its default back
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        children.append(child)
        return child

    yield start
    for child in children:
        child.close(force=True)


@pytest.fixture
def configure(tmp_path: Path):
    """``configure(NAME=table, ...)`` writes foliko.toml with those MCP servers
    (by default one resources server, ``r``); a test file may define its own."""
    from mcp_support import resources_server, write_config

    def write(**servers: dict) -> None:
        write_config(tmp_path / "foliko.toml", servers or {"r": resources_server()})

    return write


@pytest.fixture(scope="session")
def everything_bin() -> Path:
    """The everything server's executable, installed once per machine."""
    modules = npm_install(
        NPM_CACHE, "npm (for the MCP everything server)", packages=[EVERYTHING_PACKAGE]
    )
    executable = modules / ".bin" / "mcp-server-everything"
    require_or_skip(
        "npm (for the MCP everything server)", executable.exists(), f"{executable} is missing"
    )
    return executable


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_listening(port: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + LISTEN_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the everything server exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"the everything server did not listen on port {port}")


class EverythingHTTP:
    """The everything server in Streamable HTTP mode on one port, (re)started on demand."""

    def __init__(self, executable: Path):
        self.executable = executable
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [str(self.executable), "streamableHttp"],
            env={
                "PATH": os.environ.get("PATH", ""),
                "HOME": str(Path.home()),
                "PORT": str(self.port),
            },
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_listening(self.port, self.process)

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None


@pytest.fixture
def everything_http_server(everything_bin: Path) -> Iterator[EverythingHTTP]:
    server = EverythingHTTP(everything_bin)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def everything_http(everything_bin: Path) -> Iterator[str]:
    """The everything server in Streamable HTTP mode on a free port: its /mcp URL."""
    server = EverythingHTTP(everything_bin)
    try:
        server.start()
        yield server.url
    finally:
        server.stop()
