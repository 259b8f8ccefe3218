"""Fixtures for the remote provider tests: a fake model server and clean environments."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from .fake_servers import ANTHROPIC_KEY, OPENAI_KEY, FakeServer

_PROVIDER_VARIABLES = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "OLLAMA_HOST",
    "MY_KEY",
)
_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture(autouse=True)
def clean_provider_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No keys, base URLs or proxies from outside (tests/conftest.py gives an empty user
    config)."""
    for name in _PROVIDER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    server = FakeServer().start()
    try:
        yield server
    finally:
        server.stop()
    assert server.unplanned == 0, "foliko sent a request the test did not plan for"


@pytest.fixture
def openai_env(fake_server: FakeServer) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": f"{fake_server.url}/v1",
        "OPENAI_API_KEY": OPENAI_KEY,
        "FOLIKO_MODEL": "openai:some-model",
    }


@pytest.fixture
def anthropic_env(fake_server: FakeServer) -> dict[str, str]:
    return {
        "ANTHROPIC_BASE_URL": fake_server.url,
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
        "FOLIKO_MODEL": "anthropic:claude-x",
    }


@pytest.fixture
def show(foliko_home: Path):
    """The stored session as ``sessions show ID --json`` prints it (read in-process)."""
    from foliko_cli.messages.public import record_to_dict
    from foliko_cli.service.facade import Foliko

    def load(session_id: str) -> dict:
        with Foliko("sqlite", "echo", home=foliko_home) as foliko:
            return orjson.loads(orjson.dumps(record_to_dict(foliko.get_session(session_id))))

    return load


@pytest.fixture
def seed(foliko_home: Path):
    """Run echo-model turns in-process on the CLI's default storage (quicker than processes)."""
    from foliko_cli.service.facade import Foliko

    def run(session_id: str, *messages: str) -> None:
        with Foliko("sqlite", "echo", home=foliko_home) as foliko:
            for message in messages:
                foliko.chat(session_id, message)

    return run


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process retries back off for (almost) no time."""
    import foliko_cli.models.http as http

    monkeypatch.setattr(http, "BASE_DELAY", 0.001)


@pytest.fixture
def invoke():
    """Run a foliko command in-process (CliRunner); stdout and stderr kept apart."""
    from click.testing import CliRunner

    from foliko_cli.cli.main import cli

    runner = CliRunner()

    def run(*args: str, env: dict[str, str] | None = None):
        return runner.invoke(cli, list(args), input="", env=env, catch_exceptions=False)

    return run
