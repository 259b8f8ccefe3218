"""Real ``foliko serve`` processes on free ports, and running the CLI beside them."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

FOLIKO_BIN = Path(sys.executable).with_name("foliko")
START_LIMIT_S = 30.0
_LISTENING = re.compile(r"listening on (http://\S+)")


class ServeProcess:
    """``foliko [global...] serve --port 0 [args...]`` (or another ``command``
    that listens as it does); ``url`` once it listens."""

    def __init__(
        self,
        args: list[str],
        env: dict[str, str],
        global_args: list[str],
        *,
        home: Path,
        command: tuple[str, ...] = ("serve",),
    ):
        self.home = home
        self.command = [str(FOLIKO_BIN), *global_args, *command, "--port", "0", *args]
        self.proc = subprocess.Popen(
            self.command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.stderr_lines: list[str] = []
        self._ready = threading.Event()
        self.url = ""
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace")
            self.stderr_lines.append(line)
            found = _LISTENING.search(line)
            if found and not self.url:
                self.url = found[1]
                self._ready.set()
        self._ready.set()

    def wait_ready(self) -> ServeProcess:
        if not self._ready.wait(START_LIMIT_S) or not self.url:
            self.kill()
            raise AssertionError(f"foliko serve did not start: {self.stderr}")
        return self

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    @property
    def stderr(self) -> str:
        return "".join(self.stderr_lines)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("foliko serve did not stop after the signal") from None
        self._reader.join(5)
        return code

    def exit_code(self, timeout: float = 30.0) -> int:
        """Wait for the process to end by itself, and for the whole of its stderr."""
        code = self.proc.wait(timeout)
        self._reader.join(5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class InProcessServe:
    """``foliko serve`` (one worker, default options) in a thread of the test
    process: real sockets and HTTP, without a process's start-up. What needs a
    process of its own (its stderr and access log, signals, workers, exit
    codes) uses ServeProcess (``pytestmark = pytest.mark.process`` in a module
    makes its ``server`` one)."""

    def __init__(self, home: Path, extra: dict[str, str] | None = None):
        from foliko_cli.serve.app import ServeOptions, create_app
        from foliko_cli.serve.runner import DEFAULT_LIMITS, GracefulServer, _config

        self.home = home
        self.url = ""
        ready = threading.Event()

        def announce(url: str) -> None:
            self.url = url
            ready.set()

        config = _config(
            create_app(ServeOptions()),
            host="127.0.0.1",
            port=0,
            workers=1,
            grace=5.0,
            limits=DEFAULT_LIMITS,
        )
        self._server = GracefulServer(config, announce)
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(foliko_env(home, extra))  # the settings are read as it starts
        try:
            self._thread = threading.Thread(target=self._server.run, daemon=True)
            self._thread.start()
            if not ready.wait(START_LIMIT_S):
                raise AssertionError("foliko serve did not start in this process")
        finally:
            os.environ.clear()
            os.environ.update(saved)

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    @property
    def stderr(self) -> str:
        raise AssertionError(
            "an in-process server has no stderr of its own: mark the module "
            "pytest.mark.process, or use start_server"
        )

    def kill(self) -> None:
        self._server.should_exit = True
        self._thread.join(30)


def foliko_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "FOLIKO_HOME": str(home), "FOLIKO_MODEL": "echo", **(extra or {})}


def run_cli(
    home: Path, *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(FOLIKO_BIN), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=foliko_env(home, env),
        timeout=timeout,
    )


def wait_until(condition, limit: float = 20.0, what: str = "the condition") -> None:
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@contextlib.contextmanager
def held(home: Path, session_id: str) -> Iterator[None]:
    """Hold ``session_id``'s turn lock in the default SQLite store under ``home``,
    as another foliko process would (flock on its lock file)."""
    import fcntl

    from foliko_cli.storage.filelock import lock_name

    path = home / "sessions.db.locks" / lock_name(session_id)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.pwrite(fd, b"pid 4242 on the-test", 0)
        yield
    finally:
        os.close(fd)


COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "stub",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


class StubModelServer:
    """An OpenAI-compatible endpoint: answers ``status`` (200: a completion
    saying "ok", else an error) or, with ``stall``, never until stopped.
    ``bodies`` holds every request body it got."""

    def __init__(self, status: int = 400, stall: bool = False):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        release = self.release = threading.Event()
        owner = self
        self.requests = 0
        self.bodies: list[dict] = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                return None

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                owner.bodies.append(json.loads(raw or b"{}"))
                owner.requests += 1
                if stall:
                    release.wait(60)
                body = b'{"error": {"message": "the provider broke", "type": "x"}}'
                if status == 200:
                    body = json.dumps(COMPLETION).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def turn(http, session: str, text: str = "hi") -> None:
    """One turn in ``session`` (created when new) through Chat Completions."""
    response = http.post(
        "/v1/chat/completions",
        json={"model": "echo", "messages": [{"role": "user", "content": text}]},
        headers={"X-Session-Id": session},
    )
    assert response.status_code == 200, response.text
