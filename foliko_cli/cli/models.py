"""``foliko models list``: each model, the server it is reached through, its window
and whether it needs a key that is there."""

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
    """The built-in providers, the config's [models.NAME] aliases and, for each
    reachable OpenAI-compatible server (or Ollama), the models it serves: each
    once, with the server it is reached through, its context window (as a turn
    finds it) and whether it needs a key, and has it.

    Servers are asked in parallel, for 2 seconds at most; one that does not
    answer makes its models unusable.

    \b
    Example:
      OPENAI_BASE_URL=http://127.0.0.1:8080/v1 foliko models list --json
    """
    import asyncio
    import os

    from foliko_cli.common.keys import KeyStore
    from foliko_cli.service.library import model_rows, model_spec, served_models

    settings = settings_for(ctx)
    names = ["echo", "openai:MODEL", "anthropic:MODEL", "ollama:MODEL", *settings.models]
    specs = {name: model_spec(name, settings.models) for name in names}
    keys = KeyStore(settings.home)
    reports = asyncio.run(
        served_models(specs.values(), os.environ, cache_dir=settings.home, keys=keys)
    )
    rows = model_rows(
        specs,
        settings.models,
        reports,
        os.environ,
        default=settings.model or "echo",
        window_setting=settings.context_window,
        cache_dir=settings.home,
        keys=keys,
    )
    emit_rows(
        rows,
        {
            "name": "name",
            "base_url": "reached at",
            "context_window": "context",
            "key": "key",
            "usable": "usable",
            "problem": "problem",
        },
        fmt,
        human={"usable": lambda ok: "yes" if ok else "no"},
    )
