"""P4: `foliko storage migrate json:////src sqlite:////dst.db` against merely reading the files.

100,000 seed-format JSON session files (4 messages each). The baseline reads
and orjson-parses every file in this Python process; the migration runs as a
real process into a fresh database each time and must report every session
copied. Target: read time / migrate time >= 0.5 (at least half the speed).

Both are also measured by CPU time (this process's for the reading, the
child's for the migration), which other work on the machine does not inflate
as it does the wall time: the second pair of rows.

The last row is SQLite's own floor: the time SQLite alone takes to store
what the migration stores (every session row and message row inserted in one
transaction, then the search index completed by foliko's own statements),
with the rows built before the clock starts, so no reading, converting or
verifying counts. Read time / that time is the best ratio any migration into
this layout could reach on this machine.
"""

from __future__ import annotations

import os
import resource
import shutil
import sqlite3
import statistics
import time
from pathlib import Path
from typing import Any

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
    read_cpu = Result("P4", "read + orjson-parse, CPU", "s")
    migrate_cpu = Result("P4", "storage migrate, CPU", "s", ratio_label="read/migrate")
    floor = Result(
        "P4", "SQLite alone: the rows and the search index (floor)", "s", ratio_label="read/floor"
    )
    try:
        source = ws.dataset(
            f"seed-json-{sessions}x{MESSAGES}", lambda d: build_seed_json(d, sessions, MESSAGES)
        )
        env = ws.env(FOLIKO_HOME=str(ws.fresh("p4-home")))
        if read_and_parse(source) != sessions:
            raise AssertionError(f"expected {sessions} files in {source}")
        rows = stored_rows(source)

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
            started = time.process_time()
            read.runs.append(timed(lambda: read_and_parse(source)))
            read_cpu.runs.append(time.process_time() - started)
            before = children_cpu()
            migrate.runs.append(timed(lambda destination=destination: migrate_once(destination)))
            migrate_cpu.runs.append(children_cpu() - before)
            shutil.rmtree(destination.parent)  # keep the disk footprint to one database
            destination = ws.fresh("p4-dst") / "dst.db"
            run_process(foliko("storage", "init", storage_url("sqlite", destination)), env)
            floor.runs.append(sqlite_floor(destination, rows))
            log(
                f"  run {i + 1}: read {read.runs[-1]:.2f} s, migrate {migrate.runs[-1]:.2f} s,"
                f" SQLite floor {floor.runs[-1]:.2f} s"
            )
            shutil.rmtree(destination.parent)
    except Exception as exc:
        return [read, failed("P4", migrate.figure, "s", target, exc)]
    migrate.ratio = statistics.median(read.runs) / statistics.median(migrate.runs)
    migrate.met = migrate.ratio >= LIMIT
    migrate_cpu.ratio = statistics.median(read_cpu.runs) / statistics.median(migrate_cpu.runs)
    floor.ratio = statistics.median(read.runs) / statistics.median(floor.runs)
    return [read, migrate, read_cpu, migrate_cpu, floor]


Rows = tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]


def stored_rows(directory: Path) -> Rows:
    """The ``sessions`` and ``messages`` rows of the seed files, shaped as
    foliko stores them (a message's body is its JSON with snake_case keys)."""
    sessions, messages = [], []
    for path in sorted(directory.glob("*.json")):
        document = orjson.loads(path.read_bytes())
        sid, created = document["sessionId"], document["metadata"]["createdAt"]
        body = document["messages"]
        for seq, message in enumerate(body):
            text = orjson.dumps(
                {
                    "role": message["role"],
                    "content": message["content"],
                    "created_at": message["createdAt"],
                }
            ).decode()
            messages.append((sid, seq, message["role"], message["createdAt"], text))
        metadata = orjson.dumps({"created_at": created, "message_count": len(body)}).decode()
        variables = orjson.dumps(document["variables"]).decode()
        row = (sid, created, document["savedAt"], len(body), 1, body[0]["content"][:80])
        sessions.append((*row, variables, metadata, "{}"))
    return sessions, messages


def sqlite_floor(database: Path, rows: Rows) -> float:
    """Seconds to insert ``rows`` into the empty store ``database`` in one
    transaction and then complete its search index as a migration does."""
    from foliko_cli.storage import sqlite_search

    sessions, messages = rows
    db = sqlite3.connect(database, isolation_level=None)
    try:
        db.execute("PRAGMA synchronous = NORMAL")  # as foliko's connections have it
        started = time.perf_counter()
        db.execute("BEGIN IMMEDIATE")
        db.executemany("INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", sessions)
        db.executemany(
            "INSERT INTO messages (session_id, seq, role, created_at, body) VALUES (?, ?, ?, ?, ?)",
            messages,
        )
        sqlite_search.mark_pending(db)
        db.execute("COMMIT")
        db.execute("BEGIN IMMEDIATE")
        sqlite_search.complete_pending(db)
        db.execute("COMMIT")
        return time.perf_counter() - started
    finally:
        db.close()


def children_cpu() -> float:
    """User and system CPU time of this process's finished children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main_single(run, __doc__)
