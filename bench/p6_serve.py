"""P6: ``foliko serve`` under 1, 16 and 64 concurrent clients, against its floor.

Each client sends its turns one after another (``POST /v1/responses``,
echo model, SQLite), in conversations of its own of TURNS_PER_CONVERSATION
turns each, made beforehand: the figure is the server's, not the cost of an
ever longer history (that is P2's). Reported per concurrency:
turns per second and the p50/p99 latency. The floor is the same Starlette
+ uvicorn stack answering a constant JSON body to the same requests; the
ratio at 16 clients (foliko's rate over the floor's) should be at least 0.5.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time

from common import (
    PYTHON,
    Result,
    Workspace,
    failed,
    log,
    main_single,
    percentile,
    start_server,
    stop_server,
)

FLOOR_APP = """
import sys, uvicorn
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route
BODY = b'{"id":"resp_0","object":"response","status":"completed","output":[]}'
async def answer(request):
    await request.body()
    return Response(BODY, media_type="application/json")
app = Starlette(routes=[Route("/v1/responses", answer, methods=["POST"])])
class Announcing(uvicorn.Server):
    async def startup(self, sockets=None):
        await super().startup(sockets)
        port = self.servers[0].sockets[0].getsockname()[1]
        print(f"listening on http://127.0.0.1:{port}", file=sys.stderr, flush=True)
config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", access_log=False)
Announcing(config).run()
"""
TARGET_RATIO = 0.5
TURNS_PER_CONVERSATION = 10


async def load(
    url: str, clients: int, turns: int, conversations: bool
) -> tuple[float, list[float]]:
    """(turns per second, each turn's latency in seconds)."""
    import httpx2 as httpx

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        per_client = -(-turns // TURNS_PER_CONVERSATION)
        plans: list[list[str]] = []
        for _ in range(clients):
            ids = ["none"] * per_client
            if conversations:
                ids = [
                    (await http.post("/v1/conversations", json={})).json()["id"]
                    for _ in range(per_client)
                ]
            plans.append(ids)
        latencies: list[float] = []

        async def client(ids: list[str]) -> None:
            for n in range(turns):
                conversation = ids[n // TURNS_PER_CONVERSATION]
                began = time.perf_counter()
                response = await http.post(
                    "/v1/responses",
                    json={"model": "echo", "input": f"turn {n}", "conversation": conversation},
                )
                latencies.append(time.perf_counter() - began)
                if response.status_code != 200:
                    raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")

        started = time.perf_counter()
        await asyncio.gather(*(client(ids) for ids in plans))
        elapsed = time.perf_counter() - started
    return clients * turns / elapsed, latencies


def run(ws: Workspace, quick: bool = False) -> list[Result]:
    levels = (1, 4) if quick else (1, 16, 64)
    turns_per_client = {1: 20, 4: 5} if quick else {1: 200, 16: 40, 64: 12}
    runs = 1 if quick else 3
    home = ws.fresh("p6-home")
    env = ws.env(FOLIKO_HOME=str(home), FOLIKO_MODEL="echo", FOLIKO_STORAGE="sqlite")
    results = []
    servers: list[subprocess.Popen] = []
    try:
        foliko_proc, foliko_url = start_server(
            [PYTHON, "-m", "foliko_cli", "serve", "--port", "0"], env
        )
        servers.append(foliko_proc)
        floor_proc, floor_url = start_server([PYTHON, "-c", FLOOR_APP], env)
        servers.append(floor_proc)
    except Exception as exc:
        for proc in servers:
            stop_server(proc)
        return [failed("P6", "foliko serve", "turns/s", "", exc)]
    try:
        for clients in levels:
            figure = f"serve: {clients} concurrent client(s), echo, SQLite"
            target = f">= {TARGET_RATIO} x floor" if clients == 16 else ""
            result = Result("P6", figure, "turns/s", target=target)
            try:
                floor_rates, latencies = [], []
                for _ in range(runs):
                    turns = turns_per_client[clients]
                    floor_rate, _ = asyncio.run(load(floor_url, clients, turns, False))
                    rate, measured = asyncio.run(load(foliko_url, clients, turns, True))
                    floor_rates.append(floor_rate)
                    result.runs.append(rate)
                    latencies += measured
                floor = statistics.median(floor_rates)
                result.ratio = result.median / floor
                result.ratio_label = "of floor"
                result.details = {
                    "floor_turns_per_s": floor,
                    "p50_ms": 1000 * percentile(latencies, 0.5),
                    "p99_ms": 1000 * percentile(latencies, 0.99),
                }
                log(
                    f"P6: {clients} clients: {result.median:.0f} turns/s (floor {floor:.0f}), "
                    f"p50 {result.details['p50_ms']:.1f} ms, p99 {result.details['p99_ms']:.1f} ms"
                )
                if target:
                    result.met = result.ratio >= TARGET_RATIO
            except Exception as exc:
                result = failed("P6", figure, "turns/s", target, exc)
            results.append(result)
    finally:
        for proc in servers:
            stop_server(proc)
    return results


if __name__ == "__main__":
    sys.path.insert(0, ".")
    main_single(run, __doc__)
