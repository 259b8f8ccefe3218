"""``foliko sessions search`` and ``foliko usage``: reading months of history."""

from __future__ import annotations

import click

from foliko_cli.cli.app import open_facade
from foliko_cli.cli.output import damaged, emit_json, emit_rows, format_ms, format_option, note
from foliko_cli.cli.params import Duration, complete_session_ids
from foliko_cli.common.clock import now_ms
from foliko_cli.errors import CorruptSessionError


@click.command("search")
@click.argument("query")
@click.option(
    "--session",
    "session_id",
    metavar="ID",
    shell_complete=complete_session_ids,
    help="Only this session.",
)
@click.option(
    "--role",
    type=click.Choice(["user", "assistant", "system", "tool"]),
    help="Only messages of this role.",
)
@click.option(
    "--since",
    type=Duration(),
    metavar="DURATION",
    help="Only messages written within this long (e.g. 7d, 12h).",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Show at most this many.",
)
@format_option
@click.pass_context
def search(
    ctx: click.Context,
    query: str,
    session_id: str | None,
    role: str | None,
    since: int | None,
    limit: int,
    fmt: str,
) -> None:
    """Find messages by their text, best match first.

    QUERY is words (a message must hold all of them), "exact phrases" and
    prefixes (deplo* finds deploy, deployed). Case does not matter; accents
    do. Words are runs of letters and digits, so text written without spaces
    (Chinese, Japanese) is matched by prefix: 東京* finds 東京都.

    SQLite and PostgreSQL search a full-text index (ranked by bm25 and
    ts_rank); the json, memory and redis backends read every session. A
    damaged session is left out and named on stderr.

    \b
    Examples:
      foliko sessions search deploy
      foliko sessions search '"connection refused"' --since 7d --role tool
      foliko sessions search 'kube* timeout' --json | jq '.[0].session_id'
    """
    cutoff = now_ms() - since if since is not None else None
    reported: set[str] = set()

    def left_out(damage: CorruptSessionError) -> None:
        if damage.session_id not in reported:
            reported.add(damage.session_id)
            note(damaged(damage.session_id, damage.reason, "left out of the search"))

    hits = open_facade(ctx).search(
        query, session_id=session_id, role=role, since=cutoff, limit=limit, on_unreadable=left_out
    )
    rows = [hit.to_dict() for hit in hits]
    emit_rows(
        rows,
        {
            "session_id": "session",
            "seq": "seq",
            "role": "role",
            "created_at": "created",
            "marked": "match",
        },
        fmt,
        human={"created_at": format_ms},
    )


@click.command("usage")
@click.option(
    "--since",
    type=Duration(),
    metavar="DURATION",
    help="Only replies written within this long (e.g. 7d, 12h).",
)
@click.option(
    "--by",
    type=click.Choice(["session", "model", "day"]),
    default="session",
    show_default=True,
    help="One row per session, per model, or per day (UTC).",
)
@format_option
@click.pass_context
def usage(ctx: click.Context, since: int | None, by: str, fmt: str) -> None:
    """Tokens (and cost, where recorded) of the model's replies, summed.

    Each reply counts under the model that wrote it, so a session that
    switched models is split correctly with --by model. The last row is the
    total; --json prints {by, rows, total}.

    \b
    Examples:
      foliko usage --since 7d
      foliko usage --by model --json
    """
    cutoff = now_ms() - since if since is not None else None
    report = open_facade(ctx).usage(since=cutoff, by=by)
    if fmt == "json":
        emit_json(report)
        return
    columns = {by: by}
    for row in [*report["rows"], report["total"]]:
        columns.update({key: key.replace("_", " ") for key in row if key != by})
    emit_rows([*report["rows"], {by: "TOTAL", **report["total"]}], columns, fmt)
