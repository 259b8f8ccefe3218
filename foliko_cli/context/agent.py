"""The agent layer: an agent's own tools, skills and system prompt."""

from __future__ import annotations

from typing import Any


class AgentContext:
    """Tools registered here override global tools of the same name.

    ``tools`` maps names to ``foliko_cli.engine.tools.Tool`` values and ``skills``
    holds ``foliko_cli.engine.skills.Skill`` values; the context layer only keeps
    them (the system prompt is assembled in ``foliko_cli.engine.prompts``).
    """

    def __init__(self, agent_id: str, agent: Any = None, *, system_prompt: str | None = None):
        self.agent_id = agent_id
        self.agent = agent
        self.tools: dict[str, Any] = {}
        self.skills: list[Any] = []
        self.system_prompt = system_prompt
        self.custom_data: dict[str, Any] = {}

    def register_tool(self, tool: Any) -> None:
        self.tools[tool.name] = tool

    def unregister_tool(self, name: str) -> bool:
        return self.tools.pop(name, None) is not None

    def get_tool(self, name: str) -> Any:
        return self.tools.get(name)

    def all_tools(self) -> list[Any]:
        return list(self.tools.values())
