"""``foliko sessions tree``: which session was forked from which, drawn or as rows."""

from __future__ import annotations

import sys
from typing import Any

import click

from foliko_cli.cli.app import open_facade
from foliko_cli.cli.output import damaged, emit_rows, note
from foliko_cli.cli.params import sessions_argument, storage_option
from foliko_cli.errors import UsageError

COLUMNS = {"session_id": "session", "parent": "parent", "turn": "turn"}


def label(row: dict[str, Any]) -> str:
    parts = [row["session_id"], f"{row['message_count']} message(s)"]
    if row["parent"] is not None:
        turn = row["turn"]
        where = f"after turn {turn}" if turn is not None else "at a point not recorded"
        parts.append(f"forked {where}")
        if row["parent_missing"]:
            parts.append(f"from {row['parent']!r}, which is not stored")
    if row.get("error"):
        parts.append("DAMAGED")
    return " · ".join(parts)


def drawn(rows: list[dict[str, Any]]) -> list[str]:
    """The rows (depth first) as ``tree`` draws a directory: ├── └── │."""
    last = [True] * len(rows)  # no later sibling
    below: set[int] = set()  # depths met since the tree last climbed above them
    for index in range(len(rows) - 1, -1, -1):
        depth = rows[index]["depth"]
        last[index] = depth not in below
        below = {d for d in below if d < depth} | {depth}
    lines: list[str] = []
    open_levels: list[bool] = []  # for each ancestor level: does a sibling follow?
    for index, row in enumerate(rows):
        depth = row["depth"]
        del open_levels[max(0, depth - 1) :]
        if depth:
            rails = "".join("│   " if more else "    " for more in open_levels)
            lines.append(rails + ("└── " if last[index] else "├── ") + label(row))
            open_levels.append(not last[index])
        else:
            lines.append(label(row))
    return lines


@click.command()
@sessions_argument()
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["tree", "tsv", "json", "ndjson"]),
    help="A drawn tree (default on a terminal), rows of session, parent and turn "
    "(default in a pipe), or JSON.",
)
@click.option("--json", "fmt", flag_value="json", help="Same as --format json.")
@storage_option
@click.pass_context
def tree(ctx: click.Context, session_ids: list[str], fmt: str | None) -> None:
    """Show which session was forked from which, and after which turn.

    With ID, only its family: its oldest ancestor still stored and every
    session forked from that. Forks made by chat --from, the serve APIs and
    imported branches (ID.branch-N) all count. A fork whose parent is gone
    (deleted or renamed) is a root that still names it.

    \b
    Examples:
      foliko sessions tree
      foliko sessions tree s1 --json
    """
    if len(session_ids) > 1:
        raise UsageError("name at most one session: foliko sessions tree [ID]")
    rows = open_facade(ctx).session_tree(session_ids[0] if session_ids else None)
    for row in rows:
        if row.get("error"):
            note(damaged(row["session_id"], row["error"]))
    fmt = fmt or ("tree" if sys.stdout.isatty() else "tsv")
    if fmt == "tree":
        if rows:
            click.echo("\n".join(drawn(rows)))
        return
    emit_rows(rows, COLUMNS, fmt)
