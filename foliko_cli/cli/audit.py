"""``foliko audit``: who read or wrote which sessions through ``foliko mcp serve``
or an API key of ``foliko serve``; ``foliko audit prune`` keeps the log bounded."""

from __future__ import annotations

import click

from foliko_cli.cli.app import open_facade
from foliko_cli.cli.output import emit_json, emit_rows, format_ms, list_options, note
from foliko_cli.cli.params import Moment, storage_option


@click.group(invoke_without_command=True)
@click.option(
    "--since",
    type=Moment(),
    metavar="WHEN",
    help="Only calls since then: a duration (7d, 12h) or a date (2026-01-31).",
)
@click.option("--session", "session_id", metavar="ID", help="Only calls that read or wrote it.")
@click.option(
    "--key",
    metavar="NAME",
    help="Only calls of this client: an API key's name or user, or an MCP host (mcp:NAME).",
)
@list_options
@storage_option
@click.pass_context
def audit(
    ctx: click.Context, since: int | None, session_id: str | None, key: str | None, fmt: str
) -> None:
    """What MCP hosts and API keys read or wrote, oldest first.

    Each call of foliko mcp serve, and each request of a foliko serve API key
    that reads or writes a session, is one entry: when, which client (an API
    key's name, never the key; an MCP host's name), which tool or route, which
    sessions, and the SHA-256 of what it answered (never the content). The log
    keeps the newest 100000 entries; foliko audit prune keeps fewer.

    \b
    Examples:
      foliko audit --since 1d
      foliko audit --session proj-notes --json
      foliko audit prune --before 30d
    """
    if ctx.invoked_subcommand is not None:
        return
    entries = open_facade(ctx).audit_entries(since=since, session_id=session_id, client=key)
    rows = [
        {
            "at": entry.at,
            "client": entry.client,
            "call": entry.call,
            "session_ids": list(entry.session_ids),
            "outcome": entry.outcome,
            "result_sha256": entry.result_sha256,
        }
        for entry in entries
    ]
    emit_rows(
        rows,
        {
            "at": "when",
            "client": "client",
            "call": "call",
            "session_ids": "sessions",
            "outcome": "outcome",
            "result_sha256": "sha256",
        },
        fmt,
        human={
            "at": format_ms,
            "session_ids": lambda ids: ", ".join(ids) or "-",
            "result_sha256": lambda digest: digest[:12],
        },
    )


@audit.command("prune")
@click.option(
    "--before",
    type=Moment(),
    metavar="WHEN",
    help="Drop the entries before then: a duration ago (30d) or a date (2026-01-31).",
)
@click.option("--keep", type=click.IntRange(min=0), metavar="N", help="Keep the newest N only.")
@click.option("--json", "as_json", is_flag=True, help="Print {pruned: N} as JSON.")
@storage_option
@click.pass_context
def prune(ctx: click.Context, before: int | None, keep: int | None, as_json: bool) -> None:
    """Drop old entries: those before a time, or all but the newest N (with
    neither, all but the newest 100000, the log's bound).

    \b
    Examples:
      foliko audit prune --before 90d
      foliko audit prune --keep 1000
    """
    pruned = open_facade(ctx).prune_audit(before=before, keep=keep)
    if as_json:
        emit_json({"pruned": pruned})
    note(f"pruned {pruned} audit entr{'y' if pruned == 1 else 'ies'}")
