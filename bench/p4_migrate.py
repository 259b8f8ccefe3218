"""P4: `foliko storage migrate json:////src sqlite:////dst.db` against merely reading the files.

100,000 seed-format JSON session files (4 messages each). The baseline reads
and orjson-parses every file in this Python process; the migration runs as a
real process into a fresh database each time and must report every session
copied. Target: read time / migrate time >= 0.5 (at least half the speed).
"""

from __future__ import annotations

import os
import shutil
import statistics
from pathlib import Path

import orjson
from common import (
    Result,
    Workspace,
    build_seed_json,
    failed,
    foliko,
    log,
    main_single,
    run_process,
    settle,
    storage_url,
    timed,
)

LIMIT = 0.5
MESSAGES = 4


def read_and_parse(directory: Path) -> int:
    count = 0
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.endswith(".json"):
                with open(entry.path, "rb") as stream:
                    orjson.loads(stream.read())
                count += 1
    return count


def run(ws: Workspace, quick: bool = False) -> list[Result]:
    sessions = 300 if quick else 100_000
    runs = 5
    target = f">= {LIMIT:g}"
    read = Result("P4", f"read + orjson-parse {sessions:,} JSON files (in-process)", "s")
    migrate = Result(
        "P4",
        f"storage migrate json -> sqlite, {sessions:,} sessions",
        "s",
        ratio_label="read/migrate",
        target=target,
    )
    try:
        source = ws.dataset(
            f"seed-json-{sessions}x{MESSAGES}", lambda d: build_seed_json(d, sessions, MESSAGES)
        )
        env = ws.env(FOLIKO_HOME=str(ws.fresh("p4-home")))
        if read_and_parse(source) != sessions:
            raise AssertionError(f"expected {sessions} files in {source}")

        def migrate_once(destination: Path) -> None:
            command = foliko(
                "storage",
                "migrate",
                "--json",
                storage_url("json", source),
                storage_url("sqlite", destination),
            )
            report = orjson.loads(run_process(command, env, capture=True).stdout)
            if report["copied"] != sessions or report["failed"]:
                raise AssertionError(f"migration copied {report['copied']} of {sessions}")

        log(f"P4: {runs} runs each of read+parse and migrate, {sessions:,} sessions")
        for i in range(runs):
            destination = ws.fresh("p4-dst") / "dst.db"
            settle()
            read.runs.append(timed(lambda: read_and_parse(source)))
            migrate.runs.append(timed(lambda destination=destination: migrate_once(destination)))
            log(f"  run {i + 1}: read {read.runs[-1]:.2f} s, migrate {migrate.runs[-1]:.2f} s")
            shutil.rmtree(destination.parent)  # keep the disk footprint to one database
    except Exception as exc:
        return [read, failed("P4", migrate.figure, "s", target, exc)]
    migrate.ratio = statistics.median(read.runs) / statistics.median(migrate.runs)
    migrate.met = migrate.ratio >= LIMIT
    return [read, migrate]


if __name__ == "__main__":
    main_single(run, __doc__)
