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

    def build_system_prompt(self) -> str | None:
        """The agent's prompt, its skills and its own tools, rebuilt for every turn."""
        parts = [self.system_prompt] if self.system_prompt else []
        if self.skills:
            from foliko_cli.skills import skills_prompt

            parts.append(skills_prompt(self.skills))
        own_tools = [t for t in self.tools.values() if t.name != "load_skill"]
        if own_tools:
            parts.append(
                "Your tools:\n" + "\n".join(f"- {t.name}: {t.description}" for t in own_tools)
            )
        return "\n\n".join(parts) or None
