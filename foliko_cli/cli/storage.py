"""``foliko storage``: create a store, migrate between backends, check, info."""

from __future__ import annotations

import sys
from typing import Any

import click

from foliko_cli.cli.app import open_facade, settings_for
from foliko_cli.cli.output import data_format_option, deferred_progress, emit_json, error, note
from foliko_cli.cli.params import storage_option
from foliko_cli.errors import ExitCode
from foliko_cli.service.library import ProblemKind, init_place


@click.group()
def storage() -> None:
    """Move sessions between backends and inspect a backend.

    \b
    Example:
      foliko storage migrate json sqlite
    """


@storage.command()
@click.argument("source", metavar="SRC")
@click.argument("destination", metavar="DST")
@click.option("--dry-run", is_flag=True, help="Report what would be copied; write nothing.")
@click.option(
    "--overwrite", is_flag=True, help="Replace sessions that exist in DST with other content."
)
@data_format_option
@click.pass_context
def migrate(
    ctx: click.Context, source: str, destination: str, dry_run: bool, overwrite: bool, fmt: str
) -> None:
    """Copy every session from SRC to DST (backend names or URLs), verified.

    Safe to re-run: sessions already in DST with the same content are skipped.
    The source is never changed. Exits 3 when any session failed.

    \b
    Example:
      foliko storage migrate json sqlite
      foliko storage migrate sqlite:////srv/old.db json:////srv/sessions --dry-run
    """
    facade = open_facade(ctx, storage="memory")
    with deferred_progress("migrating") as (start, advance):
        report = facade.migrate(
            source,
            destination,
            dry_run=dry_run,
            overwrite=overwrite,
            progress=advance,
            on_total=start if sys.stderr.isatty() else None,
        )
    as_json = fmt == "json"
    for session_id, reason in report.failed:
        named = reason.startswith(f"session {session_id!r}")
        error(reason if named else f"session {session_id!r}: {reason}")
    if report.differing:
        note(f"rerun with --overwrite to replace the {len(report.differing)} that differ")
    if as_json:
        emit_json(report.to_dict())
    else:
        verb = "would copy" if dry_run else "copied"
        click.echo(
            f"{verb} {len(report.copied)} of {report.total} sessions from "
            f"{report.source} to {report.target}; {len(report.skipped)} already there, "
            f"{len(report.failed)} failed"
        )

    if not report.ok:
        raise click.exceptions.Exit(ExitCode.STORAGE)


@storage.command()
@click.option(
    "--repair", is_flag=True, help="Move unreadable and damaged records aside (never deletes)."
)
@data_format_option
@storage_option
@click.pass_context
def check(ctx: click.Context, repair: bool, fmt: str) -> None:
    """Report unreadable or damaged sessions; exit 3 if any remain.

    A session is damaged when what is stored does not add up: a message
    missing from the middle, a count that is not its messages', metadata
    gone while messages remain. --repair moves each aside (recoverable),
    goes on to the end even when one fails, and reports everything it did.
    Also reported: a copy of a session that a forget removed (a trash
    entry, a server's journal, made before it), which --repair removes, and
    a search index holding messages that are gone, which --repair rebuilds.

    \b
    Example:
      foliko storage check && foliko storage check --repair
    """
    as_json = fmt == "json"
    facade = open_facade(ctx)
    found = facade.check(repair=repair)
    problems = [item.problem for item in found]
    if as_json:
        emit_json(
            [
                {
                    "session_id": p.session_id,
                    "kind": p.kind,
                    "where": p.where,
                    "reason": p.reason,
                    **({"moved_to": moved} if repair else {}),
                    **({"failure": failure} if failure else {}),
                }
                for p, moved, failure in found
            ]
        )
    for problem, moved, failure in found:
        if not repair:
            if not as_json:
                click.echo(f"{problem.session_id}\t{problem.where}\t{problem.reason}")
        elif failure:
            error(f"could not repair {problem.session_id or problem.where!r}: {failure}")
        elif problem.kind == ProblemKind.STORE:
            error(
                f"{problem.where}: {problem.reason}; this cannot be repaired in place: "
                "restore it from a backup"
            )
        elif problem.stray:
            note(f"stray file {(moved or '').removeprefix('nowhere: ')}")
        elif problem.kind in (ProblemKind.FORGOTTEN, ProblemKind.INDEX) and moved:
            note(f"{moved.removeprefix('nowhere: ')} ({problem.reason})")
        elif moved is None:
            note(f"left {problem.session_id!r} as it is: it reads fine now")
        else:
            note(f"moved {problem.session_id!r} aside to {moved} ({problem.reason})")
    unreadable = [p for p in problems if not p.stray]
    failed = [r for r in found if r.failure]
    if not as_json and not repair:
        stray = len(problems) - len(unreadable)
        litter = f"; {stray} stray file(s) that --repair removes" if stray else ""
        note(f"{len(unreadable)} damaged session(s) in {facade.storage.location}{litter}")
    beyond_repair = [p for p in problems if p.kind == ProblemKind.STORE]
    if (unreadable and not repair) or beyond_repair or failed:
        raise click.exceptions.Exit(ExitCode.STORAGE)


@storage.command()
@click.argument("location", metavar="URL", required=False)
@data_format_option
@click.pass_context
def init(ctx: click.Context, location: str | None, fmt: str) -> None:
    """Create an empty store at URL (default: the one --storage names).

    Makes the missing directories (owner-only), the database file or the
    JSON directory, and the schema; then shows it as `storage info` does.
    A store that exists is left as it is. Other commands refuse a store in
    a directory that does not exist: a mistyped path is never created.

    \b
    Example:
      foliko storage init sqlite:////srv/foliko/sessions.db
    """
    settings = settings_for(ctx)
    spec = location or settings.storage
    init_place(spec, settings.home)
    _show(open_facade(ctx, storage=spec).info(), fmt)


@storage.command()
@data_format_option
@storage_option
@click.pass_context
def info(ctx: click.Context, fmt: str) -> None:
    """Show the backend, its location and how much it holds.

    \b
    Example:
      foliko --storage json storage info --json
    """
    _show(open_facade(ctx).info(), fmt)


def _show(details: dict[str, Any], fmt: str) -> None:
    if fmt == "json":
        emit_json(details)
    else:
        for key, value in details.items():
            if key != "warnings":
                click.echo(f"{key:<15} {value}")
    for warning in details.get("warnings", ()) if fmt != "json" else ():
        note(f"warning: {warning}")
