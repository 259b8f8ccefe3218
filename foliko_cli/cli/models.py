"""``foliko models list``: what is configured and whether it can be used now."""

from __future__ import annotations

import click

from foliko_cli.cli.app import settings_for
from foliko_cli.cli.output import emit_rows, list_options


@click.group()
def models() -> None:
    """Models foliko can use.

    \b
    Example:
      foliko models list
    """


@models.command("list")
@list_options
@click.pass_context
def list_models(ctx: click.Context, fmt: str) -> None:
    """The built-in providers and the config's [models.NAME] aliases, with readiness.

    \b
    Example:
      OPENAI_API_KEY=sk-... foliko models list --json
    """
    from foliko_cli.models import model_spec, usable
    from foliko_cli.storage import shown

    settings = settings_for(ctx)
    names = ["echo", "openai:MODEL", "anthropic:MODEL", "ollama:MODEL", *settings.models]
    rows = []
    for name in names:
        spec = model_spec(name, settings.models)
        problem = usable(spec)
        rows.append(
            {
                "name": name,
                "provider": spec.provider,
                "model": spec.model,
                "base_url": shown(spec.base_url) if spec.base_url else None,
                "key_env": spec.key_env,
                "context_window": spec.context_window,
                "usable": problem is None,
                "problem": problem,
                "default": name == (settings.model or "echo"),
            }
        )
    emit_rows(
        rows,
        {
            "name": "name",
            "provider": "provider",
            "base_url": "base URL",
            "context_window": "context",
            "usable": "usable",
            "problem": "problem",
        },
        fmt,
        human={"usable": lambda ok: "yes" if ok else "no"},
    )
