"""The harness's machines: a PostgreSQL cluster of its own or a Redis server of
its own, listening on the bridge's address (so the hosts reach it over the
network, and restarting it touches no one else's database), and the
``foliko serve`` hosts, one per namespace.

PostgreSQL is a fresh ``initdb`` cluster in a temporary directory, run by the
``postgres`` user (initdb refuses root); restarting it is ``pg_ctl stop -m
immediate`` (a crash: the next start replays the WAL) and start. Redis runs
with no persistence (``--save "" --appendonly no``, as this machine's own),
so restarting it (``kill -9``, start) loses every key: the checker counts
what that loses apart, as the documented loss.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .net import Network

HERE = Path(__file__).resolve().parent
PLUGIN = HERE / "plugin"
FOLIKO = Path(sys.executable).with_name("foliko")
MODEL = "hostecho:history"
SERVE_PORT = 8000
API_KEY = "harness-key"
USER = "harness"
"""The hosts listen on addresses other than loopback, so they need keys: one
user, whose sessions are stored as ``~harness~/ID``."""
START_LIMIT_S = 60.0
_LISTENING = re.compile(r"listening on (http://\S+)")


def _free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


def _wait_port(address: str, port: int, limit: float) -> None:
    deadline = time.monotonic() + limit
    while True:
        try:
            socket.create_connection((address, port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens on {address}:{port}") from None
            time.sleep(0.05)


def postgres_problem() -> str | None:
    bin_dir = _postgres_bin()
    if bin_dir is None:
        return "PostgreSQL's initdb and pg_ctl are not installed"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "there is no postgres user to run a PostgreSQL cluster as"
    return None


def _postgres_bin() -> Path | None:
    for found in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (found / "initdb").exists() and (found / "pg_ctl").exists():
            return found
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb and shutil.which("pg_ctl") else None


def redis_problem() -> str | None:
    return None if shutil.which("redis-server") else "redis-server is not installed"


class Postgres:
    backend = "postgres"

    def __init__(self, address: str, subnet: str):
        self.address = address
        self.port = _free_port(address)
        bin_dir = _postgres_bin()
        assert bin_dir is not None
        self.bin = bin_dir
        self.dir = Path(tempfile.mkdtemp(prefix="foliko-hosts-pg-"))
        user = pwd.getpwnam("postgres")
        os.chown(self.dir, user.pw_uid, user.pw_gid)
        self.data = self.dir / "data"
        self._as_postgres(
            str(bin_dir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
            "--no-sync", "-E", "UTF8",
        )  # fmt: skip
        with open(self.data / "pg_hba.conf", "a") as hba:
            hba.write(f"host all all {subnet} trust\n")
        self.url = f"postgresql://postgres@{address}:{self.port}/postgres"
        self.restarts = 0
        self.start()

    def _as_postgres(self, *args: str) -> None:
        done = subprocess.run(
            ["runuser", "-u", "postgres", "--", *args], capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]}: {done.stderr.strip() or done.stdout.strip()}")

    def start(self) -> None:
        options = (
            f"-c listen_addresses={self.address} -p {self.port} -k {self.dir} "
            "-c max_connections=300 -c shared_buffers=64MB"
        )
        self._as_postgres(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "log"),
            "-w", "-t", "60", "-o", options, "start",
        )  # fmt: skip
        _wait_port(self.address, self.port, 30)

    def stop(self, mode: str = "fast") -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(self.bin / "pg_ctl"), "-D", str(self.data),
             "-m", mode, "-w", "stop"],
            capture_output=True, timeout=120,
        )  # fmt: skip

    def restart(self) -> None:
        """A crash and a start: acknowledged commits must survive it."""
        self.stop("immediate")
        self.restarts += 1
        self.start()

    def storage_url(self, schema: str) -> str:
        return f"{self.url}?schema={schema}&operation_timeout=10"

    def close(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


class Redis:
    backend = "redis"

    def __init__(self, address: str, lease_ms: int):
        self.address = address
        self.port = _free_port(address)
        self.lease_ms = lease_ms
        self.dir = Path(tempfile.mkdtemp(prefix="foliko-hosts-redis-"))
        self.url = f"redis://{address}:{self.port}/0"
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", self.address, "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--dir", str(self.dir), "--protected-mode", "no",
             "--logfile", str(self.dir / "log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        _wait_port(self.address, self.port, 30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def restart(self) -> None:
        """``kill -9`` and a start: with no persistence every key is gone."""
        self.stop()
        self.restarts += 1
        self.start()

    def storage_url(self, prefix: str) -> str:
        return f"{self.url}?prefix={prefix}&lease_ms={self.lease_ms}&socket_timeout=10"

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class Host:
    """``foliko serve`` in namespace ``index`` of ``network``, on its own address."""

    def __init__(self, network: Network, index: int, storage_url: str, env: dict[str, str]):
        self.network = network
        self.index = index
        self.address = network.addresses[index]
        self.url = f"http://{self.address}:{SERVE_PORT}"
        self.home = Path(tempfile.mkdtemp(prefix=f"foliko-host{index}-"))
        self.storage_url = storage_url
        self.keys = self.home / "keys.toml"
        self.keys.write_text(f'[keys]\n"{API_KEY}" = "{USER}"\n')
        self.keys.chmod(0o600)
        self.env = {
            **os.environ,
            "FOLIKO_HOME": str(self.home),
            "FOLIKO_MODEL": MODEL,
            "PYTHONPATH": str(PLUGIN),
            **env,
        }
        self.proc: subprocess.Popen | None = None
        self.kills = 0
        self.log: list[str] = []
        self.start()

    def start(self) -> None:
        command = [
            *self.network.prefix(self.index), str(FOLIKO), "--storage", self.storage_url,
            "serve", "--host", self.address, "--port", str(SERVE_PORT), "--no-access-log",
            "--api-keys", str(self.keys),
            "--grace", "2",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, env=self.env,
        )  # fmt: skip
        ready = threading.Event()
        proc = self.proc

        def read() -> None:
            assert proc.stderr is not None
            for raw in proc.stderr:
                line = raw.decode(errors="replace")
                self.log.append(line)
                if _LISTENING.search(line):
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(START_LIMIT_S) or proc.poll() is not None:
            raise RuntimeError(f"host {self.index} did not start: {''.join(self.log[-20:])}")

    def kill(self) -> None:
        """``kill -9``: the process dies with whatever it had open."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self.kills += 1

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)
