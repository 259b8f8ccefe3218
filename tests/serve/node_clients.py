"""The Node client libraries of tests/serve/node, run against a real ``foliko serve``.

Their versions are pinned by tests/serve/node/package-lock.json; ``npm ci`` installs
them once per machine into ~/.cache/foliko-tests/node-clients (again when the lock
file changes). A script runs from a scratch directory whose node_modules links to
that cache, so Node resolves the packages from there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
