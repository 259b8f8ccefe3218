"""`bench/run.py --quick`: every benchmark runs end to end at tiny sizes.

Only that they run and report is checked here; the figures themselves are
for `make bench`, never asserted in tests. STALL needs PostgreSQL or Redis.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
from storage.services import postgres_problem, postgres_url, redis_problem, redis_url

BENCH = Path(__file__).resolve().parents[1] / "bench" / "run.py"


def test_every_benchmark_runs_at_tiny_sizes_and_reports(tmp_path):
    output = tmp_path / "results.json"
    result = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--output", str(output)],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "FOLIKO_HOME": str(tmp_path / "home")},
        timeout=300,
    )
    assert result.returncode in (0, 1), result.stderr.decode()  # 1: a target not met
    assert b"Traceback" not in result.stderr
    report = orjson.loads(output.read_bytes())
    assert report["quick"] is True
    expected = {f"P{n}" for n in range(1, 9)} | {"PAGE", "SEARCH", "VS", "AUDIT", "ITEMS"}
    if postgres_problem(postgres_url()) is None or redis_problem(redis_url()) is None:
        expected.add("STALL")
    assert {r["bench"] for r in report["results"]} == expected
    for figure in report["results"]:
        assert figure["runs"], figure["figure"]
        if figure["unit"] in ("s", "turns/s"):  # a count or a difference may be 0
            assert all(t > 0 for t in figure["runs"]), figure["figure"]
