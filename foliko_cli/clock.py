"""Time and identifiers shared by every layer."""

import os
import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def new_request_id() -> str:
    return os.urandom(8).hex()


def new_trace_id() -> str:
    """A W3C trace-context trace id: 32 lowercase hex digits."""
    return os.urandom(16).hex()


def new_tool_call_id() -> str:
    return "call_" + os.urandom(6).hex()
