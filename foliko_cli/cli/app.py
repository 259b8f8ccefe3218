"""Building the facade for a command from the global options and the settings."""

from __future__ import annotations

from typing import Any

import click

from foliko_cli.cli.output import note
from foliko_cli.common.settings import TABLES, Settings, load_settings
from foliko_cli.errors import StorageError, UsageError
from foliko_cli.service.facade import Foliko

LOCAL_BACKENDS = ("json", "sqlite")


def check_home(settings: Settings) -> None:
    """A home that exists but is not a directory fails, naming it (exit 3).

    Without this a listing of the file-based backends is simply empty.
    """
    home = settings.home
    if settings.storage in LOCAL_BACKENDS and home.exists() and not home.is_dir():
        origin = settings.sources.get("home", "default")
        raise StorageError(
            f"the foliko home {home} ({origin}) is not a directory; "
            "point FOLIKO_HOME at a directory or move the file away"
        )


TABLES_USED = {
    "chat": TABLES,
    "workflow": TABLES,
    "serve": TABLES,
    "models": ("models",),
    "agents": ("agents",),
    "tools": ("agents", "mcp_servers"),
    "mcp": ("mcp_servers",),
}
"""The config tables each command reads; an unknown key in another is a warning."""


def settings_for(ctx: click.Context, **flags: Any) -> Settings:
    """The settings for this command; an unknown key in a table it reads stops it
    (exit 2), one in another table is a warning, once."""
    root = ctx.find_root()
    settings = load_settings(**{"storage": (root.obj or {}).get("storage"), **flags})
    used = TABLES_USED.get(root.invoked_subcommand or "", ())
    stopping = [problem for problem in settings.problems if problem.table in used]
    if stopping:
        raise UsageError(stopping[0].message)
    warnings = [problem.message for problem in settings.problems]
    if settings.untrusted is not None:
        warnings.append(settings.untrusted.message())
    warned = root.meta.setdefault("foliko.warned", set())  # once per command
    for message in warnings:
        if message not in warned:
            warned.add(message)
            note(f"warning: {message}")
    return settings


def open_facade(
    ctx: click.Context, *, yes: bool = False, ask: bool = True, scope: object = None, **flags: Any
) -> Foliko:
    """A facade for this invocation, closed when the command ends; ``yes``
    approves every MCP tool call of the run (--yes); ``ask`` False: the MCP
    servers' questions are never put to the user (stdin is not theirs);
    ``scope`` holds the service to what a client may see and do."""
    settings = settings_for(ctx, **flags)
    check_home(settings)
    user = (ctx.find_root().obj or {}).get("user")
    interaction: dict[str, Any] = {"approve_all": yes}
    if not ask:
        interaction["elicitation"] = "decline"
    elif settings.mcp_servers:
        from foliko_cli.cli.asking import asker

        interaction["asker"] = asker()
    if scope is not None:
        interaction["scope"] = scope
    facade = Foliko.from_settings(settings, notify=note, user=user, **interaction)
    facade.service.storage.strict_reads = True  # a mistyped --storage path is no empty store
    ctx.call_on_close(facade.close)
    return facade
