"""Plain functions used as foliko tools by the feature tests.

String annotations (``from __future__ import annotations``) on purpose: the
schema generator must resolve them.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

NOT_CALLABLE = 42


def get_variable(key: str) -> str:
    """The agent's own get_variable, not the built-in one.

    Args:
        key: the variable to read
    """
    return f"agent-override saw {key}"


def whoami(context: Any) -> dict[str, Any]:
    """Report the agent, session and request the tool runs under."""
    agent, session, request = context.agent, context.session, context.request
    return {
        "agent": agent.agent_id if agent is not None else None,
        "session": session.session_id if session is not None else None,
        "has_request": request is not None,
    }


def typed(
    text: str,
    count: int,
    ratio: float,
    flag: bool,
    tags: list[str],
    scores: dict[str, int],
    mode: Literal["fast", "slow"],
    limit: Optional[int] = None,  # noqa: UP045 (Optional on purpose)
    either: int | str = 3,
    label: str = "plain",
) -> dict[str, Any]:
    """Return every argument it was given.

    A second paragraph that is not part of the description.

    Args:
        text: the text to use
        count (int): how many times
    """
    return {
        "text": text,
        "count": count,
        "ratio": ratio,
        "flag": flag,
        "tags": tags,
        "scores": scores,
        "mode": mode,
        "limit": limit,
        "either": either,
        "label": label,
    }


def shout(text: str, times: int = 1) -> str:
    """Shout TEXT, TIMES times.

    :param text: what to shout
    """
    return (text.upper() + "!") * times


def fail_unless(text: str, ok: bool = True) -> dict[str, Any]:
    """Check TEXT; fail when OK is false."""
    if not ok:
        raise ValueError(f"refused {text!r}")
    return {"upper": text.upper(), "length": len(text)}


def interrupt_if(stop: bool) -> str:
    """Behave like Ctrl-C arriving while the tool runs when STOP is true."""
    if stop:
        raise KeyboardInterrupt
    return "went on"


async def double_later(n: int) -> int:
    """An async tool: double N."""
    return 2 * n


def undocumented(x):
    return x
