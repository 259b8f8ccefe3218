"""The Node client libraries of tests/serve/node, run against a real ``foliko serve``.

Their versions are pinned by tests/serve/node/package-lock.json; ``npm ci`` installs
them once per machine into ~/.cache/foliko-tests/node-clients (again when the lock
file changes). A script runs from a scratch directory whose node_modules links to
that cache, so Node resolves the packages from there.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.fake_servers import FakeServer
from npm_cache import NPM_CACHE, npm_install
from storage.services import require_or_skip

PROJECT = Path(__file__).with_name("node")
PREFIX = NPM_CACHE / "node-clients"
WHAT = "npm and node (for the Node client libraries)"
RUN_LIMIT_S = 60


@dataclass
class NodeRun:
    command: list[str]
    returncode: int
    stdout: str
    stderr: str
    exchanges: list[dict[str, Any]]

    @property
    def result(self) -> Any:
        """The last line the script printed, as JSON (None when it is not JSON)."""
        lines = self.stdout.strip().splitlines()
        try:
            return json.loads(lines[-1]) if lines else None
        except json.JSONDecodeError:
            return None

    @property
    def ok(self) -> bool:
        result = self.result
        return self.returncode == 0 and not (isinstance(result, dict) and "error" in result)

    def explain(self) -> str:
        """What went wrong, with every HTTP exchange the script had with foliko."""
        parts = [
            f"{' '.join(self.command)} exited {self.returncode}",
            f"stdout: {self.stdout[-4000:]}",
            f"stderr: {self.stderr[-4000:]}",
        ]
        for exchange in self.exchanges:
            parts.append(
                f"{exchange.get('method')} {exchange.get('url')} -> {exchange.get('status')}\n"
                f"  request: {_cut(exchange.get('body'))}\n"
                f"  answer: {_cut(exchange.get('response') or exchange.get('error'))}"
            )
        return "\n".join(parts)


def _cut(text: Any, limit: int = 3000) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


class NodeClients:
    """Runs the scripts of tests/serve/node with ``node`` from ``workdir``."""

    def __init__(self, node: str, modules: Path, workdir: Path):
        self.node = node
        self.modules = modules
        self.workdir = workdir
        for script in PROJECT.glob("*.mjs"):
            shutil.copyfile(script, workdir / script.name)
        (workdir / "package.json").write_text('{"type": "module"}\n')
        (workdir / "node_modules").symlink_to(modules, target_is_directory=True)
        self._runs = 0

    @property
    def codex(self) -> Path:
        return self.modules / ".bin" / "codex"

    def run(self, script: str, *args: str, base_url: str, env: dict[str, str] | None = None):
        self._runs += 1
        log = self.workdir / f"exchanges-{self._runs}.jsonl"
        command = [self.node, str(self.workdir / script), *args]
        done = subprocess.run(
            command,
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=RUN_LIMIT_S,
            env={
                **isolated_env(self.workdir),
                "FOLIKO_BASE_URL": base_url,
                "FOLIKO_HTTP_LOG": str(log),
                **(env or {}),
            },
        )
        exchanges = []
        if log.exists():
            exchanges = [json.loads(line) for line in log.read_text().splitlines() if line]
        return NodeRun(command, done.returncode, done.stdout, done.stderr, exchanges)


def isolated_env(home: Path) -> dict[str, str]:
    """PATH and a scratch HOME only: no OPENAI_* or proxy settings from outside."""
    return {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "LANG": "C.UTF-8"}


def node_clients(workdir: Path) -> NodeClients:
    node = shutil.which("node")
    require_or_skip(WHAT, node is not None, "node is not installed")
    modules = npm_install(PREFIX, WHAT, project=PROJECT)
    return NodeClients(node, modules, workdir)


# the Codex CLI (its native binary ships in the npm package)

# Codex's defaults, pointed at foliko, with what would reach the network turned off:
# the curated plugin marketplace (a git clone from GitHub, chatgpt.com), the update
# check, analytics and feedback uploads. `--strict-config` refuses any key it does not know.
CODEX_CONFIG = """\
model = "echo"
model_provider = "foliko"
check_for_update_on_startup = false

[model_providers.foliko]
name = "foliko"
base_url = "{base_url}"
env_key = "FOLIKO_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[features]
plugins = false
remote_plugin = false
plugin_sharing = false

[analytics]
enabled = false

[feedback]
enabled = false
"""


@contextlib.contextmanager
def trapped_network() -> Iterator[FakeServer]:
    """An HTTP(S) proxy that records every request it gets and answers none: what
    Codex tries to reach beyond loopback arrives here."""
    trap = FakeServer().start()
    try:
        yield trap
    finally:
        trap.stop()


def run_codex(
    node: NodeClients, tmp_path: Path, trap: FakeServer, base_url: str, *args: str
) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """``codex exec ARGS`` (a prompt, or ``resume``/``fork`` and theirs) with
    CODEX_HOME at tmp_path/codex-home, run from tmp_path/work; the rollouts
    it writes stay under CODEX_HOME/sessions."""
    home = tmp_path / "codex-home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(CODEX_CONFIG.format(base_url=base_url))
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    env = {
        **isolated_env(tmp_path),
        "CODEX_HOME": str(home),
        "FOLIKO_API_KEY": "none",
        **{name: trap.url for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")},
        **{name: trap.url for name in ("https_proxy", "http_proxy", "all_proxy")},
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    command = [str(node.codex), "exec", "--strict-config", "--skip-git-repo-check", "--json"]
    done = subprocess.run(
        [*command, *args],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [(r.method, r.path) for r in trap.requests + trap.probes] == [], "Codex left loopback"
    return done, events
