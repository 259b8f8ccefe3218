"""Time and identifiers shared by every layer."""

import os
import re
import time

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def duration_ms(text: str) -> int | None:
    """``90s``, ``15m``, ``12h``, ``30d``, ``2w`` (or combined, ``1d12h``) in
    milliseconds; None for anything else."""
    text = text.strip().lower()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return int(sum(float(n) * _UNIT_MS[u] for n, u in parts))


def new_request_id() -> str:
    return os.urandom(8).hex()


def new_trace_id() -> str:
    """A W3C trace-context trace id: 32 lowercase hex digits."""
    return os.urandom(16).hex()


def new_tool_call_id() -> str:
    return "call_" + os.urandom(6).hex()
