"""The agent layer: an agent's own tools, skills and system prompt."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from foliko_cli.tools import Tool


class AgentContext:
    """Tools registered here override global tools of the same name."""

    def __init__(self, agent_id: str, agent: Any = None, *, system_prompt: str | None = None):
        self.agent_id = agent_id
        self.agent = agent
        self.tools: dict[str, Tool] = {}
        self.skills: list[Any] = []
        self.system_prompt = system_prompt
        self.custom_data: dict[str, Any] = {}

    def register_tool(self, tool: Tool) -> None:
        self.tools[tool.name] = tool

    def get_tool(self, name: str) -> Tool | None:
        return self.tools.get(name)

    def all_tools(self) -> list[Tool]:
        return list(self.tools.values())
