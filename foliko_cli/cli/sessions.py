"""``foliko sessions``: list and inspect stored sessions."""

from __future__ import annotations

import click

from foliko_cli.cli.app import open_facade
from foliko_cli.cli.output import emit_json, format_ms, table
from foliko_cli.storage.record import record_to_dict


@click.group()
def sessions() -> None:
    """List and inspect stored sessions.

    \b
    Example:
      foliko sessions list --json
    """


@sessions.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.pass_context
def list_sessions(ctx: click.Context, as_json: bool) -> None:
    """List sessions, most recently updated first.

    \b
    Example:
      foliko sessions list --json | python -c 'import json,sys; print(len(json.load(sys.stdin)))'
    """
    summaries = open_facade(ctx).list_sessions()
    if as_json:
        emit_json(
            [
                {
                    "session_id": s.session_id,
                    "created_at": s.created_at,
                    "updated_at": s.updated_at,
                    "message_count": s.message_count,
                    "preview": s.preview,
                }
                for s in summaries
            ]
        )
        return
    table(
        [
            [
                s.session_id,
                s.message_count,
                format_ms(s.updated_at),
                f"UNREADABLE: {s.error}" if s.error else s.preview,
            ]
            for s in summaries
        ],
        ["session", "messages", "updated", "last prompt"],
    )


@sessions.command("show")
@click.argument("session_id", metavar="ID")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print {session_id, messages, variables, metadata} as JSON.",
)
@click.pass_context
def show(ctx: click.Context, session_id: str, as_json: bool) -> None:
    """Show a session's messages, variables and metadata.

    \b
    Example:
      foliko sessions show s1 --json
    """
    record = open_facade(ctx).get_session(session_id)
    if as_json:
        emit_json(record_to_dict(record))
        return
    meta = record.metadata
    click.echo(f"session   {record.session_id}")
    click.echo(f"messages  {len(record.messages)}")
    click.echo(f"created   {format_ms(meta.get('created_at'))}")
    click.echo(f"active    {format_ms(meta.get('last_active'))}")
    for key, value in sorted(record.variables.items()):
        click.echo(f"var       {key} = {value!r}")
    for message in record.messages:
        label = message["role"]
        if message.get("tool_calls"):
            calls = ", ".join(c["name"] for c in message["tool_calls"])
            label += f" → {calls}"
        click.echo(f"\n[{label}] {format_ms(message.get('created_at'))}")
        if message["content"]:
            click.echo(message["content"])
