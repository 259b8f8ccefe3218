"""An MCP server (the ``mcp`` package's MCPServer, over stdio) that publishes
resources (text, a PNG image, a PDF blob, a template), prompts with arguments,
tools whose results carry structured content, resource links, embedded
resources and images, and a tool that reports progress and sends log messages.

``python resources_server.py bare`` serves tools only (no resources, no prompts).
"""

from __future__ import annotations

import base64
import sys
import time

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.prompts.base import AssistantMessage, UserMessage
from mcp.server.mcpserver.utilities.types import Image
from mcp_types import (
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

TINY_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000100e221bc330000000049454e44ae426082"
)
NOTES = "# Notes\n\nThe answer is 42.\n"

server = MCPServer("foliko-resources-test")


@server.tool()
def ping() -> str:
    """Answer pong."""
    return "pong"


if sys.argv[1:] != ["bare"]:

    @server.resource("file:///notes.md", name="notes", mime_type="text/markdown")
    def notes() -> str:
        """The project's notes."""
        return NOTES

    @server.resource("file:///dot.png", name="dot", mime_type="image/png")
    def dot() -> bytes:
        """A one-pixel image."""
        return TINY_PNG

    @server.resource("file:///report.pdf", name="report", mime_type="application/pdf")
    def report() -> bytes:
        """A PDF (foliko cannot attach it)."""
        return b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n"

    @server.resource("file:///slow.txt", name="slow", mime_type="text/plain")
    def slow() -> str:
        """Takes half a minute."""
        time.sleep(30)
        return "late"

    @server.resource("greeting://{name}", name="greeting", mime_type="text/plain")
    def greeting(name: str) -> str:
        """A greeting for NAME."""
        return f"Hello, {name}!"

    @server.prompt()
    def review(path: str, style: str = "brief") -> str:
        """Review a file."""
        return f"Review {path} in a {style} style."

    @server.prompt()
    def dialogue(topic: str) -> list:
        """A few turns about TOPIC, ending with the user's question and a picture."""
        return [
            UserMessage(f"Let us talk about {topic}."),
            AssistantMessage("Gladly. What would you like to know?"),
            UserMessage(
                EmbeddedResource(
                    type="resource",
                    resource=TextResourceContents(
                        uri="file:///notes.md", mime_type="text/markdown", text=NOTES
                    ),
                )
            ),
            UserMessage(Image(data=TINY_PNG, format="png")),
            UserMessage("What is the answer?"),
        ]

    @server.prompt()
    def leading() -> list:
        """Ends with the assistant's message."""
        return [UserMessage("Start."), AssistantMessage("I will begin with")]


@server.tool()
def weather(city: str) -> CallToolResult:
    """Prose next to structured content, a resource link, an embedded resource, an image."""
    return CallToolResult(
        content=[
            TextContent(type="text", text=f"It is sunny in {city}."),
            ResourceLink(
                type="resource_link",
                name="forecast",
                uri=f"weather://{city}/forecast",
                mime_type="application/json",
                description="the week ahead",
            ),
            EmbeddedResource(
                type="resource",
                resource=TextResourceContents(uri="file:///notes.md", text=NOTES),
            ),
            ImageContent(
                type="image", data=base64.b64encode(TINY_PNG).decode(), mime_type="image/png"
            ),
        ],
        structured_content={"city": city, "celsius": 21, "sky": "sunny"},
    )


@server.tool()
async def work(steps: int, ctx: Context) -> str:
    """Report progress for each step and log as it goes."""
    await ctx.debug("starting the work")
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step}")
    await ctx.info({"steps": steps}, logger_name="worker")
    await ctx.warning("the work is done")
    await ctx.error("nothing went wrong, really")
    return f"worked {steps} steps"


if __name__ == "__main__":
    server.run()
