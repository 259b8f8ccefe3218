"""P3: `foliko sessions list --json` over many sessions, as a real process.

SQLite with 100,000 sessions (target: under 1 s, whole process), and the
JSON backend with 10,000 seed-format files (reported, no target). Each
session holds 4 messages. Output goes to /dev/null; one untimed run first
checks that every session is listed.
"""

from __future__ import annotations

import orjson
from common import (
    Result,
    Workspace,
    build_seed_json,
    build_sqlite_sessions,
    failed,
    foliko,
    log,
    main_single,
    run_process,
    storage_url,
    timed,
)

LIMIT_S = 1.0
MESSAGES = 4


def list_command(url: str) -> list[str]:
    return foliko("--storage", url, "sessions", "list", "--json")


def measure(ws: Workspace, url: str, expected: int, runs: int) -> list[float]:
    env = ws.env(FOLIKO_HOME=str(ws.fresh("p3-home")), FOLIKO_MODEL="echo")
    command = list_command(url)
    listed = orjson.loads(run_process(command, env, capture=True).stdout)
    if len(listed) != expected or any(row.get("error") for row in listed):
        raise AssertionError(f"listed {len(listed)} sessions, expected {expected} readable ones")
    return [timed(lambda: run_process(command, env)) for _ in range(runs)]


def run(ws: Workspace, quick: bool = False) -> list[Result]:
    sqlite_n, json_n = (300, 300) if quick else (100_000, 10_000)
    runs = 3 if quick else 7
    results = []
    figure = f"sqlite: sessions list --json, {sqlite_n:,} sessions"
    target = f"< {LIMIT_S:g} s"
    try:
        db = ws.dataset(
            f"sqlite-{sqlite_n}x{MESSAGES}",
            lambda d: build_sqlite_sessions(d, sqlite_n, MESSAGES),
        )
        log(f"P3: {figure}, {runs} runs")
        result = Result("P3", figure, "s", measure(ws, storage_url("sqlite", db), sqlite_n, runs))
        result.ratio, result.ratio_label = result.median / LIMIT_S, "of 1 s"
        result.target, result.met = target, result.median < LIMIT_S
        results.append(result)
    except Exception as exc:
        results.append(failed("P3", figure, "s", target, exc))
    figure = f"json: sessions list --json, {json_n:,} sessions"
    try:
        directory = ws.dataset(
            f"seed-json-{json_n}x{MESSAGES}", lambda d: build_seed_json(d, json_n, MESSAGES)
        )
        log(f"P3: {figure}, {runs} runs")
        runs_json = measure(ws, storage_url("json", directory), json_n, runs)
        results.append(Result("P3", figure, "s", runs_json))
    except Exception as exc:
        results.append(failed("P3", figure, "s", "", exc))
    return results


if __name__ == "__main__":
    main_single(run, __doc__)
