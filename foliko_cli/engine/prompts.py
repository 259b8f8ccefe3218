"""Assembling a turn's system prompt from the agent and the session.

It lives outside ``context/`` because it needs the skills and tools an agent
holds, while the context layer is plain state that everything may import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from foliko_cli.context import AgentContext


def agent_system_prompt(agent: AgentContext) -> str | None:
    """The agent's prompt, its skills and its own tools, rebuilt for every turn."""
    parts = [agent.system_prompt] if agent.system_prompt else []
    if agent.skills:
        from foliko_cli.engine.skills import skills_prompt

        listed = skills_prompt(agent.skills)
        if listed:
            parts.append(listed)
    own_tools = [t for t in agent.tools.values() if t.name != "load_skill"]
    if own_tools:
        parts.append("Your tools:\n" + "\n".join(f"- {t.name}: {t.description}" for t in own_tools))
    return "\n\n".join(parts) or None


def turn_system_prompt(
    agent: AgentContext | None, session_prompt: str | None, default: str | None
) -> str | None:
    """The agent's prompt, then the session's own (kept from an earlier turn) or the default."""
    agent_prompt = agent_system_prompt(agent) if agent else None
    own = session_prompt or default
    return "\n\n".join(p for p in (agent_prompt, own) if p) or None
