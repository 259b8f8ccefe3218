"""Every test runs in its own directory with its own FOLIKO_HOME, no user config file
and no FOLIKO_* settings from outside."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FOLIKO_BIN = Path(sys.executable).with_name("foliko")
TESTS = Path(__file__).resolve().parent

# Process storms, real servers and whole-program runs: left out by `make test-fast`.
SLOW = (
    "e2e",
    "serve",
    "mcp",
    "storage/test_multiprocess.py",
    "storage/test_termination.py",
    "storage/test_soak.py",
    "storage/test_roundtrip.py",
    "test_bench_smoke.py",
    "cli/test_pipes.py",
    "cli/test_stdout_failures.py",
)
# Tests that run the installed foliko (or llm) as a process, or on a pseudo-terminal,
# are slow too.
PROCESS_FIXTURES = frozenset({"run_foliko", "spawn", "start_server", "llm_env"})
# ... but the fast tier covers every layer: these modules of foliko serve (its app
# in this process, see serve/servers.py InProcessServe) and of the MCP client and
# server run in it, unless a test of theirs starts a process.
FAST_DOORS = frozenset(
    {
        "serve/test_completions.py",
        "serve/test_exports.py",
        "serve/test_integrity.py",
        "serve/test_live_turns.py",
        "serve/test_mcp_loading.py",
        "serve/test_metrics.py",
        "serve/test_native.py",
        "serve/test_openai_spec.py",
        "serve/test_scoped_storage.py",
        "serve/test_sse.py",
        "serve/test_stored_completions.py",
        "serve/test_users.py",
        "serve/test_web_routes.py",
        "serve/test_websocket.py",
        "mcp/test_mcp_cli.py",
        "mcp/test_mcp_config.py",
        "mcp/test_mcp_failures.py",
        "mcp/test_mcp_oauth_config.py",
        "mcp/test_mcp_serve_inprocess.py",
        "mcp/test_mcp_startup.py",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        where = Path(str(item.fspath)).relative_to(TESTS).as_posix()
        slow_path = where not in FAST_DOORS and any(
            where == slow or where.startswith(slow + "/") for slow in SLOW
        )
        if slow_path or PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def foliko_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith("FOLIKO_") and not name.startswith(("FOLIKO_REQUIRE_", "FOLIKO_TEST_")):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    monkeypatch.setenv("FOLIKO_HOME", str(home))
    # the cache and an empty user config (FOLIKO_CONFIG must name a file that
    # exists) beside tmp_path, so that tests which list tmp_path see only what
    # they made; made by hand, as each mktemp lists every test's directory
    aside = tmp_path.with_name(tmp_path.name + "-aside")
    (aside / "cache").mkdir(parents=True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(aside / "cache"))
    user_config = aside / "config.toml"
    user_config.touch()
    monkeypatch.setenv("FOLIKO_CONFIG", str(user_config))
    monkeypatch.chdir(tmp_path)
    return home


@pytest.fixture
def run_foliko(foliko_home: Path):
    """Run the installed ``foliko`` as a real process."""
    executable = str(FOLIKO_BIN) if FOLIKO_BIN.exists() else shutil.which("foliko")
    assert executable, "the foliko console script is not installed in this environment"

    def run(
        *args: str,
        input: bytes | str | None = b"",
        env: dict[str, str] | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess:
        environment = {**os.environ, **(env or {})}
        data = input.encode() if isinstance(input, str) else input
        return subprocess.run(
            [executable, *args],
            input=data,
            capture_output=True,
            env=environment,
            timeout=timeout,
        )

    return run
