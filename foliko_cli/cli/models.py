"""``foliko models list``: what is configured, what servers serve, and what can be used."""

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
    reachable OpenAI-compatible server (or Ollama), the models it serves.

    Servers are asked in parallel, for 2 seconds at most; one that does not
    answer makes its models unusable.

    \b
    Example:
      OPENAI_BASE_URL=http://127.0.0.1:8080/v1 foliko models list --json
    """
    import asyncio
    import os

    from foliko_cli.models import model_spec, usable
    from foliko_cli.models.listing import served_models
    from foliko_cli.storage import shown

    settings = settings_for(ctx)
    names = ["echo", "openai:MODEL", "anthropic:MODEL", "ollama:MODEL", *settings.models]
    specs = [model_spec(name, settings.models) for name in names]
    reports = asyncio.run(served_models(specs, os.environ))
    default = settings.model or "echo"
    rows = []
    for name, spec in zip(names, specs, strict=True):
        problem = usable(spec)
        report = reports.get((spec.provider, (spec.base_url or "").rstrip("/")))
        if problem is None and report is not None and report.problem:
            problem = f"server {report.problem}"
        rows.append(_row(name, spec, problem, default, shown))
    for report in reports.values():
        for model_id, window in report.models:
            name = f"{report.provider}:{model_id}"
            spec = model_spec(name, settings.models)
            row = _row(name, spec, None, default, shown)
            row["context_window"] = window or spec.context_window
            row["served"] = True
            rows.append(row)
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


def _row(name: str, spec, problem: str | None, default: str, shown) -> dict:
    return {
        "name": name,
        "provider": spec.provider,
        "model": spec.model,
        "base_url": shown(spec.base_url) if spec.base_url else None,
        "key_env": spec.key_env,
        "context_window": spec.context_window,
        "usable": problem is None,
        "problem": problem,
        "default": name == default,
        "served": False,
    }
