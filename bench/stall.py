"""STALL: what one frozen database connection costs the other requests of ``foliko serve``.

For PostgreSQL (a fresh schema) and Redis (a fresh key prefix), ``foliko
serve`` (echo model, one worker) reaches its storage through a TCP proxy
that can freeze one connection (tests/storage/stallproxy.py, loaded by
path), with a short bound on every storage call (``?operation_timeout=``,
``?socket_timeout=``). Two conversations get a turn each. Then, with
nothing frozen, three clients — one sending ``GET /healthz``, one ``GET
/v1/models``, one a turn on the second conversation, each request after
the last — send N requests each: the figures without a stall. Then the
proxy freezes the connection that carries the first conversation's
traffic (its id, or on Redis its hash tag, in the bytes sent), a turn on
that conversation starts, and once the proxy has frozen it the same three
clients send their requests again, until the frozen turn ends (the bound
cuts it: 503) or each has sent N. The figures are each kind's p99 (p50,
max and the count beside it) and how long the frozen turn took.

``STALL_BASELINE=DIR`` measures a ``foliko serve`` with DIR first on its
PYTHONPATH too (``git archive COMMIT foliko_cli | tar -x -C DIR``: the code
before the async drivers); ``STALL_BACKENDS=postgresql`` (or ``redis``)
measures one backend. A tree whose PostgreSQL storage takes no
``?operation_timeout=`` is given none, so its own default bound applies.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from common import (
    PYTHON,
    ROOT,
    SERVER_URLS,
    BenchError,
    Result,
    Workspace,
    drop_namespace,
    failed,
    format_value,
    log,
    main_single,
    percentile,
    server_problem,
    start_server,
    stop_server,
)

STALLPROXY = ROOT / "tests" / "storage" / "stallproxy.py"
KINDS = ("GET /healthz", "GET /v1/models", "turn, other conversation")
TARGET_S = 0.100
HANG_S = 120
BASELINE_ENV = "STALL_BASELINE"


def stallproxy():
    spec = importlib.util.spec_from_file_location("stallproxy", STALLPROXY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def takes_bound(tree: Path, backend: str) -> bool:
    """Whether the storage of ``tree``/foliko_cli reads its bound from the URL."""
    if backend == "redis":
        return True  # redis-py reads socket_timeout itself
    source = (tree / "foliko_cli" / "storage" / "postgres.py").read_text()
    return '"operation_timeout"' in source


@contextlib.contextmanager
def proxied_storage(backend: str, tree: Path, bound: float) -> Iterator[tuple[str, object]]:
    """A storage URL of ``backend`` in a fresh namespace through a stalling proxy; the
    namespace is removed afterwards."""
    namespace = f"foliko_bench_stall_{secrets.token_hex(4)}"
    url = SERVER_URLS[backend]
    option = "socket_timeout" if backend == "redis" else "operation_timeout"
    query = ("prefix=" if backend == "redis" else "schema=") + namespace
    if takes_bound(tree, backend):
        query += f"&{option}={bound:g}"
    module = stallproxy()
    parts = urlsplit(url)
    try:
        with module.StallingProxy((parts.hostname, parts.port), lifetime=10 * HANG_S) as proxy:
            yield module.through(url, proxy) + "?" + query, proxy
    finally:
        drop_namespace(backend, namespace)


def marker(backend: str, conversation: str) -> bytes:
    """Bytes only the frozen conversation's storage traffic carries."""
    from foliko_cli.storage.redis import hash_tag

    return (hash_tag(conversation) if backend == "redis" else conversation).encode()


async def turn(http, conversation: str, text: str):
    body = {"model": "echo", "input": text, "conversation": conversation}
    return await http.post("/v1/responses", json=body)


async def sample(http, other: str, n: int, until: asyncio.Task | None) -> dict[str, list[float]]:
    """Three clients at once, one per kind, each sending requests one after another:
    ``n`` each, or until ``until`` is done. Latencies in seconds, by kind."""

    async def client(kind: str) -> list[float]:
        times: list[float] = []
        while len(times) < n and not (until and until.done()):
            began = time.perf_counter()
            if kind == KINDS[2]:
                response = await turn(http, other, f"request {len(times)}")
            else:
                response = await http.get(kind.split()[1])
            times.append(time.perf_counter() - began)
            if response.status_code != 200:
                raise BenchError(f"{kind}: HTTP {response.status_code}: {response.text[:200]}")
        return times

    return dict(zip(KINDS, await asyncio.gather(*map(client, KINDS)), strict=True))


async def measure(url: str, backend: str, proxy, n: int) -> dict:
    import httpx2 as httpx

    async with httpx.AsyncClient(base_url=url, timeout=HANG_S) as http:
        frozen, other = [(await http.post("/v1/conversations", json={})).json()["id"] for _ in "ab"]
        for conversation in (frozen, other):
            reply = await turn(http, conversation, "before")
            if reply.status_code != 200:
                raise BenchError(f"the first turn: HTTP {reply.status_code}: {reply.text[:200]}")
        await sample(http, other, 5, None)  # warm-up
        calm = await sample(http, other, n, None)
        proxy.freeze_on(marker(backend, frozen))
        began = time.perf_counter()
        stalled = asyncio.create_task(turn(http, frozen, "stalled"))
        if not await asyncio.to_thread(proxy.frozen.wait, HANG_S):
            raise BenchError("the proxy never saw the frozen conversation's traffic")
        during = await sample(http, other, n, stalled)
        reply = await stalled
        return {
            "calm": calm,
            "stalled": during,
            "frozen_s": time.perf_counter() - began,
            "frozen_status": reply.status_code,
        }


def figures(backend: str, which: str, measured: dict, target: bool) -> list[Result]:
    results = []
    for condition, label in (("stalled", "frozen connection"), ("calm", "no stall")):
        for kind, times in measured[condition].items():
            p99 = percentile(times, 0.99)
            result = Result(
                "STALL",
                f"{backend}{which}, {label}: {kind} p99",
                "s",
                runs=times,
                value=p99,
                note=f"p50 {format_value(percentile(times, 0.5), 's')}, "
                f"max {format_value(max(times), 's')}, {len(times)} sent",
            )
            if target and condition == "stalled":
                result.target = f"<= {TARGET_S * 1000:.0f} ms"
                result.met = p99 <= TARGET_S
            results.append(result)
    status = measured["frozen_status"]
    frozen = Result(
        "STALL",
        f"{backend}{which}: the frozen turn",
        "s",
        runs=[measured["frozen_s"]],
        note=f"HTTP {status}",
        target="HTTP 503",
        met=status == 503,
    )
    log(
        f"STALL: {backend}{which}: frozen turn {measured['frozen_s']:.2f} s, HTTP {status}; "
        + "; ".join(f"{r.figure.split(', ', 1)[1]} {format_value(r.value, 's')}" for r in results)
    )
    return [*results, frozen]


def one_server(ws: Workspace, backend: str, tree: Path, which: str, n: int, bound: float):
    env = {"FOLIKO_HOME": str(ws.fresh("stall-home")), "FOLIKO_MODEL": "echo"}
    env["PYTHONSAFEPATH"] = "1"  # no foliko_cli of the working directory before PYTHONPATH's
    if tree != ROOT:
        paths = (str(tree), os.environ.get("PYTHONPATH"))
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    with proxied_storage(backend, tree, bound) as (storage, proxy):
        if not takes_bound(tree, backend):
            log(f"STALL: {tree} takes no ?operation_timeout=: its default bound applies")
        argv = [PYTHON, "-m", "foliko_cli", "--storage", storage, "serve", "--port", "0"]
        server, url = start_server(argv, ws.env(**env))
        try:
            measured = asyncio.run(measure(url, backend, proxy, n))
        finally:
            stop_server(server)
    return figures(backend, which, measured, target=tree == ROOT)


def run(ws: Workspace, quick: bool = False) -> list[Result]:
    n = 20 if quick else 200
    bound = 2.0 if quick else 5.0
    trees = {"": ROOT}
    if os.environ.get(BASELINE_ENV):
        trees[" [baseline]"] = Path(os.environ[BASELINE_ENV]).resolve()
    backends = os.environ.get("STALL_BACKENDS", "postgresql,redis").split(",")
    results: list[Result] = []
    for backend in backends:
        if backend not in ("postgresql", "redis"):
            raise BenchError(f"STALL_BACKENDS: unknown backend {backend!r} (postgresql, redis)")
        problem = server_problem(backend)
        if problem is not None:
            log(f"STALL: {backend} skipped: {problem}")
            continue
        for which, tree in trees.items():
            try:
                results += one_server(ws, backend, tree, which, n, bound)
            except Exception as exc:
                results.append(failed("STALL", f"{backend}{which}", "s", "<= 100 ms", exc))
    return results


if __name__ == "__main__":
    main_single(run, __doc__)
