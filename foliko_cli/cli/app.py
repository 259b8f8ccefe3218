"""Building the facade for a command from the global options and the settings."""

from __future__ import annotations

import click

from foliko_cli.cli.output import note
from foliko_cli.config import Settings, load_settings
from foliko_cli.facade import Foliko


def settings_for(ctx: click.Context, **flags) -> Settings:
    root = ctx.find_root().obj or {}
    return load_settings(**{"storage": root.get("storage"), **flags})


def open_facade(ctx: click.Context, **flags) -> Foliko:
    """A facade for this invocation, closed when the command ends."""
    user = (ctx.find_root().obj or {}).get("user")
    facade = Foliko.from_settings(settings_for(ctx, **flags), notify=note, user=user)
    ctx.call_on_close(facade.close)
    return facade
