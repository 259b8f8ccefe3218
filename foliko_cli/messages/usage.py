"""Token and cost totals, summed from the assistant messages that carry them.

Each assistant message records the ``model`` that wrote it and that call's
``usage`` (``input_tokens``, ``output_tokens`` and whatever else the provider
counts, such as cached tokens); some also carry a ``cost``. Every numeric
usage key is summed, so counters a provider adds later are totalled too. A
session whose model changed midway is counted per message, never per session.

A reply whose turn first summarised the history carries that call's usage
as ``compression_usage`` (and its ``cost`` covers both): it is counted in
the totals and shown apart as ``compression_input_tokens`` and
``compression_output_tokens``. So is the summarising call of a compaction
asked for between turns (``sessions compact``), though it is not a reply:
its usage and cost are on its entry (among the ``compactions`` of the next
turn's reply, or of the compression state until that turn), counted under
its own model and time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from foliko_cli.messages.record import SessionRecord

GROUPINGS = ("session", "model", "day")
_FIRST_KEYS = ("input_tokens", "output_tokens")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def message_usage(message: dict[str, Any]) -> dict[str, int | float] | None:
    """The counters one assistant message carries, ``cost`` included; None if none."""
    if message.get("role") != "assistant":
        return None
    counters = _numbers(message.get("usage"))
    compression = _numbers(message.get("compression_usage"))
    for key in _FIRST_KEYS:
        if key in compression:
            counters[key] = counters.get(key, 0) + compression[key]
            counters[f"compression_{key}"] = compression[key]
    cost: Any = message.get("cost", counters.pop("cost", None))
    if _number(cost):
        counters["cost"] = cost
    return counters or None


def compaction_usage(entry: Any) -> dict[str, int | float] | None:
    """The counters of a compaction asked for (``trigger`` manual), as
    ``message_usage`` counts a reply's compression; None for any other (a
    turn's own compactions are counted on its reply)."""
    if not isinstance(entry, dict) or entry.get("trigger") != "manual":
        return None
    usage = _numbers(entry.get("usage"))
    counters: dict[str, int | float] = {}
    for key in _FIRST_KEYS:
        if key in usage:
            counters[key] = counters[f"compression_{key}"] = usage[key]
    if _number(entry.get("cost")):
        counters["cost"] = entry["cost"]
    return counters or None


def _entries(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _counted(
    messages: Iterable[dict[str, Any]], compression_state: dict[str, Any] | None = None
) -> Iterator[tuple[Any, Any, dict[str, int | float], int]]:
    """``(created_at, model, counters, replies)`` of each reply with counters and
    of each compaction asked for (``replies`` 0), the waiting ones last."""
    for message in messages:
        counters = message_usage(message)
        if counters is not None:
            yield message.get("created_at"), message.get("model"), counters, 1
        if message.get("role") == "assistant":
            yield from _compactions(message.get("compactions"))
    yield from _compactions((compression_state or {}).get("compactions"))


def _compactions(entries: Any) -> Iterator[tuple[Any, Any, dict[str, int | float], int]]:
    for entry in _entries(entries):
        counters = compaction_usage(entry)
        if counters is not None:
            yield entry.get("at"), entry.get("model"), counters, 0


def _numbers(usage: Any) -> dict[str, int | float]:
    return {k: v for k, v in usage.items() if _number(v)} if isinstance(usage, dict) else {}


def spent_tokens(usage: dict[str, Any] | None) -> tuple[int, int]:
    """A turn's input and output tokens (``TurnResult.usage``), its compression included."""
    usage = usage or {}
    compression = usage.get("compression") or {}
    spent = [0, 0]
    for index, key in enumerate(_FIRST_KEYS):
        for counters in (usage, compression):
            value = counters.get(key, 0)
            spent[index] += value if _number(value) else 0
    return spent[0], spent[1]


def add(totals: dict[str, Any], counters: dict[str, int | float], replies: int = 1) -> None:
    for key, value in counters.items():
        totals[key] = totals.get(key, 0) + value
    totals["replies"] = totals.get("replies", 0) + replies


def ordered(totals: dict[str, Any]) -> dict[str, Any]:
    """input/output tokens first, cost last, the rest by name (stable output)."""
    totals = {"input_tokens": 0, "output_tokens": 0, **totals}
    keys = [k for k in _FIRST_KEYS] + sorted(k for k in totals if k not in (*_FIRST_KEYS, "cost"))
    result = {key: totals[key] for key in keys}
    if "cost" in totals:
        result["cost"] = round(totals["cost"], 10)
    return result


def usage_totals(
    messages: Iterable[dict[str, Any]], compression_state: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One session's totals (``sessions show --json``), the compactions waiting
    in its ``compression_state`` included."""
    totals: dict[str, Any] = {"replies": 0}
    for _, _, counters, replies in _counted(messages, compression_state):
        add(totals, counters, replies)
    return ordered(totals)


def _day(ms: Any) -> str:
    if not _number(ms) or ms <= 0:
        return "unknown"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d")


def summarise(
    records: Iterable[SessionRecord], *, by: str = "session", since: int | None = None
) -> dict[str, Any]:
    """Totals per session, model or UTC day, plus the grand total, over the
    assistant messages written at or after ``since`` (ms)."""
    groups: dict[str, dict[str, Any]] = {}
    total: dict[str, Any] = {"replies": 0}
    for record in records:
        for created, model, counters, replies in _counted(
            record.messages, record.compression_state
        ):
            if since is not None and not (_number(created) and created >= since):
                continue
            if by == "session":
                key = record.session_id
            elif by == "model":
                key = str(model or "unknown")
            else:
                key = _day(created)
            add(groups.setdefault(key, {"replies": 0}), counters, replies)
            add(total, counters, replies)
    rows = [{by: key, **ordered(groups[key])} for key in sorted(groups)]
    return {"by": by, "rows": rows, "total": ordered(total)}


def with_usage(data: dict[str, Any], record: Any) -> dict[str, Any]:
    """A session's public JSON form (``record_to_dict``, perhaps cut to a tail)
    plus the token and cost totals of its whole history."""
    return {**data, "usage": usage_totals(record.messages, record.compression_state)}
