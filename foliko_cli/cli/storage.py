"""``foliko storage``: migrate between backends, check, info."""

from __future__ import annotations

import sys

import click

from foliko_cli.cli.app import check_home
from foliko_cli.cli.output import data_format_option, emit_json, error, note, progress
from foliko_cli.cli.params import storage_option
from foliko_cli.config import load_settings
from foliko_cli.errors import ExitCode


def _open(spec: str | None):
    """The backend ``spec`` names; None means the configured one (--storage, env)."""
    from foliko_cli.storage import open_storage

    settings = load_settings(storage=spec)
    check_home(settings)
    return open_storage(settings.storage, settings.home)


def _run(coroutine):
    import asyncio

    return asyncio.run(coroutine)


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
def migrate(source: str, destination: str, dry_run: bool, overwrite: bool, fmt: str) -> None:
    """Copy every session from SRC to DST (backend names or URLs), verified.

    Safe to re-run: sessions already in DST with the same content are skipped.
    The source is never changed. Exits 3 when any session failed.

    \b
    Example:
      foliko storage migrate json sqlite
      foliko storage migrate sqlite:////srv/old.db json:////srv/sessions --dry-run
    """
    from foliko_cli.storage.migrate import migrate as run_migration

    src, dst = _open(source), _open(destination)

    async def work():
        try:
            total = len(await src.list()) if sys.stderr.isatty() else 0
            with progress(total, "migrating") as advance:
                return await run_migration(
                    src, dst, dry_run=dry_run, overwrite=overwrite, progress=advance
                )
        finally:
            await src.close()
            await dst.close()

    as_json = fmt == "json"
    report = _run(work())
    for session_id, reason in report.failed:
        named = reason.startswith(f"session {session_id!r}")
        error(reason if named else f"session {session_id!r}: {reason}")
    if as_json:
        emit_json(report.to_dict())
    else:
        verb = "would copy" if dry_run else "copied"
        click.echo(
            f"{verb} {len(report.copied)} of {report.total} sessions from {src.location} "
            f"to {dst.location}; {len(report.skipped)} already there, "
            f"{len(report.failed)} failed"
        )
    if not report.ok:
        raise click.exceptions.Exit(ExitCode.STORAGE)


@storage.command()
@click.option("--repair", is_flag=True, help="Move unreadable records aside (never deletes).")
@data_format_option
@storage_option
@click.pass_context
def check(ctx: click.Context, repair: bool, fmt: str) -> None:
    """Report corrupt or unreadable sessions; exit 3 if any remain.

    \b
    Example:
      foliko storage check && foliko storage check --repair
    """
    as_json = fmt == "json"
    adapter = _open(ctx.obj.get("storage"))

    async def work():
        try:
            problems = await adapter.check()
            moved = [await adapter.quarantine(p) for p in problems] if repair else []
            return problems, moved
        finally:
            await adapter.close()

    problems, moved = _run(work())
    if as_json:
        emit_json(
            [
                {
                    "session_id": p.session_id,
                    "where": p.where,
                    "reason": p.reason,
                    **({"moved_to": moved[i]} if repair else {}),
                }
                for i, p in enumerate(problems)
            ]
        )
    for i, problem in enumerate(problems):
        if repair:
            note(f"moved {problem.session_id!r} aside to {moved[i]} ({problem.reason})")
        elif not as_json:
            click.echo(f"{problem.session_id}\t{problem.where}\t{problem.reason}")
    if not as_json and not repair:
        note(f"{len(problems)} unreadable session(s) in {adapter.location}")
    if problems and not repair:
        raise click.exceptions.Exit(ExitCode.STORAGE)


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
    adapter = _open(ctx.obj.get("storage"))

    async def work():
        try:
            return await adapter.info()
        finally:
            await adapter.close()

    details = _run(work())
    if fmt == "json":
        emit_json(details)
    else:
        for key, value in details.items():
            click.echo(f"{key:<15} {value}")
