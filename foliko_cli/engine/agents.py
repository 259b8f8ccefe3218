"""Agents from the config's ``[agents.NAME]`` tables (seed §3.1, F10)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from foliko_cli.common.settings import entry_problem
from foliko_cli.context.agent import AgentContext
from foliko_cli.engine.plugins import load_tool
from foliko_cli.engine.skills import SkillSet, load_skill_tool
from foliko_cli.errors import UsageError


@dataclass(frozen=True)
class AgentConfig:
    name: str
    system_prompt: str | None = None
    model: str | None = None
    tools: tuple[str, ...] = ()
    skills: tuple[str, ...] = ()
    description: str | None = None
    mcp_servers: tuple[str, ...] = ()


def _strings(value: Any, agent: str, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"agent {agent!r}: '{key}' must be a list of names; fix the config")
    return tuple(value)


def agent_config(name: str, table: Mapping[str, Mapping[str, Any]]) -> AgentConfig:
    if name not in table:
        known = ", ".join(sorted(table)) or "none configured"
        raise UsageError(
            f"unknown agent {name!r} (known: {known}); define it as [agents.{name}] in foliko.toml"
        )
    entry = table[name]
    problem = entry_problem("agents", name, entry)
    if problem:
        raise UsageError(problem)
    for key in ("system_prompt", "model", "description"):
        if key in entry and not isinstance(entry[key], str):
            raise UsageError(f"agent {name!r}: '{key}' must be a string; fix the config")
    return AgentConfig(
        name=name,
        system_prompt=entry.get("system_prompt"),
        model=entry.get("model"),
        tools=_strings(entry.get("tools", []), name, "tools"),
        skills=_strings(entry.get("skills", []), name, "skills"),
        description=entry.get("description"),
        mcp_servers=_strings(entry.get("mcp_servers", []), name, "mcp_servers"),
    )


def build_agent(context: AgentContext, config: AgentConfig, skills: SkillSet) -> list[str]:
    """Fill ``context`` from ``config``; return warnings (skills that were not found)."""
    context.system_prompt = config.system_prompt
    context.tools.clear()
    for reference in config.tools:
        context.register_tool(load_tool(reference))
    wanted = list(skills.skills) if "*" in config.skills else list(config.skills)
    context.skills = [skills.skills[name] for name in wanted if name in skills.skills]
    warnings = [
        f"agent {config.name!r}: skill {name!r} not found; list the skills that exist"
        for name in wanted
        if name not in skills.skills
    ]
    if context.skills:
        context.register_tool(load_skill_tool({s.name: s for s in context.skills}))
    return warnings
