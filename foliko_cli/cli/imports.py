"""``foliko sessions export`` and ``sessions import``: other formats in and out.

Loaded only when one of them runs (``sessions`` names them lazily), so that
``sessions list`` never imports the formats (P1).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import click

from foliko_cli.cli.app import open_facade
from foliko_cli.cli.output import emit_json, error, note, progress
from foliko_cli.cli.params import json_flag, sessions_argument, storage_option
from foliko_cli.cli.stdout import file_failure
from foliko_cli.errors import ExitCode, UsageError
from foliko_cli.service.library import (
    EXPORT_FORMATS,
    IMPORT_FORMATS,
    LEFT_OUT_BRANCH,
    LEFT_OUT_FORK,
    Imported,
    read_import,
    writer,
)

if TYPE_CHECKING:
    from foliko_cli.messages.record import SessionRecord


def read_source(source: str, fmt: str | None, main_only: bool, branches: str) -> Imported:
    stdin = sys.stdin.buffer.read() if source == "-" else None
    return read_import(source, fmt, main_only=main_only, branches=branches, stdin=stdin)


def left_out(imported: Imported) -> str:
    """What the summary adds: what was left out on purpose, when anything was."""
    if not imported.left_out:
        return ""
    why = {LEFT_OUT_BRANCH: " (--branches all imports them)", LEFT_OUT_FORK: " (--main-only)"}
    counts = ", ".join(
        f"{count} {what}" + ("" if imported.main_only else why.get(what, ""))
        for what, count in sorted(imported.left_out.items())
    )
    return f"; left out {counts}"


def _write_output(path: Path | None, lines: Iterable[str]) -> None:
    if path is None:
        for line in lines:
            click.echo(line)
        return
    from foliko_cli.common.files import replaced

    try:
        with replaced(path) as handle:
            for line in lines:
                handle.write(line + "\n")
    except OSError as exc:
        raise file_failure(path, exc) from None


@click.command()
@sessions_argument(many=True)
@click.option("--all", "everything", is_flag=True, help="Export every session.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(EXPORT_FORMATS),
    default="foliko",
    show_default=True,
    help="foliko (json): a JSON array that imports back the same; ndjson: the same, "
    "one session a line; markdown: transcripts (not importable); openai: Responses "
    "input items; chatgpt: ChatGPT's conversations.json.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write to this file (atomically) instead of stdout.",
)
@storage_option
@click.pass_context
def export(
    ctx: click.Context,
    session_ids: list[str],
    everything: bool,
    fmt: str,
    output: Path | None,
) -> None:
    """Export sessions: in foliko's own format, which imports back losslessly
    (export, import into an empty store, export again: the same bytes), as
    Markdown, as OpenAI Responses input items or as a ChatGPT export.

    \b
    Examples:
      foliko sessions export s1 s2 > backup.json
      foliko sessions export --all --format ndjson -o all.ndjson
      foliko sessions export s1 --format openai | jq '.[0].input'
      foliko sessions export --all --format chatgpt -o conversations.json
    """
    if everything == bool(session_ids):
        raise UsageError("name the sessions to export, or pass --all (not both)")
    write = writer(fmt)
    facade = open_facade(ctx)
    ids = facade.session_ids() if everything else session_ids
    with progress(len(ids) if everything else 0, "exporting") as advance:

        def counted() -> Iterator[SessionRecord]:
            for record in facade.export_sessions(ids, skip_missing=everything):
                yield record
                advance(1)

        lines = list(write(counted()))
    _write_output(output, lines)


@click.command("import")
@click.argument("source", metavar="FILE|DIR|-")
@click.option(
    "--on-conflict",
    type=click.Choice(["skip", "replace", "fail"]),
    default="skip",
    show_default=True,
    help="When a session exists with other content: keep it, replace it, or "
    "import nothing and exit 2.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(IMPORT_FORMATS),
    default=None,
    help="The tool that wrote SOURCE; told from the data when left out.",
)
@click.option(
    "--branches",
    type=click.Choice(["current", "all"]),
    default="current",
    show_default=True,
    help="current: only the branch each conversation showed (the others are counted); all: "
    "each other branch too, as a session of its own messages forked from the line it leaves.",
)
@click.option(
    "--main-only",
    is_flag=True,
    help="Only the branch each conversation showed, and no conversation a tool forked "
    "from another one.",
)
@json_flag(
    "Print {imported: [...], unchanged: [...], skipped: [...], unreadable: [...]} on stdout."
)
@storage_option
@click.pass_context
def import_(
    ctx: click.Context,
    source: str,
    on_conflict: str,
    fmt: str | None,
    branches: str,
    main_only: bool,
    as_json: bool,
) -> None:
    """Import sessions from foliko's export or from another tool's history.

    SOURCE is a file, a directory (every file of the format under it) or - for
    stdin. Its format is told from the data unless --format names it: foliko
    (sessions export), chatgpt (conversations.json of a ChatGPT data export),
    claude (conversations.json of a Claude.ai data export), claude-code
    (~/.claude/projects/), codex (~/.codex/sessions/), llm (its logs.db),
    openwebui (a chat export) or librechat (a conversation's JSON export).
    A conversation becomes a session named by its id; with --branches all,
    each other branch of it becomes a session ID.branch-N of its own messages,
    forked from the line it leaves. A message over 16 MiB is named and its
    conversation left out (in foliko's own export: nothing is imported).

    Idempotent: sessions already stored with the same content are left alone.
    The summary goes to stderr (to stdout as JSON with --json). A conversation
    that cannot be read is reported, the others are imported, and the exit
    status is 3.

    \b
    Examples:
      foliko sessions import backup.json --on-conflict replace
      foliko sessions import conversations.json
      foliko sessions import ~/.claude/projects/
      foliko sessions import --format llm "$(llm logs path)"
    """
    if main_only and branches == "all":
        raise UsageError("--main-only leaves out the branches --branches all asks for; drop one")
    imported = read_source(source, fmt, main_only, branches)
    records = imported.records
    with progress(len(records), "importing") as advance:
        report = open_facade(ctx).import_sessions(
            records, on_conflict=on_conflict, progress=advance
        )
    if report.conflicts:
        raise UsageError(
            f"{len(report.conflicts)} session(s) exist with other content "
            f"(first: {report.conflicts[0]!r}); nothing imported: "
            "rerun with --on-conflict skip or replace"
        )
    for session_id in report.skipped:
        note(f"skipped {session_id!r}: exists with other content")
    for where, reason in imported.unreadable:
        error(f"could not read {where}: {reason}")
    if as_json:
        emit_json(
            {
                "imported": list(report.imported),
                "unchanged": list(report.unchanged),
                "skipped": list(report.skipped),
                "unreadable": [{"source": w, "reason": r} for w, r in imported.unreadable],
            }
        )
    unreadable = f", could not read {len(imported.unreadable)}" if imported.unreadable else ""
    note(
        f"imported {len(report.imported)}, unchanged {len(report.unchanged)}, "
        f"skipped {len(report.skipped)}{unreadable}{left_out(imported)}"
    )
    if imported.unreadable:
        raise click.exceptions.Exit(ExitCode.STORAGE)
