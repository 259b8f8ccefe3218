"""Agents, skills, tools, MCP servers and the chat handlers built from them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from foliko_cli.context.agent import AgentContext
    from foliko_cli.context.request import RequestContext
    from foliko_cli.engine.agents import AgentConfig
    from foliko_cli.engine.handler import AgentChatHandler
    from foliko_cli.engine.skills import SkillSet
    from foliko_cli.engine.tools import Tool
    from foliko_cli.mcp.manager import MCPManager
    from foliko_cli.models.base import ModelProvider
from foliko_cli.service.base import ServiceBase
from foliko_cli.service.common import (
    _NOTICE_MARKER,
    DEFAULT_MODEL_NOTICE,
)


class ToolsMixin(ServiceBase):
    """Building what a turn needs; tools and servers are loaded once per service."""

    # agents, skills, tools, models

    def skills(self) -> SkillSet:
        """Skills found in the skill directories (once); problems go to ``notify``."""
        if self._skills is None:
            from foliko_cli.engine.skills import discover_skills

            self._skills = discover_skills(self.skill_dirs)
            for problem in self._skills.problems:
                self.notify(f"skipped skill {problem}")
        return self._skills

    async def _load_global_tools(self) -> None:
        """Plugin tools from the config and the tools of the enabled MCP servers,
        once (a dry run loads no plugin: ``_stand_ins`` shows them)."""
        if self._tools_loaded:
            return
        if not (self.tools or self.mcp_servers):
            self._tools_loaded = True  # nothing to load, nothing to stand in for
            return
        from foliko_cli.engine.tools import code_stood_in

        dry = code_stood_in()
        if self.tools and not dry:
            from foliko_cli.engine.plugins import load_tool

            for reference in self.tools:
                self.framework.register_tool(load_tool(reference))
        if self.mcp_servers:
            await self._offer_mcp_tools(None, self.mcp.enabled())
        self._tools_loaded = not dry

    def _stand_ins(self) -> tuple[Tool, ...]:
        """The config's tools as a dry run offers them: those from code stood in for."""
        from foliko_cli.engine.plugins import load_tool

        return tuple(load_tool(reference) for reference in self.tools)

    async def agent_context(self, name: str) -> AgentContext:
        """The agent's context, filled from its config (tools, skills, MCP servers).

        A dry run builds one of its own, so that the stand-ins for the agent's
        tools from code never replace the tools of the agent's real turns."""
        from foliko_cli.context.agent import AgentContext
        from foliko_cli.engine.agents import agent_config, build_agent
        from foliko_cli.engine.tools import code_stood_in

        config = agent_config(name, self.agents)
        dry = code_stood_in()
        context = AgentContext(name) if dry else self.framework.get_or_create_agent_context(name)
        for warning in build_agent(context, config, self.skills()):
            self.notify(warning)
        if config.mcp_servers and dry:
            for tool in await self.mcp_tools(list(config.mcp_servers), owner=f"agent {name!r}"):
                context.register_tool(tool)
        elif config.mcp_servers:
            await self._offer_mcp_tools(name, list(config.mcp_servers))
        return context

    # MCP servers (F12)

    @property
    def mcp(self) -> MCPManager:
        """The configured MCP servers, checked on first use, started only when needed.

        A service built with ``mcp_share`` uses that service's connections for
        the servers not marked ``per_user``."""
        if self._mcp is None:
            from foliko_cli.mcp.asking import Interaction
            from foliko_cli.mcp.manager import MCPManager
            from foliko_cli.mcp.server_config import ELICITATION_CHOICES

            elicitation = self._interaction[2]
            if elicitation is not None and elicitation not in ELICITATION_CHOICES:
                raise ValueError(f"elicitation must be one of {ELICITATION_CHOICES}")

            shared = self._mcp_share.mcp if self._mcp_share is not None else None
            self._mcp = MCPManager(
                self.mcp_servers,
                shared=shared,
                home=self.home,
                interaction=Interaction(*self._interaction),
                notify=self.notify,
            )
        return self._mcp

    async def start_mcp_servers(self, names: list[str] | None = None) -> None:
        """Start the servers (all configured ones by default); problems go to ``notify``."""
        names = list(self.mcp.configs) if names is None else names
        if names:
            for warning in await self.mcp.start(names):
                self.notify(warning)

    async def mcp_status(self) -> list[dict[str, Any]]:
        """Every configured server, started, with its state, tool count and any error."""
        names = list(self.mcp.configs)
        if names:
            await self.mcp.start(names)
        return [self.mcp.status(name) for name in names]

    async def mcp_tool_list(self, server: str | None = None) -> list[dict[str, Any]]:
        """Each tool of the server (or of every server), also those the config leaves
        out. Two tools that would reach the model under one name are a UsageError
        naming both servers, as in a turn."""
        names = list(self.mcp.configs)
        if server is not None:
            await self.mcp.start(self.mcp.check([server], "mcp tools"))
        else:
            await self.start_mcp_servers()
        self.mcp.tools(names if server is None else [server], beside=self.mcp.enabled())
        return self.mcp.tool_rows(names if server is None else [server])

    async def mcp_tools(self, names: list[str], *, owner: str = "the config") -> list[Tool]:
        """The tools of these servers: a server whose tool list is cached starts
        when a tool of it is first called, any other now (once for this
        service's life); problems go to ``notify``."""
        for warning in await self.mcp.prepare(self.mcp.check(names, owner)):
            self.notify(warning)
        return self.mcp.tools(names, beside=self.mcp.enabled())

    async def _read_resource(self, source: str) -> list[Any]:
        """An ``mcp:SERVER:URI`` attachment's parts (see ``attachments.load_all``)."""
        from foliko_cli.common.loop import require_loop
        from foliko_cli.mcp.resources import read_resource

        require_loop(f"reading {source}")

        return await read_resource(self.mcp, source)

    async def _listed_servers(self, server: str | None, owner: str) -> list[str]:
        """The running servers a listing covers: ``server`` (which must start), or
        each configured one that starts (the others are warned of)."""
        if server is None:
            await self.start_mcp_servers()
            return [n for n in self.mcp.configs if self.mcp.connection(n).state == "ready"]
        await self.mcp.start(self.mcp.check([server], owner))
        connection = self.mcp.connection(server)
        if connection.state != "ready":
            from foliko_cli.errors import MCPServerError

            raise MCPServerError(
                f"MCP server {server!r} is not available: {connection.error}",
                fix="see the servers' state and fix its [mcp_servers] table",
            )
        return [server]

    async def mcp_resources(self, server: str | None = None) -> list[dict[str, Any]]:
        """The resources and resource templates of the server (or of every server
        that starts); a server that has none lists none."""
        from foliko_cli.errors import MCPServerError, ToolError
        from foliko_cli.mcp.resources import resource_rows

        rows = []
        for name in await self._listed_servers(server, "mcp resources"):
            try:
                rows += await resource_rows(self.mcp.connection(name))
            except ToolError as exc:
                raise MCPServerError(str(exc)) from None
        return rows

    async def mcp_prompts(self, server: str | None = None) -> list[dict[str, Any]]:
        """The prompts of the server (or of every server that starts), as SERVER__NAME."""
        from foliko_cli.errors import MCPServerError, ToolError
        from foliko_cli.mcp.prompts import list_prompts, prompt_row

        rows = []
        for name in await self._listed_servers(server, "mcp prompts"):
            try:
                rows += [prompt_row(name, p) for p in await list_prompts(self.mcp.connection(name))]
            except ToolError as exc:
                raise MCPServerError(str(exc)) from None
        return rows

    async def mcp_prompt(
        self, reference: str, arguments: dict[str, str] | None = None, extra: str = ""
    ) -> Any:
        """Prompt ``reference`` (SERVER__NAME) as a turn's input: a ``PromptTurn``
        (``message``, ``messages`` before it, ``attachments``), see mcp/prompts.py."""
        from foliko_cli.mcp.prompts import prompt_turn

        return await prompt_turn(self.mcp, reference, dict(arguments or {}), extra)

    async def _offer_mcp_tools(self, agent: str | None, names: list[str]) -> None:
        """Register the servers' tools for every turn (``agent`` None) or the
        agent's turns, in place of those registered from them before."""
        owner = "the config" if agent is None else f"agent {agent!r}"
        tools = await self.mcp_tools(names, owner=owner)
        self._mcp_generation = self.mcp.generation
        framework = self.framework
        holder = framework if agent is None else framework.get_or_create_agent_context(agent)
        for name in self._mcp_offered.get(agent, ((), ()))[1]:
            holder.unregister_tool(name)
        for tool in tools:
            holder.register_tool(tool)
        self._mcp_offered[agent] = (names, [tool.name for tool in tools])

    async def _follow_mcp_changes(self) -> None:
        """Offer the tools again after a server's list changed (it said so, or
        started with another list than the one cached)."""
        if self._mcp is None or self._mcp.generation == self._mcp_generation:
            return
        for agent, (names, _) in list(self._mcp_offered.items()):
            await self._offer_mcp_tools(agent, list(names))

    async def tool_rows(self) -> list[dict[str, Any]]:
        """Every tool a chat may use: built-ins, enabled plugins (the one in effect
        when names clash), the MCP servers' tools, and installed plugins not enabled."""
        from foliko_cli.engine.plugins import entry_point_tools, load_tool
        from foliko_cli.engine.tools import BUILTIN_TOOLS

        def row(name: str, source: str, enabled: bool, description: str) -> dict[str, Any]:
            return {"name": name, "source": source, "enabled": enabled, "description": description}

        rows = {t.name: row(t.name, "built-in", True, t.description) for t in BUILTIN_TOOLS}
        for reference in self.tools:
            if reference not in rows:
                tool = load_tool(reference)
                rows[tool.name] = row(tool.name, reference, True, tool.description)
        listed = list(rows.values())
        if self.mcp_servers:
            listed += [
                row(r["name"], f"mcp {r['server']}", r["enabled"], r["description"])
                for r in await self.mcp_tool_list()
                if r["offered"]
            ]
        known = {r["source"] for r in listed} | {r["name"] for r in listed}
        for name, entry in sorted(entry_point_tools().items()):
            if name not in known:
                listed.append(row(name, f"plugin {entry.value}", False, ""))
        return listed

    def agent_config(self, name: str) -> AgentConfig:
        """Agent ``name``'s config, checked: a UsageError names what is wrong."""
        from foliko_cli.engine.agents import agent_config

        return agent_config(name, self.agents)

    def listening_for_waits(
        self, listener: Callable[[str, str | None], None]
    ) -> AbstractContextManager[None]:
        """Tell ``listener(session_id, holder)`` when work started inside the block
        waits for a session something else holds (see ``Framework``)."""
        from foliko_cli.engine.framework import listening_for_waits

        return listening_for_waits(listener)

    async def describe_agent(self, name: str) -> dict[str, Any]:
        """An agent's model, tools, skills and the system prompt its turns start with."""
        from foliko_cli.engine.prompts import agent_system_prompt

        context = await self.agent_context(name)
        chosen = self.model_name(None, name)
        return {
            "name": name,
            "model": chosen if isinstance(chosen, str) else getattr(chosen, "name", "echo"),
            "tools": sorted(context.tools),
            "skills": [s.name for s in context.skills],
            "system_prompt": agent_system_prompt(context),
        }

    def model_name(
        self, model: str | ModelProvider | None = None, agent: str | None = None
    ) -> str | ModelProvider | None:
        """The model a turn uses: the one asked for, else the agent's, else the default."""
        if model is not None:
            return model
        if agent is not None:
            from foliko_cli.engine.agents import agent_config

            configured = agent_config(agent, self.agents).model
            if configured:
                return configured
        return self.model

    def _announce_default_model(self) -> None:
        """Say once per FOLIKO_HOME that the offline echo model answers."""
        marker = self.home / _NOTICE_MARKER
        if marker.exists():
            return
        self.notify(DEFAULT_MODEL_NOTICE)
        try:
            self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
            marker.touch(mode=0o600)
        except OSError:
            return  # the notice repeats next time: harmless

    def _provider(self, chosen: str | ModelProvider | None) -> ModelProvider:
        provider = self._resolve_model(chosen)
        self._providers.append(provider)
        return provider

    async def _make_handler(self, provider: ModelProvider, agent: str | None) -> AgentChatHandler:
        from foliko_cli.engine.handler import AgentChatHandler

        await self._load_global_tools()
        await self._follow_mcp_changes()
        return AgentChatHandler(
            self.framework,
            provider,
            agent=await self.agent_context(agent) if agent else None,
            max_steps=self.max_steps,
            system_prompt=self.system_prompt,
            context_window=self.context_window,
            keeps_trash=self._keeps_trash,
        )

    async def handler(
        self, model: str | ModelProvider | None = None, agent: str | None = None
    ) -> AgentChatHandler:
        """The chat handler for this model and agent, built once and reused."""
        chosen = self.model_name(model, agent)
        key = (chosen if isinstance(chosen, str) else repr(chosen), agent)
        handler = self._handlers.get(key)
        if handler is None:
            if chosen is None:
                self._announce_default_model()
            handler = await self._make_handler(self._provider(chosen), agent)
            self._handlers[key] = handler
        else:
            await self._follow_mcp_changes()
        return handler

    def check_model(self, name: str) -> None:
        """Raise UnknownModelError unless a turn may name ``name``: a configured
        alias or ``PROVIDER:MODEL`` of a provider foliko has (nothing is called)."""
        from foliko_cli.models import model_spec

        model_spec(name, self.models)

    def request(self, timeout: float | None = None, **options: Any) -> RequestContext:
        """A new RequestContext (pass it to ``chat`` to trace or cancel a turn)."""
        from foliko_cli.context.request import RequestContext

        return RequestContext(timeout=timeout or self.timeout, **options)
