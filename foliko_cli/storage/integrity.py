"""What every backend checks of a session it reads: that what is stored adds up.

A stored session is damaged, neither absent nor merely unparsable, when

* its messages' positions (``seq``) are not exactly 0, 1, ..., n - 1, where
  n is the count its session row or meta hash keeps (a row deleted from the
  middle, a count changed, a row beyond the end); a read of only the recent
  messages checks them from the compression point on;
* the number of messages stored is not the count kept beside them (Redis
  lists, JSON files, memory: there are no positions to check);
* its metadata is gone while its messages remain (a Redis meta hash evicted
  or deleted, a SQLite session row deleted by hand).

Each backend's reads call these and raise CorruptSessionError, as for a
record that cannot be parsed. So every read reports the damage, every write
(which reads first) refuses it, ``storage check`` finds it and a repair
moves it aside.
"""

from __future__ import annotations

from collections.abc import Sequence

from foliko_cli.errors import CorruptSessionError
from foliko_cli.messages.record import SessionSummary

SHOWN_RANGES = 3
SESSION_ROW = "row in the sessions table"
"""What a SQL session's metadata is, in a message."""


def check_sequence(
    session_id: str, where: str, seqs: Sequence[int], *, count: int, start: int = 0
) -> None:
    """``seqs``, the ascending distinct positions read from ``start`` on, must be
    ``start`` .. ``count - 1``; else CorruptSessionError saying which are not."""
    if len(seqs) == count - start and (not seqs or (seqs[0] == start and seqs[-1] == count - 1)):
        return
    raise CorruptSessionError(session_id, where, _sequence_damage(seqs, start, count))


def check_span(
    session_id: str,
    where: str,
    *,
    count: int,
    found: int,
    first: int | None,
    last: int | None,
    start: int = 0,
) -> None:
    """The same as ``check_sequence`` from an aggregate of the positions from
    ``start`` on (how many, the lowest, the highest): no row need be read."""
    if found == count - start and (not found or (first == start and last == count - 1)):
        return
    stored = _stored(found) + (f" from seq {start} on" if start else "")
    if found:
        stored += f" (seq {first}-{last})"
    raise CorruptSessionError(session_id, where, f"it counts {_messages(count)} but {stored}")


def check_count(session_id: str, where: str, *, count: object, found: int) -> None:
    """The count kept beside the messages must be how many there are."""
    if type(count) is int and count == found:
        return
    if type(count) is not int:
        reason = f"its metadata does not say how many messages it holds ({_stored(found)})"
    else:
        reason = f"it counts {_messages(count)} but {_stored(found)}"
    raise CorruptSessionError(session_id, where, reason)


def orphan_reason(found: int, metadata: str) -> str:
    """Why a session whose ``metadata`` is gone but ``found`` messages remain is damaged."""
    remain = "1 message remains" if found == 1 else f"{found} messages remain"
    return f"its {metadata} is gone but {remain}"


def orphaned(session_id: str, where: str, found: int, metadata: str) -> CorruptSessionError:
    return CorruptSessionError(session_id, where, orphan_reason(found, metadata))


def damaged_summary(session_id: str, reason: str) -> SessionSummary:
    """A ``sessions list`` row for a damaged session (marked, never left out)."""
    return SessionSummary(session_id, 0, 0, 0, "", error=reason)


def _sequence_damage(seqs: Sequence[int], start: int, count: int) -> str:
    gaps, expected = [], start
    for seq in seqs:
        if seq >= count:
            break
        if seq > expected:
            gaps.append((expected, seq - 1))
        expected = max(expected, seq + 1)
    if expected < count:
        gaps.append((expected, count - 1))
    beyond = [seq for seq in seqs if not start <= seq < count]
    parts = []
    if gaps:
        missing = sum(last - first + 1 for first, last in gaps)
        parts.append(f"seq {_ranges(gaps)} {'is' if missing == 1 else 'are'} missing")
    if beyond:
        runs = _runs(beyond)
        parts.append(
            f"seq {_ranges(runs)} {'is' if len(beyond) == 1 else 'are'} stored beyond them"
        )
    return f"it counts {_messages(count)} but {' and '.join(parts)}"


def _messages(count: int) -> str:
    return "1 message" if count == 1 else f"{count} messages"


def _stored(found: int) -> str:
    return "1 is stored" if found == 1 else f"{found} are stored"


def _runs(seqs: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for seq in seqs:
        if runs and seq == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], seq)
        else:
            runs.append((seq, seq))
    return runs


def _ranges(ranges: list[tuple[int, int]]) -> str:
    shown = [str(a) if a == b else f"{a}-{b}" for a, b in ranges[:SHOWN_RANGES]]
    return ", ".join(shown) + (", …" if len(ranges) > SHOWN_RANGES else "")
