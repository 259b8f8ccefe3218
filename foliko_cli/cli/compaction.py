"""``foliko sessions compact`` and ``uncompact``, and the list that ``sessions show
--compactions`` prints."""

from __future__ import annotations

from typing import Any

import click

from foliko_cli.cli.app import open_facade
from foliko_cli.cli.output import emit_json, format_ms, note
from foliko_cli.cli.params import (
    json_flag,
    one_session,
    sessions_argument,
    storage_option,
    timeout_option,
)

STATUS = {"active": "in effect", "folded": "folded into a later one", "undone": "undone"}


def _span(pair: list[int] | None, what: str) -> str:
    if not pair:
        return f"no {what}s"
    first, last = pair
    return f"{what} {first}" if first == last else f"{what}s {first}–{last}"


def _messages(first: int, end: int) -> str:
    return _span([first + 1, end] if end > first else None, "message")


def _tokens(usage: dict[str, Any] | None, cost: Any) -> str:
    if not usage:
        return "no model call" if usage is not None else "usage not recorded"
    spent = f"{usage.get('input_tokens', 0):,} input, {usage.get('output_tokens', 0):,} output"
    return spent + " tokens" + (f", ${cost:.6f}" if isinstance(cost, int | float) else "")


def describe(entry: dict[str, Any]) -> list[str]:
    """One compaction, for a reader: what it stands for, how it was made, its summary."""
    number = entry["number"]
    made = "summary" if entry.get("method") == "summary" else "truncation (the summary failed)"
    by = f" by {entry['model']}" if entry.get("model") else ""
    trigger = {"auto": "by a turn", "manual": "asked for"}.get(entry.get("trigger") or "", "")
    head = f"compaction {number}" if number is not None else "compaction (before the log)"
    lines = [
        f"{head} · {format_ms(entry.get('at'))} · {made}{by}"
        + (f", {trigger}" if trigger else "")
        + f" · {STATUS.get(entry['status'], entry['status'])}",
        f"  stands for {_span(entry.get('turns'), 'turn')} "
        f"({_messages(0, entry.get('covered') or 0)}); "
        f"new in it: {_span(entry.get('new_turns'), 'turn')}",
        f"  usage: {_tokens(entry.get('usage'), entry.get('cost'))}",
    ]
    summary = entry.get("summary")
    if summary:
        lines += ["  summary:", *(f"    {line}" for line in summary.splitlines())]
    else:
        lines.append("  no summary: the messages it stands for are left out")
    return lines


def print_compactions(session_id: str, entries: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        emit_json(entries)
        return
    if not entries:
        note(f"session {session_id!r} was never compacted")
        return
    click.echo("\n\n".join("\n".join(describe(entry)) for entry in entries))


@click.command()
@sessions_argument()
@click.option(
    "--keep",
    type=click.IntRange(min=0),
    metavar="N",
    help="Keep the last N turns verbatim and fold everything before them into the "
    "summary (default: keep what a full context window would).",
)
@click.option(
    "-m", "--model", metavar="MODEL", help="The model that writes the summary (default: yours)."
)
@timeout_option("Give up after this many seconds (default 120).")
@json_flag("Print the compaction as sessions show --compactions --json lists it.")
@storage_option
@click.pass_context
def compact(
    ctx: click.Context,
    session_ids: list[str],
    keep: int | None,
    model: str | None,
    timeout: float | None,
    as_json: bool,
) -> None:
    """Compress a session's history now: the model summarises the older turns.

    The messages stay stored; from the next turn the model is sent the summary
    and the turns after it. foliko sessions show --compactions lists every
    compaction; foliko sessions uncompact undoes them.

    \b
    Examples:
      foliko sessions compact s1
      foliko sessions compact s1 --keep 2 -m openai:gpt-4o-mini
    """
    session_id = one_session(session_ids, "compact ID")
    entry = open_facade(ctx, model=model, timeout=timeout).compact(session_id, keep=keep)
    if as_json:
        emit_json(entry)
    covered = entry["covered"]
    note(
        f"compacted {session_id!r}: {_span(entry['turns'], 'turn')} "
        f"({_messages(0, covered)}) are now in the summary; "
        f"the model's view begins at message {covered + 1}"
    )


@click.command()
@sessions_argument()
@json_flag("Print {uncompacted: ID, messages: N} as JSON.")
@storage_option
@click.pass_context
def uncompact(ctx: click.Context, session_ids: list[str], as_json: bool) -> None:
    """Let the model see a session's whole history again, from its next turn.

    The summary leaves the model's view (the messages were never removed);
    the compactions stay listed, as undone. A history too long for the
    model's window is compressed again by the next turn.

    \b
    Example:
      foliko sessions uncompact s1
    """
    session_id = one_session(session_ids, "uncompact ID")
    record = open_facade(ctx).uncompact(session_id)
    count = record.first_seq
    if as_json:
        emit_json({"uncompacted": session_id, "messages": count})
    note(f"the next turn of {session_id!r} sends its whole history ({count} message(s))")
