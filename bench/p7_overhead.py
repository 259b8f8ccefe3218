"""P7: the latency ``foliko serve`` adds in front of a model, against calling it directly.

The model is bench/upstream.py in its own process: an OpenAI-compatible
Chat Completions server that answers every request after a fixed DELAY_S
with the same short reply. ``foliko serve`` (SQLite, the default) uses it
as ``openai:bench`` through OPENAI_BASE_URL. This process is the client:
httpx2, keep-alive connections, CLIENTS coroutines each sending its
requests one after another. Three kinds of request, in blocks that take
turns (the order rotating round by round, so drift hits all alike):

- direct: ``POST /v1/chat/completions`` to the upstream itself;
- stateless: the same body to foliko (nothing stored);
- session: the same body with ``X-Session-Id`` (the turn reads and writes
  the SQLite store); each client has sessions of its own, a new one every
  TURNS_PER_SESSION turns, so the history stays short (P2 is about long ones).

The figure is the p50 (and p99) of foliko's latencies minus the same
percentile of the direct ones, over every request of the cell. The
upstream counts what it served: one model call per foliko turn is checked.

``P7_BASELINE=DIR`` adds a second ``foliko serve`` with DIR first on its
PYTHONPATH (``git archive COMMIT | tar -x -C DIR``: another commit), whose
blocks take turns with the others: a before/after in one run, so that the
machine's load hits both alike.

Where valgrind is installed, the server's own cost is also counted in
instructions, which neither the load nor the machine's speed changes: a
``foliko serve`` under callgrind, instrumented only while INSTR_TURNS turns
of each kind run one after another (after untimed ones), the baseline's too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

from common import (
    PYTHON,
    BenchError,
    Result,
    Workspace,
    failed,
    log,
    main_single,
    percentile,
    start_server,
    stop_server,
)

UPSTREAM = Path(__file__).resolve().parent / "upstream.py"
DELAY_S = 0.020
TURNS_PER_SESSION = 20
INSTR_TURNS = 100
INSTR_WARMUP = 40
TARGET_P50 = 0.002
TARGET_P99 = 0.008
FOLIKO_KINDS = ("stateless", "session")
BASELINE_ENV = "P7_BASELINE"


class Sizes:
    def __init__(self, quick: bool):
        self.levels = (1, 4) if quick else (1, 16)
        self.rounds = 2 if quick else 5
        # requests per client per block, and untimed ones per client first
        self.per_block = {1: 10, 4: 3} if quick else {1: 200, 16: 25}
        self.warmup = {1: 5, 4: 2} if quick else {1: 20, 16: 3}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (Linux /proc; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Target(NamedTuple):
    url: str
    pid: int


async def measure(
    upstream_url: str, targets: dict[str, Target], clients: int, sizes: Sizes
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Every timed request's latency in seconds, by kind: ``direct``, then
    ``TARGET:stateless`` and ``TARGET:session`` for each foliko in ``targets``;
    and the CPU seconds each foliko kind cost its server process."""
    import httpx2 as httpx

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    kinds = ["direct"] + [f"{name}:{kind}" for name in targets for kind in FOLIKO_KINDS]
    turns = {kind: [0] * clients for kind in kinds}

    async def one(http: httpx.AsyncClient, kind: str, client: int) -> float:
        n = turns[kind][client]
        turns[kind][client] += 1
        body, headers = request(f"{clients}-{client}-{kind}", n)
        began = time.perf_counter()
        response = await http.post("/v1/chat/completions", json=body, headers=headers)
        elapsed = time.perf_counter() - began
        if response.status_code != 200:
            raise BenchError(f"{kind}: HTTP {response.status_code}: {response.text[:200]}")
        if response.json()["choices"][0]["message"]["content"] != "ok":
            raise BenchError(f"{kind}: not the upstream's reply: {response.text[:200]}")
        return elapsed

    async def block(http: httpx.AsyncClient, kind: str, count: int) -> list[float]:
        async def client(number: int) -> list[float]:
            return [await one(http, kind, number) for _ in range(count)]

        per_client = await asyncio.gather(*(client(c) for c in range(clients)))
        return [t for times in per_client for t in times]

    latencies: dict[str, list[float]] = {kind: [] for kind in kinds}
    cpu = dict.fromkeys(kinds, 0.0)
    urls = {"direct": upstream_url, **{name: t.url for name, t in targets.items()}}
    async with contextlib.AsyncExitStack() as stack:
        http = {
            name: await stack.enter_async_context(
                httpx.AsyncClient(base_url=url, timeout=60, limits=limits)
            )
            for name, url in urls.items()
        }
        for kind in kinds:
            await block(http[kind.split(":")[0]], kind, sizes.warmup[clients])
        for round_number in range(sizes.rounds):
            shift = round_number % len(kinds)
            for kind in kinds[shift:] + kinds[:shift]:
                name = kind.split(":")[0]
                pid = targets[name].pid if name in targets else None
                before = cpu_seconds(pid) if pid else 0.0
                latencies[kind] += await block(http[name], kind, sizes.per_block[clients])
                if pid:
                    cpu[kind] += cpu_seconds(pid) - before
    return latencies, cpu


def served_count(upstream_url: str) -> int:
    import httpx2 as httpx

    return httpx.get(f"{upstream_url}/stats", timeout=10).json()["served"]


def figures(
    clients: int, target: str, latencies: dict[str, list[float]], cpu: dict[str, float]
) -> list[Result]:
    direct = latencies["direct"]
    results = []
    for kind, label in (("stateless", "stateless"), ("session", "session turn")):
        measured = latencies[f"{target}:{kind}"]
        cpu_ms = 1000 * cpu[f"{target}:{kind}"] / len(measured)
        p50 = percentile(measured, 0.5) - percentile(direct, 0.5)
        p99 = percentile(measured, 0.99) - percentile(direct, 0.99)
        target_text = ""
        if kind == "session" and clients == 1 and target == "foliko":
            target_text = f"p50 <= {TARGET_P50 * 1000:.0f} ms, p99 <= {TARGET_P99 * 1000:.0f} ms"
        which = "" if target == "foliko" else f" [{target}]"
        result = Result(
            "P7",
            f"serve added p50: {label}, {clients} client(s), SQLite{which}",
            "s",
            runs=measured,
            value=p50,
            note=f"p99 {p99 * 1000:+.2f} ms; CPU {cpu_ms:.2f} ms",
            target=target_text,
            details={
                "added_p50_ms": 1000 * p50,
                "added_p99_ms": 1000 * p99,
                "foliko_p50_ms": 1000 * percentile(measured, 0.5),
                "foliko_p99_ms": 1000 * percentile(measured, 0.99),
                "direct_p50_ms": 1000 * percentile(direct, 0.5),
                "direct_p99_ms": 1000 * percentile(direct, 0.99),
                "server_cpu_ms_per_request": cpu_ms,
                "requests": len(measured),
                "direct_s": direct,
            },
        )
        if target_text:
            result.met = p50 <= TARGET_P50 and p99 <= TARGET_P99
        log(
            f"P7: {clients} client(s), {label}{which}: added p50 {1000 * p50:+.2f} ms, "
            f"p99 {1000 * p99:+.2f} ms, server CPU {cpu_ms:.2f} ms a request "
            f"(direct p50 {result.details['direct_p50_ms']:.2f} ms, {len(measured)} requests)"
        )
        results.append(result)
    return results


def foliko_env(ws: Workspace, upstream_url: str, **extra: str) -> dict[str, str]:
    return ws.env(
        FOLIKO_HOME=str(ws.fresh("p7-home")),
        FOLIKO_MODEL="openai:bench",
        FOLIKO_STORAGE="sqlite",
        FOLIKO_CONTEXT_WINDOW="32000",  # known: no probe of the upstream
        OPENAI_BASE_URL=f"{upstream_url}/v1",
        OPENAI_API_KEY="bench",
        **extra,
    )


def start_targets(ws: Workspace, upstream_url: str, servers: list) -> dict[str, Target]:
    """foliko serve from this tree; with P7_BASELINE=DIR, also one with DIR first
    on PYTHONPATH (a checkout of another commit, or a directory of shims)."""
    serve = [PYTHON, "-m", "foliko_cli", "serve", "--port", "0"]
    proc, url = start_server(serve, foliko_env(ws, upstream_url))
    servers.append(proc)
    targets = {"foliko": Target(url, proc.pid)}
    baseline = os.environ.get(BASELINE_ENV)
    if baseline:
        path = os.pathsep.join(p for p in (baseline, os.environ.get("PYTHONPATH")) if p)
        proc, url = start_server(serve, foliko_env(ws, upstream_url, PYTHONPATH=path))
        servers.append(proc)
        targets["baseline"] = Target(url, proc.pid)
        log(f"P7: baseline: foliko serve with {baseline} first on PYTHONPATH")
    return targets


def request(kind: str, n: int) -> tuple[dict[str, object], dict[str, str]]:
    """The body and headers of request ``n`` of a kind (a client's own sessions)."""
    headers = {}
    if kind.endswith("session"):
        headers["x-session-id"] = f"p7-{kind}-{n // TURNS_PER_SESSION}"
    body = {"model": "openai:bench", "messages": [{"role": "user", "content": f"turn {n}"}]}
    return body, headers


def instructions(
    ws: Workspace, upstream_url: str, path: str | None, turns: int, warmup: int
) -> dict[str, float]:
    """Instructions a request of each kind costs ``foliko serve`` (callgrind, in
    millions), with ``path`` first on its PYTHONPATH."""
    import httpx2 as httpx

    out = ws.fresh("p7-callgrind") / "callgrind.out"
    extra = {"PYTHONPATH": path, "PYTHONHASHSEED": "0"} if path else {"PYTHONHASHSEED": "0"}
    argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
    proc, url = start_server(
        [*argv, PYTHON, "-m", "foliko_cli", "serve", "--port", "0"],
        foliko_env(ws, upstream_url, **extra),
    )
    counts = {}
    try:
        with httpx.Client(base_url=url, timeout=300) as http:
            for kind in FOLIKO_KINDS:
                for n in range(warmup + turns):
                    if n == warmup:
                        subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True)
                    body, headers = request(kind, n)
                    http.post("/v1/chat/completions", json=body, headers=headers).raise_for_status()
                subprocess.run(["callgrind_control", "-i", "off", str(proc.pid)], check=True)
                subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True)
                dumps = sorted(out.parent.glob("callgrind.out*"), key=os.path.getmtime)
                total = re.search(rb"^totals: (\d+)", dumps[-1].read_bytes(), re.M)
                if total is None:
                    raise BenchError(f"callgrind wrote no total to {dumps[-1]}")
                counts[kind] = int(total[1]) / turns / 1e6
                dumps[-1].unlink()
    finally:
        stop_server(proc)
    return counts


def instruction_figures(ws: Workspace, upstream_url: str, quick: bool) -> list[Result]:
    if shutil.which("valgrind") is None:
        log("P7: valgrind is not installed: the instruction counts are left out")
        return []
    trees = {"foliko": None, "baseline": os.environ.get(BASELINE_ENV)}
    results = []
    for target, path in trees.items():
        if target == "baseline" and not path:
            continue
        try:
            sizes = (5, 5) if quick else (INSTR_TURNS, INSTR_WARMUP)
            counts = instructions(ws, upstream_url, path, *sizes)
        except Exception as exc:
            results.append(
                failed("P7", f"serve instructions a request [{target}]", "M instr", "", exc)
            )
            continue
        which = "" if target == "foliko" else f" [{target}]"
        for kind, millions in counts.items():
            label = "session turn" if kind == "session" else kind
            log(f"P7: {label}{which}: {millions:.3f} M instructions a request in the server")
            results.append(
                Result("P7", f"serve instructions a request: {label}{which}", "M instr", [millions])
            )
    return results


def run(ws: Workspace, quick: bool = False) -> list[Result]:
    sizes = Sizes(quick)
    servers: list = []
    try:
        upstream, upstream_url = start_server([PYTHON, str(UPSTREAM), str(DELAY_S)], ws.env())
        servers.append(upstream)
        targets = start_targets(ws, upstream_url, servers)
    except Exception as exc:
        for proc in servers:
            stop_server(proc)
        return [failed("P7", "serve added latency", "s", "", exc)]
    results: list[Result] = []
    try:
        sent = 0
        for clients in sizes.levels:
            try:
                latencies, cpu = asyncio.run(measure(upstream_url, targets, clients, sizes))
                sent += clients * len(latencies) * sizes.warmup[clients]
                sent += sum(len(times) for times in latencies.values())
                served = served_count(upstream_url)
                if served != sent:
                    raise BenchError(f"the upstream served {served} calls for {sent} requests")
                for target in targets:
                    results += figures(clients, target, latencies, cpu)
            except Exception as exc:
                target = "p50, p99" if clients == 1 else ""
                figure = f"serve added p50: {clients} client(s)"
                results.append(failed("P7", figure, "s", target, exc))
                break
        results += instruction_figures(ws, upstream_url, quick)
    finally:
        for proc in servers:
            stop_server(proc)
    return results


if __name__ == "__main__":
    sys.path.insert(0, ".")
    main_single(run, __doc__)
