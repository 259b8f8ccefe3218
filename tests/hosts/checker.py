"""The checker: every client's outcomes against the replies and the store.

For each chain of turns (workload.py), with A the turns the client was given
a completed response for (acknowledged), U those whose outcome it could not
know, and X the background responses that said failed or cancelled:

- every reply is its own input followed by a history in which every tag has
  the chain's nonce (else *mixed*: another session's history), each at most
  once and in order (else *duplicated*), every acknowledged earlier turn is
  present (else *lost*) and every other one is in U (else *phantom*: a
  failed or cancelled turn was kept); a ``previous_response_id`` chain's
  history is exactly its acknowledged turns;
- the stored session (a conversation's, or the session of a
  ``previous_response_id`` chain's last acknowledged response) holds every
  turn of A exactly once and in order, nothing of X, nothing of another
  chain, and of U each at most once;
- no background response was still queued or in progress at its deadline
  (*stuck*), and no stream of one skipped or repeated an event (*broken*);
- after a host was killed, its chains took a turn again within the stated
  lease (else *locked*).

Under Redis without persistence, a restart loses every key: the acknowledged
turns of chains that began before a restart, missing afterwards, are counted
as *lost_expected* (the documented loss), not as lost.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from .faults import Fault
from .workload import Turn

PROBLEMS = ("lost", "duplicated", "mixed", "reordered", "phantom", "stuck", "broken", "locked")


class Report:
    def __init__(self) -> None:
        self.counts: dict[str, int] = defaultdict(int)
        self.examples: dict[str, list[str]] = defaultdict(list)

    def bad(self, kind: str, example: str) -> None:
        self.counts[kind] += 1
        if len(self.examples[kind]) < 5:
            self.examples[kind].append(example)

    @property
    def failed(self) -> bool:
        return any(self.counts[kind] for kind in PROBLEMS)


def _tags(text: str) -> tuple[str, list[str]]:
    head, _, history = text.partition(" | ")
    return head, history.split()


def _index(tag: str) -> int:
    return int(tag.rsplit(":t", 1)[1])


def check(
    turns: list[Turn],
    stored: dict[str, list[str] | None],
    faults: list[Fault],
    backend: str,
    lock_bound_s: float,
) -> Report:
    """``stored``: the user messages of each session the chains name (None:
    no such session)."""
    report = Report()
    for turn in turns:
        report.counts[f"turns_{turn.outcome}"] += 1
        if turn.outcome == "stuck":
            report.bad("stuck", f"{turn.tag} ({turn.kind}): {turn.detail}")
        if turn.outcome == "broken":
            report.bad("broken", f"{turn.tag} ({turn.kind}): {turn.detail}")
        if turn.detail.startswith("torn:"):
            report.counts["torn_streams"] += 1
            if len(report.examples["torn_streams"]) < 5:
                report.examples["torn_streams"].append(f"{turn.tag}: {turn.detail}")
    restarts = (
        [(f.started, f.ended) for f in faults if f.kind == "restart"] if backend == "redis" else []
    )
    chains: dict[int, list[Turn]] = defaultdict(list)
    for turn in turns:
        chains[turn.chain].append(turn)
    for chain in chains.values():
        chain.sort(key=lambda t: t.index)
        _check_chain(chain, stored, restarts, report)
    _check_locks(turns, faults, lock_bound_s, report)
    return report


def _check_chain(
    chain: list[Turn],
    stored: dict[str, list[str] | None],
    restarts: list[tuple[float, float]],
    report: Report,
) -> None:
    nonce, mode = chain[0].nonce, chain[0].mode
    # a restart of a store that keeps nothing, after the chain began, loses it;
    # a turn answered before a restart ended may be gone after it (a turn in
    # flight then may even start the conversation again, without them)
    wiped = any(at > chain[0].chain_started for at, _ in restarts)
    erased = {
        t.tag for t in chain if t.outcome == "acked" and any(t.ended <= end for _, end in restarts)
    }
    acked = [t for t in chain if t.outcome == "acked" and t.tag not in erased]
    maybe = {t.tag for t in chain if t.outcome in ("unknown", "stuck", "broken")} | erased
    for turn in chain:
        if turn.outcome == "gone" and not wiped:
            report.bad("lost", f"{turn.tag}: its session was not found ({turn.detail[:120]})")
    excluded = {t.tag for t in chain if t.outcome in ("failed", "cancelled")}
    for turn in acked:
        assert turn.reply is not None
        head, history = _tags(turn.reply)
        if head != turn.tag:
            report.bad("mixed", f"{turn.tag} was answered {head!r}")
        earlier = [t.tag for t in acked if t.index < turn.index]
        _compare(
            turn.tag, f"the reply to {turn.tag}", history, earlier, maybe, excluded, nonce, report
        )
        kept = [tag for tag in history if tag not in erased]  # (a turn in flight may keep them)
        if mode == "previous" and kept != earlier:
            report.bad(
                "reordered" if sorted(kept) == sorted(earlier) else "phantom",
                f"{turn.tag} ran on {history}, its previous responses were {earlier}",
            )
    if not acked and mode == "previous":
        report.counts["lost_expected"] += len(erased)
        return
    session = chain[0].session if mode == "conversation" else acked[-1].session
    if session is None:
        return  # a conversation that could not be created: no turn was sent
    messages = stored.get(session)
    expected = [t.tag for t in acked]
    report.counts["lost_expected"] += len(erased - set(messages or ()))
    if messages is None:
        if wiped:
            report.counts["lost_expected"] += len(expected)  # (erased ones counted above)
        elif expected:
            report.bad("lost", f"session {session} of {expected[:3]}... is not in the store")
        return
    _compare(session, f"session {session}", messages, expected, maybe, excluded, nonce, report)


def _compare(
    name: str,
    where: str,
    found: list[str],
    expected: list[str],
    maybe: set[str],
    excluded: set[str],
    nonce: str,
    report: Report,
) -> None:
    """``found`` (tags in order) holds each of ``expected`` exactly once and in
    order, and besides only tags of ``maybe``, each at most once."""
    ours = [tag for tag in found if tag.split(":", 1)[0] == nonce]
    for tag in found:
        if tag.split(":", 1)[0] != nonce:
            report.bad("mixed", f"{where} holds {tag!r}, of another session")
    counts: dict[str, int] = defaultdict(int)
    for tag in ours:
        counts[tag] += 1
    for tag, count in counts.items():
        if count > 1:
            report.bad("duplicated", f"{where} holds {tag} {count} times")
        if tag in excluded:
            report.bad("phantom", f"{where} holds {tag}, whose response said failed/cancelled")
        elif tag not in expected and tag not in maybe:
            report.bad("phantom", f"{where} holds {tag}, which was never sent or acknowledged")
    for tag in expected:
        if counts.get(tag, 0) == 0:
            report.bad("lost", f"{where} lacks acknowledged {tag}")
    present = [tag for tag in _unique(ours) if tag in expected]
    if present != [tag for tag in expected if tag in counts]:
        report.bad("reordered", f"{where} holds {present}, acknowledged in order {expected}")
    indexes = [_index(tag) for tag in _unique(ours)]
    if indexes != sorted(indexes):
        report.bad("reordered", f"{where} holds turns in the order {indexes}")


def _unique(tags: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for tag in tags:
        seen.setdefault(tag, None)
    return list(seen)


def _check_locks(turns: list[Turn], faults: list[Fault], bound_s: float, report: Report) -> None:
    """After a kill, each chain that had a turn open on the dead host takes a
    turn again within ``bound_s`` (measured up to the next fault), and none
    of its turns finds its session busy."""
    by_chain: dict[int, list[Turn]] = defaultdict(list)
    for turn in turns:
        by_chain[turn.chain].append(turn)
    worst = 0.0
    for fault in faults:
        if fault.kind != "kill":
            continue
        for chain in fault.chains:
            later = [t for t in by_chain[chain] if t.started >= fault.started]
            busy = [t for t in later if "session_busy" in t.detail]
            nxt = next((t for t in later if t.outcome == "acked"), None)
            if busy:
                report.bad("locked", f"chain {chain}: {busy[0].tag} found its session busy")
            following = [f.started for f in faults if f.started > fault.started]
            if nxt is None or (following and nxt.ended > min(following)):
                continue  # the next fault struck first: this wait is not the lock's alone
            waited = nxt.ended - fault.started
            worst = max(worst, waited)
            if waited > bound_s:
                report.bad("locked", f"chain {chain}: next turn {waited:.1f}s after the kill")
    report.counts["locked_worst_ms"] = int(worst * 1000)


def summary(report: Report) -> dict[str, Any]:
    return {"counts": dict(report.counts), "examples": dict(report.examples)}
