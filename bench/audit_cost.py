"""AUDIT: what recording an API key's requests costs a turn of ``foliko serve``.

Two servers side by side (echo, SQLite, one worker, ``--api-keys``, each in
a home of its own): this tree, which records every request of a key that
reads or writes a session in the audit log, and the tree in ``AUDIT_BASELINE``
(a directory first on its PYTHONPATH: ``git archive COMMIT foliko_cli | tar
-x -C DIR``), which records nothing. A client sends turns (``POST
/v1/responses`` on a conversation of its own, 10 turns each) with the key,
in blocks that alternate between the servers; the figure is each server's
p50 and p99 per turn, and this tree's p50 over the baseline's. Without
``AUDIT_BASELINE`` only this tree is measured. After the runs the log must
hold one entry per turn.
"""

from __future__ import annotations

import asyncio
import os
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

BASELINE_ENV = "AUDIT_BASELINE"
KEY = "bench-key"
TURNS_PER_CONVERSATION = 10


async def turns(url: str, count: int) -> list[float]:
    """``count`` turns of one client, one after another: each one's latency (s)."""
    import httpx2 as httpx

    headers = {"Authorization": f"Bearer {KEY}"}
    latencies = []
    async with httpx.AsyncClient(base_url=url, timeout=120, headers=headers) as http:
        conversation = ""
        for n in range(count):
            if n % TURNS_PER_CONVERSATION == 0:
                conversation = (await http.post("/v1/conversations", json={})).json()["id"]
            began = time.perf_counter()
            answer = await http.post(
                "/v1/responses",
                json={"model": "echo", "input": f"turn {n}", "conversation": conversation},
            )
            latencies.append(time.perf_counter() - began)
            if answer.status_code != 200:
                raise RuntimeError(f"HTTP {answer.status_code}: {answer.text[:200]}")
    return latencies


def run(ws: Workspace, quick: bool = False) -> list[Result]:
    blocks, per_block = (2, 20) if quick else (10, 100)
    baseline = os.environ.get(BASELINE_ENV)
    trees = {"audited": None, **({"baseline": baseline} if baseline else {})}
    servers: dict[str, tuple[subprocess.Popen, str]] = {}
    homes = {}
    try:
        for name, path in trees.items():
            home = homes[name] = ws.fresh(f"audit-{name}")
            keys = home / "keys.toml"
            keys.write_text(f'[keys]\n"{KEY}" = "bench"\n')
            keys.chmod(0o600)
            env = ws.env(FOLIKO_HOME=str(home), FOLIKO_MODEL="echo", FOLIKO_STORAGE="sqlite")
            if path:
                env["PYTHONPATH"] = path
            argv = [PYTHON, "-m", "foliko_cli", "serve", "--port", "0", "--api-keys", str(keys)]
            servers[name] = start_server(argv, env)
    except Exception as exc:
        for proc, _ in servers.values():
            stop_server(proc)
        return [failed("AUDIT", "serve turn with an API key", "s", "", exc)]
    measured: dict[str, list[float]] = {name: [] for name in servers}
    try:
        for block in range(blocks):
            order = list(servers) if block % 2 == 0 else list(reversed(servers))
            for name in order:
                measured[name] += asyncio.run(turns(servers[name][1], per_block))
    finally:
        for proc, _ in servers.values():
            stop_server(proc)
    results = []
    for name, latencies in measured.items():
        result = Result("AUDIT", f"serve turn with an API key: {name}", "s")
        result.runs = latencies
        result.details = {
            "p50_ms": 1000 * percentile(latencies, 0.5),
            "p99_ms": 1000 * percentile(latencies, 0.99),
        }
        results.append(result)
        log(
            f"AUDIT: {name}: p50 {result.details['p50_ms']:.2f} ms, "
            f"p99 {result.details['p99_ms']:.2f} ms over {len(latencies)} turns"
        )
    if baseline:
        results[0].ratio = results[0].median / results[1].median
        results[0].ratio_label = "of baseline"
    audited = homes["audited"]
    entries = subprocess.run(
        [PYTHON, "-m", "foliko_cli", "audit", "--json"],
        env=ws.env(FOLIKO_HOME=str(audited), FOLIKO_STORAGE="sqlite"),
        capture_output=True,
        check=True,
        cwd=audited,
    ).stdout.count(b'"POST /v1/responses"')
    log(f"AUDIT: the log holds {entries} turn entries for {len(measured['audited'])} turns")
    results[0].details["logged_turns"] = entries
    results[0].met = entries == len(measured["audited"])
    return results


if __name__ == "__main__":
    sys.path.insert(0, ".")
    main_single(run, __doc__)
