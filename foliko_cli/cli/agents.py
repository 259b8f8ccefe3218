"""``foliko agents``, ``foliko skills`` and ``foliko tools``: what a turn can use."""

from __future__ import annotations

import click

from foliko_cli.cli.app import open_facade, settings_for
from foliko_cli.cli.output import data_format_option, emit_json, emit_rows, list_options, note
from foliko_cli.cli.params import storage_option
from foliko_cli.errors import UsageError


@click.group()
def agents() -> None:
    """Agents defined in the config as [agents.NAME].

    \b
    Example:
      foliko agents list
      foliko chat -s s1 --agent helper "hi"
    """


@agents.command("list")
@list_options
@click.pass_context
def list_agents(ctx: click.Context, fmt: str) -> None:
    """Every configured agent with its model, tools and skills.

    \b
    Example:
      foliko agents list --json
    """
    from foliko_cli.service.library import agent_config

    table = settings_for(ctx).agents
    rows = []
    for name in sorted(table):
        config = agent_config(name, table)
        rows.append(
            {
                "name": name,
                "model": config.model,
                "tools": list(config.tools),
                "skills": list(config.skills),
                "description": config.description,
            }
        )
    emit_rows(rows, {"name": "name", "model": "model", "tools": "tools", "skills": "skills"}, fmt)


@agents.command("show")
@click.argument("name")
@data_format_option
@storage_option
@click.pass_context
def show_agent(ctx: click.Context, name: str, fmt: str) -> None:
    """An agent's settings and the system prompt its turns start with.

    \b
    Example:
      foliko agents show helper
    """
    details = open_facade(ctx).describe_agent(name)
    if fmt == "json":
        emit_json(details)
        return
    for key in ("name", "model"):
        click.echo(f"{key:<8} {details[key]}")
    click.echo(f"tools    {', '.join(details['tools']) or '-'}")
    click.echo(f"skills   {', '.join(details['skills']) or '-'}")
    click.echo("\n" + (details["system_prompt"] or "(no system prompt)"))


@click.group()
def skills() -> None:
    """Skills: folders with a SKILL.md in ./.foliko/skills/ or the user config directory.

    \b
    Example:
      foliko skills list
    """


@skills.command("list")
@list_options
@storage_option
@click.pass_context
def list_skills(ctx: click.Context, fmt: str) -> None:
    """Every skill found, and every malformed SKILL.md (on stderr, by path and line).

    \b
    Example:
      foliko skills list --json
    """
    found = open_facade(ctx).skills()
    rows = [
        {
            "name": s.name,
            "description": s.description,
            "path": str(s.path),
            "allowed_tools": list(s.allowed_tools),
        }
        for s in found.skills.values()
    ]
    emit_rows(rows, {"name": "name", "description": "description", "path": "path"}, fmt)


@skills.command("show")
@click.argument("name")
@storage_option
@click.pass_context
def show_skill(ctx: click.Context, name: str) -> None:
    """Print a skill's full text.

    \b
    Example:
      foliko skills show summarise
    """
    found = open_facade(ctx).skills().skills
    if name not in found:
        raise UsageError(f"no skill named {name!r}; see 'foliko skills list'")
    skill = found[name]
    click.echo(f"# {skill.name}: {skill.description}\n")
    click.echo(skill.body)


@click.group()
def tools() -> None:
    """Tools the model can call: built-ins and opt-in plugins.

    \b
    Example:
      foliko tools list
    """


@tools.command("list")
@list_options
@click.pass_context
def list_tools(ctx: click.Context, fmt: str) -> None:
    """Built-in tools, the enabled ones from the config, installed plugins, MCP tools.

    Plugins (entry points in group foliko.tools) run only when enabled with
    tools = [...] in the config or in an agent's tools.

    \b
    Example:
      foliko tools list --json
    """
    rows = open_facade(ctx).tool_rows()
    emit_rows(
        rows,
        {"name": "name", "source": "source", "enabled": "enabled", "description": "description"},
        fmt,
        human={"enabled": lambda on: "yes" if on else "no"},
    )
    if fmt == "table" and any(not r["enabled"] for r in rows):
        note(
            "plugins marked 'no' run only when listed in tools = [...] in the config; "
            "MCP servers marked 'no' only for agents that list them in mcp_servers"
        )
