"""``foliko sessions trash list|empty`` and ``foliko sessions restore``, and the
line that tells what a clear, rewind or ``--new`` did and how to undo it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from foliko_cli.cli.app import open_facade
from foliko_cli.cli.output import emit_json, emit_rows, format_ms, list_options, note
from foliko_cli.cli.params import Duration, storage_option
from foliko_cli.common.clock import format_duration
from foliko_cli.errors import SessionExistsError, UsageError

if TYPE_CHECKING:
    from foliko_cli.service.facade import Foliko
    from foliko_cli.service.values import TurnResult

RESTORE_AS = "foliko sessions restore {name} --as NEW"


def trash_kept(facade: Foliko) -> str | None:
    """How long the trash keeps things (``30d``), or None when it is off."""
    return format_duration(facade.trash_keep) if facade.trash_keep else None


def note_reset(facade: Foliko, session_id: str, did: str) -> None:
    """After a command that rewrote a session: what it did, and the way back."""
    if trash_kept(facade):
        note(
            f"session {session_id!r} {did}; the old history is in the trash: "
            + RESTORE_AS.format(name=_shell_word(session_id))
        )
    else:
        note(f"session {session_id!r} {did}; the trash is off, so the old history is gone")


def note_started_over(facade: Foliko, session_id: str, result: TurnResult, *, latest: bool) -> None:
    """After a ``chat --new`` turn: which session it reset (``-c`` picks one). With
    the trash off, only ``-c`` says so: a named session may have been new."""
    if result.trashed is not None or (latest and not trash_kept(facade)):
        note_reset(facade, session_id, "started over")


def _shell_word(text: str) -> str:
    import shlex

    return shlex.quote(text)


@click.group()
def trash() -> None:
    """What delete, prune, clear, rewind and chat --new removed, for a while.

    The trash keeps each for the [trash] keep setting (FOLIKO_TRASH_KEEP,
    default 30d; 0 turns it off), then drops it. Get one back with
    foliko sessions restore.

    \b
    Examples:
      foliko sessions trash list
      foliko sessions trash empty --older-than 7d
    """


@trash.command("list")
@list_options
@storage_option
@click.pass_context
def list_trash(ctx: click.Context, fmt: str) -> None:
    """What the trash holds, latest first: an id, the session's name, why and
    when it went, and when it expires.

    \b
    Example:
      foliko sessions trash list --json
    """
    facade = open_facade(ctx)
    keep = facade.trash_keep
    rows = [
        {
            "id": entry.entry_id,
            "session_id": entry.session_id,
            "reason": entry.reason,
            "removed_at": entry.removed_at,
            "expires_at": entry.expires_at(keep),
            "message_count": entry.message_count,
            "last_used": entry.last_used,
        }
        for entry in facade.list_trash()
    ]
    emit_rows(
        rows,
        {
            "id": "id",
            "session_id": "session",
            "reason": "by",
            "removed_at": "removed",
            "message_count": "messages",
            "expires_at": "expires",
        },
        fmt,
        human={"removed_at": format_ms, "expires_at": format_ms},
    )


@trash.command("empty")
@click.option(
    "--older-than",
    "older_than",
    type=Duration(),
    metavar="DURATION",
    help="Only what was removed at least this long ago (e.g. 7d).",
)
@click.option("--json", "as_json", is_flag=True, help="Print {emptied: [ids...]} as JSON.")
@storage_option
@click.pass_context
def empty(ctx: click.Context, older_than: int | None, as_json: bool) -> None:
    """Drop what the trash holds, for good (no prompt).

    \b
    Example:
      foliko sessions trash empty --older-than 7d
    """
    gone = open_facade(ctx).empty_trash(older_than_ms=older_than)
    if as_json:
        emit_json({"emptied": [entry.entry_id for entry in gone]})
    note(f"emptied {len(gone)} session(s) from the trash")


@click.command()
@click.argument("name", metavar="ID")
@click.option("--as", "as_id", metavar="NEW", help="Restore it under this name instead.")
@click.option("--json", "as_json", is_flag=True, help="Print {restored: ID, as: NAME} as JSON.")
@storage_option
@click.pass_context
def restore(ctx: click.Context, name: str, as_id: str | None, as_json: bool) -> None:
    """Bring a session back from the trash, as it was when it went.

    ID is the session's name (its latest removal) or an id from
    foliko sessions trash list. A name that is taken is exit 2: restore it
    under another with --as NEW.

    \b
    Examples:
      foliko sessions restore work
      foliko sessions restore work --as work-before
    """
    try:
        entry = open_facade(ctx).restore_session(name, as_id=as_id)
    except SessionExistsError as exc:
        raise UsageError(
            f"session {exc.session_id!r} exists; nothing restored: restore it under "
            f"another name: " + RESTORE_AS.format(name=_shell_word(name))
        ) from None
    target = as_id or entry.session_id
    if as_json:
        emit_json({"restored": entry.entry_id, "session_id": entry.session_id, "as": target})
    note(f"restored {entry.session_id!r} ({entry.message_count} message(s)) as {target!r}")
