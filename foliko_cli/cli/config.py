"""``foliko config``: the effective settings and where they come from."""

from __future__ import annotations

import click

from foliko_cli.cli.app import settings_for
from foliko_cli.cli.output import emit_rows, list_options


@click.group()
def config() -> None:
    """Show the effective configuration and the config file locations.

    Precedence: flags > FOLIKO_* environment > foliko.toml (the nearest in the
    current directory or above, up to the repository root) > user config file
    (FOLIKO_CONFIG, which must exist, or the platform's) > defaults.
    FOLIKO_HOME moves the sessions, not the user config file.

    \b
    Example:
      foliko config show
    """


@config.command()
@list_options
@click.pass_context
def show(ctx: click.Context, fmt: str) -> None:
    """Each setting's value (secrets redacted) and where it came from.

    The [models.NAME] and [agents.NAME] tables follow, one row per key.

    \b
    Example:
      FOLIKO_MODEL=echo foliko config show --json
    """
    settings = settings_for(ctx)
    rows = [
        {"key": key, "value": str(value) if key == "home" else value, "source": source}
        for key, value, source in settings.shown()
    ]
    emit_rows(rows, {"key": "key", "value": "value", "source": "source"}, fmt)


@config.command()
@click.pass_context
def path(ctx: click.Context) -> None:
    """Print the user config file, then the project config file.

    \b
    Example:
      $EDITOR "$(foliko config path | head -1)"
    """
    settings = settings_for(ctx)
    click.echo(settings.files["user"])
    click.echo(settings.files["project"])
