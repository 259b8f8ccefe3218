"""What every benchmark shares: results, timing, subprocesses and datasets.

Datasets are written straight through the storage adapters (SQLite) or as
seed-format JSON files, never through thousands of CLI calls, and are cached
by name inside one temporary workspace for the length of a run.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = ROOT / ".venv" / "bin"
PYTHON = str(VENV_BIN / "python") if (VENV_BIN / "python").exists() else sys.executable
FOLIKO = str(Path(PYTHON).with_name("foliko"))

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# results


@dataclass
class Result:
    """One figure of the table: the median of ``runs`` and, if any, its target."""

    bench: str
    figure: str
    unit: str  # "s" (lower is better) or "turns/s"
    runs: list[float] = field(default_factory=list)
    ratio: float | None = None
    ratio_label: str = ""
    target: str = ""
    met: bool | None = None  # None: reported without a target
    error: str | None = None
    note: str = ""  # shown in the ratio column when there is no ratio
    details: dict[str, Any] = field(default_factory=dict)
    value: float | None = None  # the figure, when it is not the median of runs (P7)

    @property
    def median(self) -> float | None:
        return statistics.median(self.runs) if self.runs else None

    @property
    def shown(self) -> float | None:
        return self.value if self.value is not None else self.median

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "median": self.median}


def failed(bench: str, figure: str, unit: str, target: str, exc: BaseException) -> Result:
    """A figure that could not be measured; a target it had counts as not met."""
    message = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return Result(
        bench,
        figure,
        unit,
        target=target,
        met=False if target else None,
        error=message[-1] if message else type(exc).__name__,
    )


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# timing


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved(cases: dict[str, Callable[[], Any]], runs: int) -> dict[str, list[float]]:
    """Time each case ``runs`` times, alternating (rotating the order) so drift hits all alike."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    names = list(cases)
    for i in range(runs):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(timed(cases[name]))
    return times


def settle() -> None:
    """Flush dirty pages so that writeback from earlier work does not slow the next timing."""
    os.sync()


class BenchError(RuntimeError):
    pass


def clean_env(**overrides: str) -> dict[str, str]:
    """The environment with no FOLIKO_* settings from outside, plus ``overrides``.

    Bytecode caching is switched on: with PYTHONDONTWRITEBYTECODE set (as on
    some CI machines), every process would compile foliko's modules from
    source again (an editable install has no pre-compiled files), while the
    floor's click and orjson load from the .pyc files pip wrote. Set
    PYTHONPYCACHEPREFIX (Workspace.env does) to keep those files out of the tree.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("FOLIKO_") and k != "PYTHONDONTWRITEBYTECODE"
    }
    env.update(overrides)
    return env


def run_process(
    argv: Sequence[str],
    env: dict[str, str] | None = None,
    *,
    capture: bool = False,
    timeout: float = 900,
) -> subprocess.CompletedProcess:
    """Run a process (stdin empty, not a terminal); raise BenchError when it fails."""
    proc = subprocess.run(
        list(argv),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        lines = proc.stderr.decode(errors="replace").strip().splitlines()
        name = " ".join(Path(a).name if a.startswith("/") else a for a in argv[:4])
        raise BenchError(f"{name} … exited {proc.returncode}: {lines[-1] if lines else ''}")
    return proc


def percentile(values: Sequence[float], fraction: float) -> float:
    """The value below which ``fraction`` of ``values`` lie (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


_LISTENING = re.compile(rb"listening on (http://\S+)")


def start_server(argv: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """Start a server that says ``listening on URL`` on stderr; (process, URL).

    Its stderr is read to the end in a thread, so a server that keeps
    writing there never blocks on a full pipe; the last lines name what
    went wrong when it does not start.
    """
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert proc.stderr is not None
    tail: collections.deque[bytes] = collections.deque(maxlen=5)
    found: list[str] = []
    ready = threading.Event()

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            tail.append(line)
            match = _LISTENING.search(line)
            if match and not found:
                found.append(match[1].decode())
                ready.set()
        ready.set()

    threading.Thread(target=drain, daemon=True).start()
    if not ready.wait(60) or not found:
        proc.kill()
        proc.wait()
        said = b" ".join(line.strip() for line in tail).decode(errors="replace")
        name = " ".join(Path(a).name for a in argv[1:4])
        raise BenchError(f"{name} did not start: {said or 'no output'}")
    return proc, found[0]


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def foliko(*args: str) -> list[str]:
    return [FOLIKO, *args]


def storage_url(kind: str, path: Path) -> str:
    """SQLAlchemy-style URL of an absolute path: sqlite:////abs/x.db, json:////abs/dir."""
    return f"{kind}:///{path.resolve()}"


# workspace and datasets


class Workspace:
    """A temporary directory for one run; datasets are built once and reused."""

    def __init__(self, root: Path | None = None, keep: bool = False):
        self.keep = keep or root is not None
        if root is None:
            root = Path(tempfile.mkdtemp(prefix="foliko-bench-"))
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self._datasets: dict[str, Any] = {}
        self._counter = 0

    def env(self, **overrides: str) -> dict[str, str]:
        """``clean_env`` with the bytecode cache inside this workspace."""
        return clean_env(PYTHONPYCACHEPREFIX=str(self.root / "pycache"), **overrides)

    def fresh(self, prefix: str) -> Path:
        """A new empty directory (a fresh FOLIKO_HOME, a fresh destination)."""
        self._counter += 1
        path = self.root / "fresh" / f"{prefix}-{self._counter}"
        path.mkdir(parents=True)
        return path

    def dataset(self, name: str, build: Callable[[Path], Any]) -> Any:
        """``build(directory)`` once per workspace; later calls return its result."""
        if name not in self._datasets:
            directory = self.root / "data" / name
            if directory.exists():
                shutil.rmtree(directory)
            directory.mkdir(parents=True)
            log(f"building dataset {name}")
            start = time.perf_counter()
            self._datasets[name] = build(directory)
            settle()
            log(f"  {name} built in {time.perf_counter() - start:.1f} s")
        return self._datasets[name]

    def close(self) -> None:
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)


BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: fixed, so datasets are reproducible


def canonical_messages(session_id: str, count: int, start_ms: int) -> list[dict[str, Any]]:
    """``count`` alternating user/assistant messages shaped like real turns."""
    messages = []
    for i in range(count):
        turn = i // 2
        role = "user" if i % 2 == 0 else "assistant"
        text = f"{session_id} turn {turn}: " + (
            "please summarise the notes on the storage layer"
            if role == "user"
            else "here is a short summary of the notes on the storage layer"
        )
        messages.append(
            {
                "role": role,
                "content": text,
                "created_at": start_ms + i * 1000,
                "request_id": f"{turn:016x}",
                "trace_id": f"{turn:032x}",
            }
        )
    return messages


def make_record(session_id: str, messages: int, index: int = 0):
    from foliko_cli.messages.record import SessionRecord, new_metadata

    start = BASE_MS + index * 60_000
    saved_at = start + max(messages - 1, 0) * 1000
    metadata = new_metadata(start)
    metadata["last_active"] = saved_at
    return SessionRecord(
        session_id=session_id,
        messages=canonical_messages(session_id, messages, start),
        variables={"index": index},
        metadata=metadata,
        saved_at=saved_at,
    )


def save_records(url: str, home: Path, records: Iterable[Any], batch: int = 2000) -> int:
    """Write records through the adapter ``url`` names, ``batch`` per save_many call."""
    from foliko_cli.storage import open_storage

    async def write() -> int:
        adapter = open_storage(url, home)
        written = 0
        pending = []
        try:
            for record in records:
                pending.append(record)
                if len(pending) >= batch:
                    await adapter.save_many(pending)
                    written += len(pending)
                    pending = []
            if pending:
                await adapter.save_many(pending)
                written += len(pending)
        finally:
            await adapter.close()
        return written

    return asyncio.run(write())


def session_ids(count: int, prefix: str = "bench") -> list[str]:
    return [f"{prefix}-{i:06d}" for i in range(count)]


def build_sqlite_sessions(directory: Path, sessions: int, messages: int) -> Path:
    """A SQLite database with ``sessions`` sessions of ``messages`` messages each."""
    path = directory / "sessions.db"
    records = (make_record(sid, messages, i) for i, sid in enumerate(session_ids(sessions)))
    save_records(storage_url("sqlite", path), directory, records)
    return path


def seed_document(session_id: str, messages: int, index: int) -> dict[str, Any]:
    """A session as the original foliko's JsonStorage wrote it (camelCase, ms)."""
    start = BASE_MS + index * 60_000
    saved_at = start + max(messages - 1, 0) * 1000
    return {
        "sessionId": session_id,
        "messages": [
            {"role": m["role"], "content": m["content"], "createdAt": m["created_at"]}
            for m in canonical_messages(session_id, messages, start)
        ],
        "variables": {"index": index},
        "metadata": {
            "createdAt": start,
            "lastActive": saved_at,
            "messageCount": messages,
            "compressionCount": 0,
        },
        "savedAt": saved_at,
    }


def build_seed_json(directory: Path, sessions: int, messages: int) -> Path:
    """``sessions`` files ``{sessionId}.json`` in the seed's format (indented like the seed)."""
    for i, sid in enumerate(session_ids(sessions)):
        data = orjson.dumps(seed_document(sid, messages, i), option=orjson.OPT_INDENT_2)
        fd = os.open(directory / f"{sid}.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    return directory


# machine and output


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        cpu = platform.processor()
    version = subprocess.run(
        [PYTHON, "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": version or platform.python_version(),
        "platform": platform.platform(),
        "foliko_commit": commit,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def format_value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        if value < 0.01:
            return f"{value * 1000:.2f} ms"
        return f"{value * 1000:,.1f} ms" if value < 1 else f"{value:,.2f} s"
    places = 3 if unit == "M instr" and value < 100 else 0  # a serve request: ~2 M (P7)
    return f"{value:,.{places}f} {unit}"


def format_table(results: list[Result]) -> str:
    headers = ["", "figure", "median", "runs", "ratio", "target", "met"]
    rows = []
    for r in results:
        ratio = f"{r.ratio:.2f}x {r.ratio_label}".strip() if r.ratio is not None else r.note
        met = {True: "yes", False: "NO", None: "-"}[r.met]
        error = r.error if r.error is None or len(r.error) <= 90 else r.error[:89] + "…"
        median = f"error: {error}" if error else format_value(r.shown, r.unit)
        rows.append([r.bench, r.figure, median, str(len(r.runs)), ratio, r.target, met])
    widths = [max(len(str(x)) for x in column) for column in zip(headers, *rows, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return "\n".join(lines)


def format_details(results: list[Result]) -> str:
    """Extra listings a benchmark attached (P1: the top of ``-X importtime``)."""
    out = []
    for r in results:
        for key, value in r.details.items():
            if key == "importtime":
                out.append(f"{r.bench} {value['command']} — top {len(value['top'])} by cumulative:")
                out.append(f"  {'cumulative us':>13}  {'self us':>9}  module")
                out += [f"  {c:>13,}  {s:>9,}  {name}" for c, s, name in value["top"]]
                out.append("")
    return "\n".join(out)


def write_json(results: list[Result], path: Path, *, quick: bool, **extra: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "machine": machine(),
        "quick": quick,
        **extra,
        "results": [r.to_dict() for r in results],
    }
    path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))


def main_single(run: Callable[[Workspace, bool], list[Result]], description: str) -> None:
    """``python bench/pN_x.py [--quick] [--keep DIR]``: one benchmark, its table."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--keep", type=Path, help="build data in DIR and keep it")
    args = parser.parse_args()
    workspace = Workspace(args.keep)
    try:
        results = run(workspace, args.quick)
    finally:
        workspace.close()
    details = format_details(results)
    if details:
        print(details)
    print(format_table(results))
    sys.exit(0 if all(r.met is not False for r in results) else 1)


# database servers (PostgreSQL, Redis): reached when they answer, a fresh namespace each

POSTGRES_URL = (
    os.environ.get("FOLIKO_TEST_POSTGRES_URL") or "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("FOLIKO_TEST_REDIS_URL") or "redis://127.0.0.1:6379/0"
SERVER_URLS = {"postgresql": POSTGRES_URL, "redis": REDIS_URL}


def server_problem(backend: str) -> str | None:
    """None when the ``backend`` server (postgresql or redis) answers, else why not."""
    try:
        if backend == "redis":
            import redis

            with redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3) as client:
                client.ping()
        else:
            import psycopg

            psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
    except Exception as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


def namespaced_url(backend: str, namespace: str) -> str:
    """The server's URL with ``namespace`` as its PostgreSQL schema or Redis key prefix."""
    option = "prefix" if backend == "redis" else "schema"
    return f"{SERVER_URLS[backend]}?{option}={namespace}"


def drop_namespace(backend: str, namespace: str) -> None:
    """Remove a PostgreSQL schema or every Redis key under a prefix."""
    if backend == "redis":
        import redis

        with redis.Redis.from_url(REDIS_URL) as client:
            keys = list(client.scan_iter(match=f"{namespace}:*", count=1000))
            for start in range(0, len(keys), 1000):
                client.delete(*keys[start : start + 1000])
        return
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as db:
        db.execute(f'DROP SCHEMA IF EXISTS "{namespace}" CASCADE')
