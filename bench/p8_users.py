"""P8: 1,000 distinct users of ``foliko serve --api-keys``, one turn each, with a
stdio MCP server configured, against the same run without MCP.

Each run starts two fresh ``foliko serve`` (echo model, SQLite, one worker),
one with the MCP server configured and one without, each with an --api-keys
file of USERS keys; CLIENTS coroutines send the users' turns (``POST
/v1/chat/completions``, one session per user), each user once, in BLOCKS
blocks that alternate between the two servers (the order rotating), so a busy
moment of the machine slows both alike.
One more user's turn comes first, untimed: it starts the MCP server
(importing the ``mcp`` SDK, spawning the server: a second or more, once per
worker, whatever the number of users). Reported per run: turns per second of
the USERS turns, and the resident memory (VmRSS) of the server and all its
descendants, and how many descendants it has, read from /proc after that
first turn (the start; ``cold_mb`` in the JSON is just after it listens) and
after the last turn. The MCP server is tests/mcp/stdio_server.py,
``per_user`` left false (the default): one process for every user's service.

Targets: memory after within 100 MB of the start; the descendants left with
MCP no more than those without it plus the one configured server; turns per
second with MCP at least 0.8x the run without.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from common import PYTHON, Result, Workspace, failed, log, main_single, start_server, stop_server

USERS = 1000
CLIENTS = 16
BLOCKS = 10
RUNS = 3
MEMORY_TARGET_MB = 100.0
RATE_TARGET = 0.8
MCP_SERVER = Path(__file__).resolve().parents[1] / "tests" / "mcp" / "stdio_server.py"


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rpartition(")")[2].split()[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def resident_mb(pids: list[int]) -> float:
    total_kb = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
        except OSError:
            continue
    return total_kb / 1024


def footprint(pid: int) -> tuple[float, int]:
    """(resident MB of the process and its descendants, how many descendants)."""
    others = descendants(pid)
    return resident_mb([pid, *others]), len(others)


async def turns(url: str, users: list[str]) -> float:
    """Each user's one turn, CLIENTS at a time; turns per second."""
    import httpx2 as httpx

    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
    queue = list(reversed(users))
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:

        async def client() -> None:
            while queue:
                user = queue.pop()
                response = await http.post(
                    "/v1/chat/completions",
                    json={"model": "echo", "messages": [{"role": "user", "content": user}]},
                    headers={"Authorization": f"Bearer key-{user}", "X-Session-Id": "s"},
                )
                if response.status_code != 200:
                    raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(CLIENTS)))
        return len(users) / (time.perf_counter() - started)


def serve(ws: Workspace, names: list[str], mcp: bool):
    """A fresh ``foliko serve --api-keys`` for ``names`` (with the MCP server or none)."""
    home = ws.fresh("p8-home")
    keys = home / "keys.toml"
    keys.write_text("[keys]\n" + "".join(f'"key-{name}" = "{name}"\n' for name in names))
    keys.chmod(0o600)
    config = home / "config.toml"
    config.write_text(
        f'[mcp_servers.bench]\ncommand = "{PYTHON}"\nargs = ["{MCP_SERVER}"]\n' if mcp else ""
    )
    env = ws.env(FOLIKO_HOME=str(home), FOLIKO_MODEL="echo", FOLIKO_CONFIG=str(config))
    argv = [PYTHON, "-m", "foliko_cli", "serve", "--port", "0", "--api-keys", str(keys)]
    return start_server(argv, env)


def one_run(ws: Workspace, users: int) -> dict[str, dict[str, float]]:
    """Both servers side by side, their users' turns in alternating blocks (so a
    busy moment of the machine slows both alike); per server its figures."""
    names = [f"user{n:04d}" for n in range(users + 1)]
    servers = {}
    try:
        for kind in ("plain", "mcp"):
            servers[kind] = serve(ws, names, mcp=kind == "mcp")
        figures: dict[str, dict[str, float]] = {}
        for kind, (proc, url) in servers.items():
            figures[kind] = {"cold_mb": footprint(proc.pid)[0], "seconds": 0.0}
            asyncio.run(turns(url, names[:1]))
            figures[kind]["start_mb"], figures[kind]["start_processes"] = footprint(proc.pid)
        size = -(-users // BLOCKS)
        blocks = [names[1 + n : 1 + n + size] for n in range(0, users, size)]
        for index, block in enumerate(blocks):
            order = list(servers.items())
            for kind, (_, url) in order[index % 2 :] + order[: index % 2]:
                figures[kind]["seconds"] += len(block) / asyncio.run(turns(url, block))
        for kind, (proc, _) in servers.items():
            figures[kind]["end_mb"], figures[kind]["end_processes"] = footprint(proc.pid)
            figures[kind]["turns_per_s"] = users / figures[kind].pop("seconds")
    finally:
        for proc, _ in servers.values():
            stop_server(proc)
    return figures


def run(ws: Workspace, quick: bool = False) -> list[Result]:
    users = 50 if quick else USERS
    runs = 1 if quick else RUNS
    rate = Result("P8", f"serve: {users:,} users, 1 turn each, stdio MCP", "turns/s")
    rate.target = f">= {RATE_TARGET} x without MCP"
    memory = Result("P8", "  resident memory added (server + children)", "MB")
    memory.target = f"<= {MEMORY_TARGET_MB:.0f} MB"
    processes = Result("P8", "  processes left, with MCP minus without", "processes")
    processes.target = "<= 1 (servers configured)"
    try:
        plain_rates, plain_left = [], []
        for _ in range(runs):
            figures = one_run(ws, users)
            plain, with_mcp = figures["plain"], figures["mcp"]
            log(f"P8: without MCP {plain}")
            log(f"P8: with MCP {with_mcp}")
            plain_rates.append(plain["turns_per_s"])
            plain_left.append(plain["end_processes"])
            rate.runs.append(with_mcp["turns_per_s"])
            memory.runs.append(with_mcp["end_mb"] - with_mcp["start_mb"])
            processes.runs.append(with_mcp["end_processes"] - plain["end_processes"])
            memory.details.setdefault("runs", []).append({"mcp": with_mcp, "plain": plain})
    except Exception as exc:
        return [failed("P8", rate.figure, "turns/s", rate.target, exc)]
    plain_median = sorted(plain_rates)[len(plain_rates) // 2]
    rate.ratio, rate.ratio_label = rate.median / plain_median, "of no MCP"
    rate.details = {"without_mcp_turns_per_s": plain_rates}
    rate.met = rate.ratio >= RATE_TARGET
    memory.met = memory.median <= MEMORY_TARGET_MB
    processes.met = max(processes.runs) <= 1
    return [rate, memory, processes]


if __name__ == "__main__":
    sys.path.insert(0, ".")
    main_single(run, __doc__)
