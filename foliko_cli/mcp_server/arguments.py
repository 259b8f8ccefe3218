"""A tool call's arguments, checked one by one, and the failures of a call.

Each problem is a ``BadArgument`` of one line naming the argument and what
it takes: the tool answers it (like any ``ToolFailure``) as an error result
the model can act on, never as a protocol error.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar, cast

from foliko_cli.common.clock import since_ms

__all__ = ["SINCE_HELP", "Arguments", "BadArgument", "ToolFailure", "since_ms"]

_D = TypeVar("_D", int, None)


class ToolFailure(Exception):
    """A call that failed for a reason its message gives in one line."""


class BadArgument(ToolFailure):
    pass


SINCE_HELP = "a duration (7d, 12h, 30m) or an ISO 8601 time (2025-06-01T12:00:00Z)"


class Arguments:
    """The arguments of one call; an argument the tool does not take is refused."""

    def __init__(self, given: dict[str, Any] | None, known: Iterable[str]):
        self.given = dict(given or {})
        known = list(known)
        unknown = sorted(set(self.given) - set(known))
        if unknown:
            takes = ", ".join(known) or "no arguments"
            raise BadArgument(f"unknown argument {unknown[0]!r}; this tool takes {takes}")

    def text(self, name: str) -> str:
        """A required string that is not blank."""
        value = self.given.get(name)
        if value is None:
            raise BadArgument(f"{name} is required")
        if not isinstance(value, str) or not value.strip():
            raise BadArgument(f"{name} must be a non-empty string, not {_shown(value)}")
        return value

    def whole(self, name: str, default: _D, low: int, high: int | None = None) -> int | _D:
        """An integer in ``low..high`` (a float with no fraction counts), or ``default``."""
        value = self.given.get(name)
        if value is None:
            return default
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or value < low
            or (high is not None and value > high)
        ):
            span = f"from {low} to {high}" if high is not None else f"of {low} or more"
            raise BadArgument(f"{name} must be a whole number {span}, not {_shown(value)}")
        return value

    def choice(self, name: str, choices: Iterable[str]) -> str | None:
        value = self.given.get(name)
        if value is None:
            return None
        choices = list(choices)
        if value not in choices:
            raise BadArgument(f"{name} must be one of {', '.join(choices)}, not {_shown(value)}")
        return cast(str, value)

    def since(self, name: str = "since") -> int | None:
        value = self.given.get(name)
        if value is None:
            return None
        found = since_ms(value) if isinstance(value, str) else None
        if found is None:
            raise BadArgument(f"{name} must be {SINCE_HELP}, not {_shown(value)}")
        return found


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"
