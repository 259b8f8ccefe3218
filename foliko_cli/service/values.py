"""The values the service's operations take and return, for the doors (the CLI,
foliko serve, the MCP server), which speak to the service only.

``TurnRequest`` and ``TurnResult`` load with this module; the others on first
use (PEP 562), so a door that imports this for a turn pays for nothing else.
"""

from typing import TYPE_CHECKING, Any

from foliko_cli.engine.turn import IF_BUSY, TurnRequest, TurnResult

if TYPE_CHECKING:
    from foliko_cli.context.request import RequestContext as RequestContext
    from foliko_cli.engine.stream import TurnEvents as TurnEvents
    from foliko_cli.engine.stream import TurnStream as TurnStream
    from foliko_cli.engine.turn import TurnParams as TurnParams
    from foliko_cli.models.base import TOOL_CHOICE_MODES as TOOL_CHOICE_MODES

__all__ = ["IF_BUSY", "TurnRequest", "TurnResult"]

_LAZY = {
    "RequestContext": "foliko_cli.context.request",
    "TurnEvents": "foliko_cli.engine.stream",
    "TurnStream": "foliko_cli.engine.stream",
    "TOOL_CHOICE_MODES": "foliko_cli.models.base",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
