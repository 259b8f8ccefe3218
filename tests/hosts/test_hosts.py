"""The multi-host harness, small: three ``foliko serve`` hosts in network
namespaces on one PostgreSQL, then on one Redis, each reached over the
namespaces' bridge, under every fault kind once (harness.py; ``make
test-hosts`` is the full run). Needs root, ``ip`` and ``nft``, PostgreSQL's
initdb and redis-server: it skips saying which is missing, except under
FOLIKO_REQUIRE_SERVICES=1."""

from __future__ import annotations

import os

import pytest

from .harness import QUICK, Plan, problem, run, show

pytestmark = [pytest.mark.slow, pytest.mark.services]


@pytest.mark.parametrize("backend", ["postgres", "redis"])
def test_three_hosts_under_faults_lose_and_mix_no_acknowledged_turn(backend, capsys):
    if os.environ.get("FOLIKO_TEST_SERVICES") == "0":
        pytest.skip("service tests are off (FOLIKO_TEST_SERVICES=0, as in make test-fast)")
    why = problem(backend)
    if why is not None:
        if os.environ.get("FOLIKO_REQUIRE_SERVICES") == "1":
            pytest.fail(f"the multi-host harness cannot run: {why} (FOLIKO_REQUIRE_SERVICES=1)")
        pytest.skip(f"the multi-host harness cannot run: {why}")
    figures = run(Plan(backend, **QUICK), log=lambda line: None)
    shown = show(figures)
    with capsys.disabled():
        print("\n" + shown)
    assert not figures["leftovers"], shown
    assert not figures["failed"], shown
    counts = figures["counts"]
    assert counts.get("turns_acked", 0) >= QUICK["turns"] // 2, shown
    # some answered turns were checked in the store (not all lost in a Redis restart)
    assert counts["turns_acked"] > counts.get("lost_expected", 0), shown
    assert all(figures["faults"][kind] >= 1 for kind in figures["faults"]), shown
