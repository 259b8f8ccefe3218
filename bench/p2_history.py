"""P2: the cost of one turn as the stored history grows (10, 10,000, 100,000 messages).

In-process, through ``foliko_cli.service.facade.Foliko`` with the echo model, on
every persistent backend: SQLite, JSON, and PostgreSQL and Redis when their
servers answer (``FOLIKO_TEST_POSTGRES_URL``, ``FOLIKO_TEST_REDIS_URL``, else
127.0.0.1; a fresh schema or key prefix, dropped afterwards; a backend whose
server does not answer is skipped with one line saying why). Each figure is
the CPU time of this process (``time.process_time``: the turn's own work,
whatever the disk or the server does meanwhile), on several sessions that
each hold N stored messages:

- warm: a long-lived facade that has already loaded the session (a library
  or server process); the turn checks the stored revision, runs, appends.
  Three timed turns per session.
- cold: a new facade per turn, as every ``foliko chat`` process does (less
  interpreter start-up): open the backend, lock the session, load what the
  turn sends (the messages after the compression summary), run, append,
  unlock, close.
- vars: ``sessions vars ID set K V`` as a new facade does it (an append of
  no messages with the revision read, which never reads the history).

Target (SQLite, PostgreSQL, Redis; every kind): cost@100,000 <= 1.5x cost@10.
JSON is reported: the seed's format is one document per session, so its
every write grows with the history.

Every session has had one untimed turn first (which, on a long session, does
the one-off compression of its history), so the figures are steady-state.

PostgreSQL also gets what one cold turn sends on the wire, counted by a proxy
(tests/storage/pgwire.py): connections, round trips, statements, transactions.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from common import (
    ROOT,
    Result,
    Workspace,
    drop_namespace,
    failed,
    log,
    main_single,
    make_record,
    namespaced_url,
    save_records,
    server_problem,
    settle,
    storage_url,
)

LIMIT = 1.5
WARM_ROUNDS = 3  # timed warm turns per session: at N, N + 2 and N + 4 stored messages
BACKENDS = ("sqlite", "json", "postgresql", "redis")
SERVERS = ("postgresql", "redis")
TARGETED = ("sqlite", "postgresql", "redis")
KINDS = ("warm", "cold", "vars")
PGWIRE = ROOT / "tests" / "storage" / "pgwire.py"


def cpu(fn: Callable[[], Any]) -> float:
    """The CPU time this process spends in ``fn()``."""
    start = time.process_time()
    fn()
    return time.process_time() - start


def seed(ws: Workspace, backend: str, size: int, count: int, namespace: str) -> tuple:
    """``count`` sessions for cold turns and ``count`` for warm ones, each with ``size - 2``
    messages: an untimed first turn brings them to ``size`` (and does the one-off
    compression a long session needs); returns the url and the two lists of ids."""

    def build(directory):
        if backend in SERVERS:
            drop_namespace(backend, namespace)
            url = namespaced_url(backend, namespace)
        else:
            path = directory / ("sessions.db" if backend == "sqlite" else "sessions")
            url = storage_url(backend, path)
        cold = [f"cold-{i}" for i in range(count)]
        warm = [f"warm-{i}" for i in range(count)]
        records = (make_record(sid, max(size - 2, 0), i) for i, sid in enumerate(cold + warm))
        save_records(url, directory, records, batch=count if size <= 10_000 else 1)
        return url, cold, warm

    return ws.dataset(f"p2-{backend}-{size}x{count}", build)


def measure(ws: Workspace, url: str, backend: str, size: int, ids: tuple) -> dict[str, list]:
    from foliko_cli.service.facade import Foliko

    cold_ids, warm_ids = ids
    home = ws.fresh(f"p2-{backend}-home")
    with Foliko(url, "echo", home=home) as facade:
        for sid in cold_ids:
            facade.chat(sid, "first turn, untimed")
    settle()
    cold = []
    for sid in cold_ids:

        def cold_turn(sid=sid):
            with Foliko(url, "echo", home=home) as facade:
                facade.chat(sid, "hi")

        cold.append(cpu(cold_turn))
    variables = []
    for i, sid in enumerate(cold_ids):

        def set_variable(sid=sid, i=i):
            with Foliko(url, "echo", home=home) as facade:
                facade.update_variables(sid, {"k": i})

        variables.append(cpu(set_variable))
    warm = []
    with Foliko(url, "echo", home=home) as facade:
        for sid in warm_ids:
            facade.chat(sid, "first turn, untimed: loads the history")
        for _ in range(WARM_ROUNDS):
            for sid in warm_ids:
                warm.append(cpu(lambda sid=sid: facade.chat(sid, "hi")))
        for sid in (cold_ids[0], warm_ids[0]):
            stored = facade.get_session(sid).metadata["message_count"]
            expected = size + 2 if sid in cold_ids else size + 2 * WARM_ROUNDS
            if stored != expected:
                raise AssertionError(f"{backend} {sid}: {stored} messages, expected {expected}")
        if facade.get_variables(cold_ids[-1]).get("k") != len(cold_ids) - 1:
            raise AssertionError(f"{backend}: the variable was not stored")
    return {"warm": warm, "cold": cold, "vars": variables}


def wire_counts(ws: Workspace, url: str, session_id: str) -> dict[str, list[int]]:
    """What each of three cold turns on ``session_id`` sends PostgreSQL."""
    from foliko_cli.service.facade import Foliko

    spec = importlib.util.spec_from_file_location("pgwire", PGWIRE)
    assert spec is not None and spec.loader is not None
    pgwire = sys.modules["pgwire"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pgwire)
    home = ws.fresh("p2-wire-home")
    runs: list[Any] = []
    with pgwire.counting_proxy(url) as proxy:
        proxied = pgwire.through(url, proxy)
        for _ in range(3):
            before = proxy.snapshot()
            with Foliko(proxied, "echo", home=home) as facade:
                facade.chat(session_id, "counted")
            runs.append(_settled(proxy) - before)
    fields = ("connections", "round_trips", "statements", "transactions")
    return {field: [getattr(run, field) for run in runs] for field in fields}


def _settled(proxy: Any) -> Any:
    """The proxy's counts once it has read everything sent (unchanged for 0.1 s)."""
    last = proxy.snapshot()
    while True:
        time.sleep(0.1)
        now = proxy.snapshot()
        if now == last:
            return now
        last = now


def _rows(backend: str, sizes: tuple[int, ...]) -> dict[str, list[Result]]:
    rows: dict[str, list[Result]] = {kind: [] for kind in KINDS}
    for size in sizes:
        for kind in KINDS:
            target = f"<= {LIMIT:g}x @{sizes[0]}" if backend in TARGETED else ""
            what = "vars set, new facade" if kind == "vars" else f"turn, {kind} facade"
            rows[kind].append(
                Result(
                    "P2",
                    f"{backend} {what}, {size:,} stored (CPU)",
                    "s",
                    ratio_label=f"of @{sizes[0]}",
                    target=target if size == sizes[-1] else "",
                )
            )
    return rows


def run(ws: Workspace, quick: bool = False) -> list[Result]:
    sizes = (10, 50, 200) if quick else (10, 10_000, 100_000)
    count = 3 if quick else 5
    only = os.environ.get("P2_BACKENDS")
    results = []
    for backend in only.split(",") if only else BACKENDS:
        if backend in SERVERS:
            problem = server_problem(backend)
            if problem is not None:
                log(f"P2: {backend} skipped: its server does not answer ({problem})")
                continue
        rows = _rows(backend, sizes)
        namespaces = [f"foliko_bench_p2_{size}_{os.getpid()}" for size in sizes]
        try:
            for i, size in enumerate(sizes):
                log(f"P2: {backend}, {size:,} stored messages, {count} sessions")
                url, *ids = seed(ws, backend, size, count, namespaces[i])
                for kind, runs in measure(ws, url, backend, size, tuple(ids)).items():
                    rows[kind][i].runs = runs
                if backend == "postgresql" and size == sizes[-1]:
                    results += _wire_results(ws, url, ids[0][0], size)
        except Exception as exc:
            results.append(failed("P2", f"{backend} turn", "s", rows["warm"][-1].target, exc))
            continue
        finally:
            if backend in SERVERS and not ws.keep:
                for namespace in namespaces:
                    drop_namespace(backend, namespace)
        for kind_rows in rows.values():
            base = statistics.median(kind_rows[0].runs)
            for row in kind_rows[1:]:
                row.ratio = row.median / base
                if row.target:
                    row.met = row.ratio <= LIMIT
            results += kind_rows
    return results


def _wire_results(ws: Workspace, url: str, session_id: str, size: int) -> list[Result]:
    counts = wire_counts(ws, url, session_id)
    log(f"P2: cold PostgreSQL turns on the wire: {counts}")
    return [
        Result(
            "P2",
            f"postgresql cold turn, {size:,} stored: {name.replace('_', ' ')}",
            name.replace("_", " "),
            runs=[float(n) for n in runs],
        )
        for name, runs in counts.items()
    ]


if __name__ == "__main__":
    main_single(run, __doc__)
