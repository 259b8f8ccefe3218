"""Run every benchmark (SPEC §7, P1–P5; P6–P8, STALL, ITEMS: foliko serve; PAGE its web
app; VS: beside llm),
print one table, save the raw results.

    .venv/bin/python bench/run.py            # full sizes (make bench)
    .venv/bin/python bench/run.py --quick    # tiny sizes: a smoke run
    .venv/bin/python bench/run.py --only P1,P3

The table shows, per figure, the median of its runs, the ratio its target is
about, the target and whether it is met. Raw timings go to
bench/results/latest.json. Exits 1 when a target is not met.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import audit_cost
import items
import p1_startup
import p2_history
import p3_list
import p4_migrate
import p5_concurrency
import p6_serve
import p7_overhead
import p8_users
import page
import search
import stall
import vs_llm
from common import Workspace, format_details, format_table, log, settle, write_json

BENCHMARKS = {
    "P1": p1_startup.run,
    "P2": p2_history.run,
    "P3": p3_list.run,
    "P4": p4_migrate.run,
    "P5": p5_concurrency.run,
    "P6": p6_serve.run,
    "P7": p7_overhead.run,
    "P8": p8_users.run,
    "PAGE": page.run,
    "SEARCH": search.run,
    "STALL": stall.run,
    "VS": vs_llm.run,
    "AUDIT": audit_cost.run,
    "ITEMS": items.run,
}
RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--only", help="comma-separated benchmarks, e.g. P1,P3")
    parser.add_argument("--keep", type=Path, help="build the data in DIR and keep it")
    parser.add_argument("--output", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args()
    chosen = [name.strip().upper() for name in args.only.split(",")] if args.only else BENCHMARKS
    unknown = [name for name in chosen if name not in BENCHMARKS]
    if unknown:
        parser.error(
            f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}"
        )
    workspace = Workspace(args.keep)
    log(f"data in {workspace.root}")
    load = os.getloadavg()[0]
    if load > 0.5:
        log(f"load average {load:.2f}: other work is running, timings will be noisy")
    results = []
    started = time.perf_counter()
    try:
        for name in chosen:
            settle()
            begun = time.perf_counter()
            results += BENCHMARKS[name](workspace, args.quick)
            log(f"{name} done in {time.perf_counter() - begun:.0f} s")
    finally:
        workspace.close()
    log(f"all done in {time.perf_counter() - started:.0f} s")
    write_json(results, args.output, quick=args.quick, loadavg_at_start=load)
    details = format_details(results)
    if details:
        print(details)
    print(format_table(results))
    print(f"\nraw results: {args.output}")
    sys.exit(0 if all(r.met is not False for r in results) else 1)


if __name__ == "__main__":
    main()
