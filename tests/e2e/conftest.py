"""The e2e tier: the real ``foliko`` CLI against a real llama-server (marker ``e2e``).

Skipped with the reason when the llama-server binary is absent, except under
FOLIKO_REQUIRE_SERVICES=1 (CI), where that fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from .server import REQUIRED, LlamaServer, binary_problem


def pytest_collection_modifyitems(config, items) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.xdist_group("llama-server"))  # one server, one worker


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    problem = binary_problem()
    if problem:
        if REQUIRED:
            pytest.fail(f"FOLIKO_REQUIRE_SERVICES=1 but {problem}")
        pytest.skip(problem)
    server = LlamaServer(tmp_path_factory.mktemp("llama") / "llama-server.log").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def llama_env(llama: LlamaServer) -> dict[str, str]:
    """Only what a user would set to point foliko at the server."""
    return {
        "OPENAI_BASE_URL": f"{llama.url}/v1",
        "OPENAI_API_KEY": "x",
        "FOLIKO_MODEL": f"openai:{llama.model}",
    }


@pytest.fixture
def foliko(foliko_home: Path, llama_env: dict[str, str]):
    """Run the installed ``foliko`` against the server; FOLIKO_HOME is the test's."""
    installed = Path(sys.executable).with_name("foliko")
    executable = str(installed) if installed.exists() else shutil.which("foliko")
    assert executable, "the foliko console script is not installed in this environment"
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "ANTHROPIC_", "OLLAMA_", "FOLIKO_")) or k == "FOLIKO_CONFIG"
    }

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 120):
        environment = {**base, "FOLIKO_HOME": str(foliko_home), **llama_env, **(env or {})}
        return subprocess.run(
            [executable, *args],
            input=b"",
            capture_output=True,
            env=environment,
            timeout=timeout,
        )

    return run


@pytest.fixture
def stored(foliko):
    def load(session_id: str) -> dict:
        result = foliko("sessions", "show", session_id, "--json")
        assert result.returncode == 0, result.stderr
        return orjson.loads(result.stdout)

    return load
