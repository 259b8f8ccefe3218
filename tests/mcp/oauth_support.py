"""The OAuth test server (oauth_server.py) as a process, and the stand-in
browser (oauth_browser.py), for tests/mcp/test_mcp_oauth*.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

HERE = Path(__file__).parent
LISTEN_TIMEOUT_S = 30


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class OAuthServer:
    """The resource server at ``url`` and its authorization server at ``base``."""

    def __init__(self, options: dict | None = None):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/mcp"
        environment = {**os.environ, "OAUTH_TEST_OPTIONS": json.dumps(options or {})}
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "oauth_server.py"), str(self.port)],
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + LISTEN_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "the OAuth test server exited"
            try:
                self.get("/test/log")
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("the OAuth test server did not listen")

    def get(self, path: str):
        with urllib.request.urlopen(self.base + path, timeout=10) as answer:
            return json.loads(answer.read())

    def log(self, event: str | None = None) -> list[dict]:
        return [entry for entry in self.get("/test/log") if event in (None, entry["event"])]

    def revoke(self) -> None:
        request = urllib.request.Request(self.base + "/test/revoke", method="POST")
        urllib.request.urlopen(request, timeout=10).close()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def browser_environment(log: Path) -> dict[str, str]:
    """BROWSER set to the stand-in browser, which records each URL in ``log``."""
    return {
        "BROWSER": f"{sys.executable} {HERE / 'oauth_browser.py'} %s",
        "OAUTH_TEST_BROWSER_LOG": str(log),
    }


def visited(log: Path) -> list[dict[str, str]]:
    """The query of each authorization URL the browser was sent to."""
    if not log.exists():
        return []
    return [
        {key: values[0] for key, values in parse_qs(urlsplit(line).query).items()}
        for line in log.read_text(encoding="utf-8").splitlines()
    ]
