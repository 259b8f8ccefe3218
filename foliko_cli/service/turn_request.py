"""``TurnRequest``, the engine's turn value, for the doors (the CLI, foliko
serve, the MCP server), which speak to the service only."""

from typing import TYPE_CHECKING

from foliko_cli.engine.turn import TurnRequest, TurnResult

if TYPE_CHECKING:
    from foliko_cli.engine.turn import TurnParams as TurnParams

__all__ = ["TurnRequest", "TurnResult"]
