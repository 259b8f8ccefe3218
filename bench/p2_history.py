"""P2: the cost of one turn as the stored history grows (10, 1,000, 10,000 messages).

In-process, through ``foliko_cli.service.facade.Foliko`` with the echo model, on the
SQLite and JSON backends. Two kinds of turn, timed on several sessions that
each hold N stored messages:

- warm: a long-lived facade that has already loaded the session (a library
  or server process); the turn checks the stored revision, runs, appends.
  Three timed turns per session.
- cold: a new facade per turn, as every ``foliko chat`` process does (less
  interpreter start-up): open the backend, load what the turn sends (the
  messages after the compression summary), run, append, close.

- vars: ``sessions vars ID set K V`` as a new facade does it (an append of
  no messages with the revision read, which never reads the history).

Target (SQLite, every kind): cost@10000 <= 1.5x cost@10.

Every session has had one untimed turn first (which, on a long session, does
the one-off compression of its history), so the figures are steady-state.
"""

from __future__ import annotations

import statistics

from common import (
    Result,
    Workspace,
    failed,
    log,
    main_single,
    make_record,
    save_records,
    settle,
    storage_url,
    timed,
)

LIMIT = 1.5
WARM_ROUNDS = 3  # timed warm turns per session: at N, N + 2 and N + 4 stored messages
BACKENDS = ("sqlite", "json")


def seed(ws: Workspace, backend: str, size: int, count: int) -> tuple[str, list[str], list[str]]:
    """``count`` sessions for cold turns and ``count`` for warm ones, each with ``size - 2``
    messages: an untimed first turn brings them to ``size`` (and does the one-off
    compression a long session needs); returns the url and the two lists of ids."""

    def build(directory):
        path = directory / ("sessions.db" if backend == "sqlite" else "sessions")
        url = storage_url(backend, path)
        cold = [f"cold-{i}" for i in range(count)]
        warm = [f"warm-{i}" for i in range(count)]
        records = [make_record(sid, max(size - 2, 0), i) for i, sid in enumerate(cold + warm)]
        save_records(url, directory, records, batch=count)
        return url, cold, warm

    return ws.dataset(f"p2-{backend}-{size}x{count}", build)


def measure(ws: Workspace, backend: str, size: int, count: int) -> dict[str, list[float]]:
    from foliko_cli.service.facade import Foliko

    url, cold_ids, warm_ids = seed(ws, backend, size, count)
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

        cold.append(timed(cold_turn))
    variables = []
    for i, sid in enumerate(cold_ids):

        def set_variable(sid=sid, i=i):
            with Foliko(url, "echo", home=home) as facade:
                facade.update_variables(sid, {"k": i})

        variables.append(timed(set_variable))
    warm = []
    with Foliko(url, "echo", home=home) as facade:
        for sid in warm_ids:
            facade.chat(sid, "first turn, untimed: loads the history")
        for _ in range(WARM_ROUNDS):
            for sid in warm_ids:
                warm.append(timed(lambda sid=sid: facade.chat(sid, "hi")))
        for sid in (cold_ids[0], warm_ids[0]):
            stored = len(facade.get_session(sid).messages)
            expected = size + 2 if sid in cold_ids else size + 2 * WARM_ROUNDS
            if stored != expected:
                raise AssertionError(f"{backend} {sid}: {stored} messages, expected {expected}")
        if facade.get_variables(cold_ids[-1]).get("k") != len(cold_ids) - 1:
            raise AssertionError(f"{backend}: the variable was not stored")
    return {"warm": warm, "cold": cold, "vars": variables}


def run(ws: Workspace, quick: bool = False) -> list[Result]:
    sizes = (10, 50, 200) if quick else (10, 1000, 10000)
    count = 3 if quick else 11
    results = []
    for backend in BACKENDS:
        rows: dict[str, list[Result]] = {"warm": [], "cold": [], "vars": []}
        for size in sizes:
            for kind in rows:
                target = f"<= {LIMIT:g}x @{sizes[0]}" if backend == "sqlite" else ""
                what = "vars set, new facade" if kind == "vars" else f"turn, {kind} facade"
                rows[kind].append(
                    Result(
                        "P2",
                        f"{backend} {what}, {size:,} stored",
                        "s",
                        ratio_label=f"of @{sizes[0]}",
                        target=target if size == sizes[-1] else "",
                    )
                )
        try:
            for i, size in enumerate(sizes):
                log(f"P2: {backend}, {size:,} stored messages, {count} sessions")
                for kind, runs in measure(ws, backend, size, count).items():
                    rows[kind][i].runs = runs
        except Exception as exc:
            results.append(failed("P2", f"{backend} turn", "s", rows["warm"][-1].target, exc))
            continue
        for kind_rows in rows.values():
            base = statistics.median(kind_rows[0].runs)
            for row in kind_rows[1:]:
                row.ratio = row.median / base
                if row.target:
                    row.met = row.ratio <= LIMIT
            results += kind_rows
    return results


if __name__ == "__main__":
    main_single(run, __doc__)
