"""Building the facade for a command from the global options and the settings."""

from __future__ import annotations

import click

from foliko_cli.config import Settings, load_settings
from foliko_cli.facade import Foliko


def settings_for(ctx: click.Context, **flags) -> Settings:
    root = ctx.find_root().obj or {}
    return load_settings(storage=root.get("storage"), **flags)


def open_facade(ctx: click.Context, **flags) -> Foliko:
    """A facade for this invocation, closed when the command ends."""
    settings = settings_for(ctx, **flags)
    facade = Foliko(
        settings.storage,
        settings.model,
        home=settings.home,
        timeout=settings.timeout,
        max_steps=settings.max_steps,
        system_prompt=settings.system_prompt,
        models=settings.models,
        context_window=settings.context_window,
    )
    ctx.call_on_close(facade.close)
    return facade
