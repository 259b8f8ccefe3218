"""An MCP server (the ``mcp`` package's MCPServer, over stdio) for what a server
asks of foliko and its user: tools with and without the read-only annotation,
elicitations, a helper process it starts, a tool list that changes, and two
tools whose names collide under another server's name.

Elicitations go through ``Resolve``/``Elicit``, so they work on every protocol
version the SDK negotiates (a mid-call request up to 2025-11-25, an
InputRequiredResult on 2026-07-28).
"""

from __future__ import annotations

import subprocess
import sys
from typing import Annotated, Literal

from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

server = MCPServer("foliko-asking-test")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def look() -> str:
    """Look around (changes nothing)."""
    return "looked"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
def note(text: str) -> str:
    """Write a note (a change)."""
    return f"noted {text}"


class Paint(BaseModel):
    """Every field has a default: elicitation = "defaults" accepts this."""

    colour: Literal["red", "green", "blue"] = Field(default="green", description="the paint")
    coats: int = Field(default=2, description="how many coats")


class Order(BaseModel):
    """``count`` has no default: elicitation = "defaults" declines this."""

    count: int = Field(description="how many to order", ge=1)
    size: Literal["small", "large"] = "small"
    gift: bool = False
    email: str = Field(default="me@example.com", json_schema_extra={"format": "email"})


def _ask_paint() -> Elicit[Paint]:
    return Elicit("Which paint?", Paint)


def _ask_order() -> Elicit[Order]:
    return Elicit("What do you order?", Order)


def _outcome(result: ElicitationResult) -> str:
    if isinstance(result, AcceptedElicitation):
        return f"accept {result.data.model_dump_json()}"
    return result.action


@server.tool()
def paint(answer: Annotated[ElicitationResult[Paint], Resolve(_ask_paint)]) -> str:
    """Ask the user which paint to use."""
    return _outcome(answer)


@server.tool()
def order(answer: Annotated[ElicitationResult[Order], Resolve(_ask_order)]) -> str:
    """Ask the user what to order."""
    return _outcome(answer)


@server.tool()
def spawn() -> int:
    """Start a helper process that outlives the call; its pid."""
    helper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return helper.pid


@server.tool()
async def grow(ctx: Context) -> str:
    """Add the tool ``grown`` and say that the tool list changed."""
    server.add_tool(lambda: "grown here", name="grown", description="A tool added later.")
    await ctx.notify_tools_changed()  # 2026-07-28: to subscriptions/listen streams
    await ctx.request_context.session.send_tool_list_changed()  # earlier versions
    return "grew"


@server.tool()
def text(value: str) -> str:
    """Return ``value``."""
    return value


@server.tool()
def fail(why: str) -> str:
    """Fail, saying ``why``."""
    raise ValueError(why)


@server.tool(name="echo__text")
def echo_text(value: str) -> str:
    """Return ``value`` twice."""
    return value * 2


if __name__ == "__main__":
    server.run()
