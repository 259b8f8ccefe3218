"""Three ``foliko serve`` hosts on one database, under faults: the whole run.

    python -m tests.hosts.harness --backend postgres --turns 1000

(as root: ``make test-hosts`` runs it on both backends). It builds the
network (net.py), the database and the hosts (cluster.py), runs the clients
(workload.py) and the faults (faults.py) until both the turns and every
fault kind are done, settles every background response, reads the store
and checks it all (checker.py). It prints the figures, writes them as JSON
with ``--report``, and exits 1 on any lost, duplicated, mixed, reordered,
phantom, stuck, broken or locked turn. Everything it made is removed at the
end, whatever happened.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import functools
import json
import secrets
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "hosts"

from . import cluster, net, workload
from .checker import check, summary
from .faults import FAULTS, Injector

PG_LOCK_RELEASE_S = 11.0
"""PostgreSQL: a dead holder's connection closes at once; one behind a stall
is dropped by the server's keepalives (idle 5 s, 3 probes 2 s apart)."""
LOCK_SLACK_S = 5.0


@dataclass
class Plan:
    backend: str
    turns: int = 1000
    conversations: int = 24
    hosts: int = 3
    rounds: int = 2
    """Every fault kind at least this many times."""
    seed: int = 0
    lease_s: float = 15.0
    """The background lease (and the Redis lock's)."""
    cut: tuple[float, float] = (2.0, 20.0)
    pause: tuple[float, float] = (1.0, 4.0)
    model_delay_s: float = 0.05


def problem(backend: str) -> str | None:
    """None when this machine can run the harness on ``backend``, else why not."""
    found = net.problem()
    if found is None:
        found = cluster.postgres_problem() if backend == "postgres" else cluster.redis_problem()
    return found


def run(plan: Plan, log: Any = None) -> dict[str, Any]:
    """One run; its figures (``failed`` says whether the checker found a problem)."""
    seed = plan.seed or secrets.randbelow(2**31)
    log = log or functools.partial(print, flush=True)
    with contextlib.ExitStack() as stack:
        network = net.Network(plan.hosts)
        stack.callback(network.close)
        database: cluster.Postgres | cluster.Redis
        if plan.backend == "postgres":
            database = cluster.Postgres(network.bridge_ip, str(network.subnet))
            bound = PG_LOCK_RELEASE_S + LOCK_SLACK_S
        else:
            database = cluster.Redis(network.bridge_ip, int(plan.lease_s * 1000))
            bound = plan.lease_s + LOCK_SLACK_S
        stack.callback(database.close)
        url = database.storage_url(f"harness_{network.tag}")
        env = {
            "FOLIKO_SERVE_BACKGROUND_LEASE": str(plan.lease_s),
            "HOSTECHO_DELAY_S": str(plan.model_delay_s),
        }
        hosts = []
        for index in range(plan.hosts):
            hosts.append(cluster.Host(network, index, url, env))
            stack.callback(hosts[-1].close)
        log(f"{plan.backend}: {plan.hosts} hosts on {network.subnet}, seed {seed}")
        workload.STUCK_AFTER_S[0] = plan.lease_s * 2 + 60
        clients = workload.Clients([h.url for h in hosts], seed)
        injector = Injector(network, hosts, database, clients, seed, plan.cut, plan.pause)
        started = time.monotonic()
        asyncio.run(_drive(plan, clients, injector, log))
        elapsed = time.monotonic() - started
        unsettled = asyncio.run(_settle(clients, url, plan.lease_s))
        stored = asyncio.run(_read_store(url, clients.turns))
        report = check(clients.turns, stored, injector.done, plan.backend, bound)
        for problem_ in unsettled:
            report.bad("stuck", problem_)
        figures = summary(report)
        figures.update(
            backend=plan.backend,
            seed=seed,
            seconds=round(elapsed, 1),
            turns=len(clients.turns),
            chains=clients.chains,
            faults={kind: injector.count(kind) for kind in FAULTS},
            fault_log=[asdict(f) for f in injector.done],
            lock_bound_s=bound,
            reasons=collections.Counter(
                f"{t.outcome} ({t.kind}): {t.detail[:90]}"
                for t in clients.turns
                if t.outcome != "acked"
            ).most_common(12),
            failed=report.failed,
        )
        if report.failed:
            figures["turn_log"] = workload.dump(clients.turns)
            figures["host_logs"] = {h.index: h.log[-50:] for h in hosts}
    figures["leftovers"] = list(network.leftovers())
    return figures


async def _drive(plan: Plan, clients: workload.Clients, injector: Injector, log: Any) -> None:
    stop = asyncio.Event()
    faults = asyncio.ensure_future(injector.run(stop))

    def enough() -> bool:
        if faults.done():  # it failed: stop the clients, and the run raises its error
            return True
        # never during or right after a restart: on Redis, its store would hold
        # nothing to check
        running = injector.running is not None and injector.running.kind == "restart"
        after_restart = bool(injector.done) and injector.done[-1].kind == "restart"
        done = (
            len(clients.turns) >= plan.turns
            and all(injector.count(kind) >= plan.rounds for kind in FAULTS)
            and not running
            and not after_restart
        )
        if done:
            stop.set()  # no fault starts while the last turns end
        return done

    async def progress() -> None:
        while not stop.is_set():
            await asyncio.sleep(5)
            done = sum(1 for t in clients.turns if t.ended)
            faults = ", ".join(f"{k} {injector.count(k)}" for k in FAULTS)
            running = injector.running.kind if injector.running else "-"
            log(f"  {done}/{len(clients.turns)} turns ended; faults: {faults}; now: {running}")

    reporter = asyncio.ensure_future(progress())
    try:
        await clients.run(plan.conversations, enough)
    finally:
        stop.set()
        await faults
        reporter.cancel()


async def _settle(clients: workload.Clients, url: str, lease_s: float) -> list[str]:
    """Every background journal in the store, asked of a host until it has
    ended: those still running a lease and a minute after the run."""
    from foliko_cli.storage import open_storage

    storage = open_storage(url, Path("/nonexistent"))
    try:
        prefix = f"~{cluster.USER}~/.foliko/background/"
        journals = [s for s in await storage.session_ids() if s.startswith(prefix)]
        ids = []
        for journal in journals:
            record = await storage.load_state(journal)
            if record is not None and record.variables.get("id"):
                ids.append(record.variables["id"])
    finally:
        await storage.close()
    import httpx2 as httpx

    deadline = time.monotonic() + lease_s + 60
    running: list[str] = []
    headers = {"Authorization": f"Bearer {cluster.API_KEY}"}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        for response_id in ids:
            while True:
                answer = await http.get(f"{clients.urls[0]}/v1/responses/{response_id}")
                status = answer.json().get("status") if answer.status_code == 200 else None
                if status not in ("queued", "in_progress") or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.5)
            if status in ("queued", "in_progress"):
                running.append(f"{response_id} still {status} after the run")
    return running


async def _read_store(url: str, turns: list[workload.Turn]) -> dict[str, list[str] | None]:
    from foliko_cli.storage import open_storage

    storage = open_storage(url, Path("/nonexistent"))
    found: dict[str, list[str] | None] = {}
    try:
        for session in {t.session for t in turns if t.session}:
            record = await storage.load(f"~{cluster.USER}~/{session}")
            found[session] = (
                None
                if record is None
                else [str(m.get("content")) for m in record.messages if m["role"] == "user"]
            )
    finally:
        await storage.close()
    return found


def show(figures: dict[str, Any]) -> str:
    counts = figures["counts"]
    outcomes = {k.removeprefix("turns_"): v for k, v in counts.items() if k.startswith("turns_")}
    lines = [
        f"{figures['backend']}: {figures['turns']} turns in {figures['chains']} chains, "
        f"{figures['seconds']} s, seed {figures['seed']}",
        "  outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())),
        "  faults: " + ", ".join(f"{k} {v}" for k, v in figures["faults"].items()),
        "  problems: "
        + ", ".join(
            f"{k} {counts.get(k, 0)}"
            for k in (
                "lost",
                "duplicated",
                "mixed",
                "reordered",
                "phantom",
                "stuck",
                "broken",
                "locked",
            )
        ),
        f"  documented Redis loss (acknowledged, then wiped by a restart): "
        f"{counts.get('lost_expected', 0)}; slowest turn after a kill: "
        f"{counts.get('locked_worst_ms', 0) / 1000:.1f} s (bound {figures['lock_bound_s']:g} s); "
        f"torn resumed streams (known, not failed): {counts.get('torn_streams', 0)}",
    ]
    for kind, examples in figures["examples"].items():
        lines.extend(f"  {kind}: {example}" for example in examples)
    if figures["leftovers"]:
        lines.append(f"  LEFT BEHIND: {figures['leftovers']}")
    return "\n".join(lines)


QUICK = {
    "turns": 80,
    "conversations": 10,
    "rounds": 1,
    "lease_s": 12.0,  # above PostgreSQL's ~11 s to drop a cut host's connection
    "cut": (1.0, 4.0),
    "pause": (0.2, 0.6),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("postgres", "redis", "both"), default="both")
    parser.add_argument("--turns", type=int, default=1000, help="per backend")
    parser.add_argument("--conversations", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=2, help="each fault kind at least N times")
    parser.add_argument("--lease", type=float, default=15.0, help="background and Redis lease, s")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="the small CI run")
    parser.add_argument("--report", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    # a SIGTERM (a timeout, CI) unwinds the run, so that everything is cleaned up
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    backends = ("postgres", "redis") if args.backend == "both" else (args.backend,)
    results = []
    for backend in backends:
        why = problem(backend)
        if why is not None:
            print(f"{backend}: cannot run: {why}", file=sys.stderr)
            return 2
        plan = Plan(
            backend, args.turns, args.conversations, rounds=args.rounds, seed=args.seed,
            lease_s=args.lease,
        )  # fmt: skip
        if args.quick:
            plan = Plan(backend, seed=args.seed, **QUICK)  # type: ignore[arg-type]
        figures = run(plan)
        print(show(figures), flush=True)
        results.append(figures)
    if args.report:
        args.report.write_text(json.dumps(results, indent=1, default=str))
    return 1 if any(r["failed"] or r["leftovers"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
