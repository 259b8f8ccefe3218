"""Time and identifiers shared by every layer."""

import os
import re
import time

DEFAULT_TIMEOUT = 120.0
"""Seconds a request (one turn, one command) may take unless told otherwise (SPEC §2)."""

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def parse_duration(text: str) -> int:
    """``90s``, ``15m``, ``12h``, ``30d``, ``2w`` (or combined, ``1d12h``) in
    milliseconds; raises ValueError for anything else."""
    cleaned = text.strip().lower()
    parts = _DURATION.findall(cleaned)
    if not parts or "".join(n + u for n, u in parts) != cleaned:
        raise ValueError(f"{text!r} is not a duration; write e.g. 30d, 12h, 15m, 90s or 2w")
    return int(sum(float(n) * _UNIT_MS[u] for n, u in parts))


def format_duration(ms: int) -> str:
    """``ms`` in the largest unit that holds it whole (``30d``, ``12h``); ``0`` as ``0``."""
    if ms == 0:
        return "0"
    for unit in "dhms":
        if ms % _UNIT_MS[unit] == 0:
            return f"{ms // _UNIT_MS[unit]}{unit}"
    return f"{ms / 1000:g}s"


def new_request_id() -> str:
    return os.urandom(8).hex()


def new_trace_id() -> str:
    """A W3C trace-context trace id: 32 lowercase hex digits."""
    return os.urandom(16).hex()


def new_tool_call_id() -> str:
    return "call_" + os.urandom(6).hex()


def since_ms(text: str, *, now: int | None = None) -> int | None:
    """The ms time ``text`` names: that long ago, or that time (UTC unless it
    says otherwise); None when it is neither."""
    try:
        return (now_ms() if now is None else now) - parse_duration(text)
    except ValueError:
        pass
    import datetime

    try:
        moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)
