"""HOSTS: turns per second with 1, 2 and 3 ``foliko serve`` hosts on one
database (PostgreSQL, then Redis), beside that database's own floor.

Each host is a ``foliko serve`` (one worker, echo model) in a network
namespace of its own, reaching a PostgreSQL cluster or a Redis server of the
run's own over a bridge, as in the multi-host harness (tests/hosts/). CLIENTS
conversations at once, each in its own session, send non-streamed turns one
after another, each to the next host of a client-side round robin, for
SECONDS after a warm-up; the figure is the turns completed per second.

The floor is what the database does for a turn with nothing else around it:
the storage adapter's own calls of a turn (take the session's lock, read its
recent history, append the user message and the reply, let go of the lock),
from CLIENTS tasks of one process in the root namespace, over the same
bridge. No host can beat it; the ratio says how much of it the hosts reach.

Needs root, ``ip``, ``nft``, PostgreSQL's initdb and redis-server:

    sudo .venv/bin/python bench/hosts.py [--quick] [--seconds 10] [--clients 24]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from hosts import cluster, net  # noqa: E402
from hosts.harness import problem  # noqa: E402

WARMUP_S = 2.0


async def hosts_rate(urls: list[str], clients: int, seconds: float) -> tuple[float, int]:
    """(turns per second, errors) of ``clients`` conversations over ``urls``."""
    import httpx2 as httpx

    headers = {"Authorization": f"Bearer {cluster.API_KEY}"}
    limits = httpx.Limits(max_connections=clients * 2)
    counter = [0]
    done = [0, 0]  # turns, errors (counted after the warm-up only)
    async with httpx.AsyncClient(headers=headers, limits=limits, timeout=60) as http:

        def next_url() -> str:
            counter[0] += 1
            return urls[counter[0] % len(urls)]

        async def client(n: int, start: float) -> None:
            made = await http.post(next_url() + "/v1/conversations", json={})
            conversation = made.json()["id"]
            turn = 0
            while (now := time.monotonic()) < start + WARMUP_S + seconds:
                answer = await http.post(
                    next_url() + "/v1/responses",
                    json={"model": "echo", "input": f"c{n} t{turn}", "conversation": conversation},
                )
                turn += 1
                if now >= start + WARMUP_S:
                    done[0 if answer.status_code == 200 else 1] += 1

        start = time.monotonic()
        await asyncio.gather(*(client(n, start) for n in range(clients)))
    return done[0] / seconds, done[1]


async def floor_rate(url: str, clients: int, seconds: float) -> float:
    """Turns per second of the storage's own calls for a turn, nothing else."""
    from foliko_cli.messages.record import SessionState, new_metadata
    from foliko_cli.storage import open_storage

    storage = open_storage(url, Path("/nonexistent"))
    done = [0]

    async def client(n: int, start: float) -> None:
        session = f"floor-{n}"
        turn = 0
        while (now := time.monotonic()) < start + WARMUP_S + seconds:
            async with storage.lock(session, 30):
                record = await storage.load_recent(session)
                revision = record.revision if record else 0
                state = SessionState({}, record.metadata if record else new_metadata(), {})
                messages = [
                    {"role": "user", "content": f"t{turn}", "created_at": 1},
                    {"role": "assistant", "content": f"t{turn}", "created_at": 1},
                ]
                await storage.append(session, messages, state, expected_revision=revision)
            turn += 1
            if now >= start + WARMUP_S:
                done[0] += 1

    try:
        start = time.monotonic()
        await asyncio.gather(*(client(n, start) for n in range(clients)))
    finally:
        await storage.close()
    return done[0] / seconds


def measure(backend: str, clients: int, seconds: float, counts: list[int]) -> list[tuple]:
    rows = []
    with contextlib.ExitStack() as stack:
        network = net.Network(max(counts))
        stack.callback(network.close)
        if backend == "postgres":
            database: cluster.Postgres | cluster.Redis = cluster.Postgres(
                network.bridge_ip, str(network.subnet)
            )
        else:
            database = cluster.Redis(network.bridge_ip, 15_000)
        stack.callback(database.close)
        floor = asyncio.run(floor_rate(database.storage_url("bench_floor"), clients, seconds))
        rows.append((backend, "floor: the storage calls of a turn, alone", floor, 0, 1.0))
        print(f"[hosts] {backend} floor: {floor:.0f} turns/s", file=sys.stderr, flush=True)
        url = database.storage_url(f"bench_{network.tag}")
        hosts = []
        for index in range(max(counts)):
            hosts.append(cluster.Host(network, index, url, {"FOLIKO_MODEL": "echo"}))
            stack.callback(hosts[-1].close)
        for count in counts:
            urls = [h.url for h in hosts[:count]]
            rate, errors = asyncio.run(hosts_rate(urls, clients, seconds))
            what = f"{count} host{'s' if count > 1 else ''}"
            rows.append((backend, what, rate, errors, rate / floor))
            print(f"[hosts] {backend} {what}: {rate:.0f} turns/s", file=sys.stderr, flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 s a figure, 4 clients")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=24)
    parser.add_argument("--backend", choices=("postgres", "redis", "both"), default="both")
    args = parser.parse_args()
    seconds, clients = (2.0, 4) if args.quick else (args.seconds, args.clients)
    backends = ("postgres", "redis") if args.backend == "both" else (args.backend,)
    rows = []
    for backend in backends:
        why = problem(backend)
        if why is not None:
            print(f"HOSTS: cannot run on {backend}: {why}", file=sys.stderr)
            return 2
        rows += measure(backend, clients, seconds, [1, 2, 3])
    head = f"what ({clients} clients, {seconds:g} s)"
    print(f"| backend | {head} | turns/s | errors | of the floor |")
    print("| --- | --- | ---: | ---: | ---: |")
    for backend, what, rate, errors, ratio in rows:
        print(f"| {backend} | {what} | {rate:.0f} | {errors} | {ratio:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
