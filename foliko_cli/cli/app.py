"""Building the facade for a command from the global options and environment."""

from __future__ import annotations

import click

from foliko_cli.config import load_settings
from foliko_cli.facade import Foliko


def open_facade(
    ctx: click.Context, *, model: str | None = None, timeout: float | None = None
) -> Foliko:
    """A facade for this invocation, closed when the command ends."""
    settings = load_settings(storage=ctx.obj.get("storage"), model=model)
    options = {"timeout": timeout} if timeout else {}
    facade = Foliko(settings.storage, settings.model, home=settings.home, **options)
    ctx.call_on_close(facade.close)
    return facade
