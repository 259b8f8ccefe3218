from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from foliko_cli.cli.main import cli


@pytest.fixture
def invoke():
    """Run a foliko command in-process; stdout and stderr are kept apart."""
    runner = CliRunner()

    def run(*args: str, input: str | bytes | None = None, env: dict[str, str] | None = None):
        return runner.invoke(cli, list(args), input=input, env=env, catch_exceptions=False)

    return run


@pytest.fixture
def show(invoke):
    def load(session_id: str, *extra: str) -> dict:
        result = invoke(*extra, "sessions", "show", session_id, "--json")
        assert result.exit_code == 0, result.stderr
        return orjson.loads(result.stdout)

    return load
