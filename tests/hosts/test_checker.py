"""The multi-host checker finds each kind of damage it is there to find (and
none in a sound run): a checker that cannot fail proves nothing."""

from __future__ import annotations

import pytest

from .checker import check
from .faults import Fault
from .workload import Turn

NONCE = "n1"


def chain(outcomes: list[str], mode: str = "conversation", session: str = "conv_1") -> list[Turn]:
    """Turns of one chain, each acknowledged one answered over the history so far."""
    turns, history = [], []
    for index, outcome in enumerate(outcomes):
        tag = f"{NONCE}:t{index}"
        turn = Turn(0, mode, NONCE, index, tag, "plain", 0, float(index), float(index) + 0.5)
        turn.outcome, turn.session, turn.chain_started = outcome, session, 0.0
        if outcome == "acked":
            turn.reply = f"{tag} | {' '.join(history)}"
            history.append(tag)
        turns.append(turn)
    return turns


def problems(turns, stored, faults=(), backend="postgres") -> dict[str, int]:
    report = check(turns, stored, list(faults), backend, lock_bound_s=10)
    kinds = ("lost", "duplicated", "mixed", "reordered", "phantom", "stuck", "locked")
    return {kind: report.counts[kind] for kind in kinds if report.counts[kind]}


def test_a_sound_run_has_no_problem():
    turns = chain(["acked", "unknown", "acked", "cancelled"])
    stored = {"conv_1": ["n1:t0", "n1:t2"]}
    assert problems(turns, stored) == {}


def test_an_unknown_turn_may_be_stored_once():
    turns = chain(["acked", "unknown", "acked"])
    turns[2].reply = "n1:t2 | n1:t0 n1:t1"
    assert problems(turns, {"conv_1": ["n1:t0", "n1:t1", "n1:t2"]}) == {}
    assert problems(turns, {"conv_1": ["n1:t0", "n1:t1", "n1:t1", "n1:t2"]}) == {"duplicated": 1}


@pytest.mark.parametrize(
    ("stored", "found"),
    [
        (["n1:t0"], {"lost": 1}),
        (["n1:t0", "n1:t1", "n1:t1"], {"duplicated": 1}),
        (["n1:t1", "n1:t0"], {"reordered": 2}),
        (["n1:t0", "zz:t0", "n1:t1"], {"mixed": 1}),
        (["n1:t0", "n1:t1", "n1:t2"], {"phantom": 1}),
    ],
)
def test_the_store_is_checked_against_the_acknowledged_turns(stored, found):
    turns = chain(["acked", "acked", "failed"])
    assert problems(turns, {"conv_1": stored}) == found


def test_a_reply_over_another_sessions_history_is_mixed():
    turns = chain(["acked", "acked"])
    turns[1].reply = "n1:t1 | other:t0"
    assert problems(turns, {"conv_1": ["n1:t0", "n1:t1"]}) == {"mixed": 1, "lost": 1}


def test_a_reply_to_another_input_is_mixed():
    turns = chain(["acked"])
    turns[0].reply = "n1:t7 | "
    assert problems(turns, {"conv_1": ["n1:t0"]}) == {"mixed": 1}


def test_a_previous_response_chain_runs_on_exactly_its_acknowledged_turns():
    turns = chain(["acked", "unknown", "acked"], mode="previous")
    turns[2].reply = "n1:t2 | n1:t0 n1:t1"
    assert problems(turns, {"conv_1": ["n1:t0", "n1:t2"]}) == {"phantom": 1}


def test_a_missing_session_is_lost_unless_redis_restarted_after_the_chain_began():
    turns = chain(["acked", "acked", "gone"])
    assert problems(turns, {"conv_1": None}) == {"lost": 2}
    wiped = [Fault("restart", None, started=0.5)]
    assert problems(turns, {"conv_1": None}, wiped, backend="redis") == {}
    report = check(turns, {"conv_1": None}, wiped, "redis", lock_bound_s=10)
    assert report.counts["lost_expected"] == 2
    assert problems(turns, {"conv_1": None}, wiped, backend="postgres") == {"lost": 2}


def test_a_background_response_stuck_in_progress_fails_the_run():
    turns = chain(["acked", "stuck"])
    assert problems(turns, {"conv_1": ["n1:t0"]}) == {"stuck": 1}


def test_a_chain_that_waits_past_the_lease_after_a_kill_is_locked():
    turns = chain(["unknown", "acked"])
    kill = Fault("kill", 0, started=0.2, chains=[0])
    turns[1].started, turns[1].ended = 0.3, 11.0
    assert problems(turns, {"conv_1": ["n1:t1"]}, [kill]) == {"locked": 1}
    turns[1].ended = 3.0
    assert problems(turns, {"conv_1": ["n1:t1"]}, [kill]) == {}


def test_turns_answered_before_a_redis_restart_may_be_gone_after_it():
    """t2 was in flight as Redis restarted: it started the conversation again,
    without t0 and t1 (the documented loss); t3 then follows t2."""
    turns = chain(["acked", "acked", "acked", "acked"])
    turns[2].reply, turns[3].reply = "n1:t2 | ", "n1:t3 | n1:t2"
    restart = Fault("restart", None, started=1.6, ended=1.7)
    stored = {"conv_1": ["n1:t2", "n1:t3"]}
    assert problems(turns, stored, [restart], backend="redis") == {}
    report = check(turns, stored, [restart], "redis", lock_bound_s=10)
    assert report.counts["lost_expected"] == 2
    assert problems(turns, stored, [restart], backend="postgres") == {"lost": 6}


def test_a_previous_response_turn_in_flight_through_a_redis_restart_may_keep_the_history():
    """t2 read t0 and t1 before Redis restarted, then forked them into a new
    conversation with itself: its reply shows them, and that is no phantom."""
    turns = chain(["acked", "acked", "acked"], mode="previous")
    restart = Fault("restart", None, started=1.6, ended=1.7)
    stored = {"conv_1": ["n1:t0", "n1:t1", "n1:t2"]}
    assert problems(turns, stored, [restart], backend="redis") == {}
