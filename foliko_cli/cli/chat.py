"""``foliko chat``: one turn in a named session, or an interactive loop."""

from __future__ import annotations

import sys

import click

from foliko_cli.cli.app import open_facade
from foliko_cli.cli.output import emit_json, note
from foliko_cli.cli.params import complete_session_ids, session_option, var_option
from foliko_cli.errors import FolikoError, Interrupted, UsageError

STDIN_GRACE = 2.0


def stdin_is_terminal() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


def _stdin_sends_nothing(grace: float) -> bool:
    """True when stdin is a pipe or socket that stays silent for ``grace`` seconds.

    With a MESSAGE argument, piped text is optional context: a process started
    with an inherited stdin that nobody writes to or closes must not hang.
    Files and /dev/null are always read; so is any stream without a file
    descriptor.
    """
    import os
    import select
    import stat

    try:
        fd = sys.stdin.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode) and not stat.S_ISSOCK(os.fstat(fd).st_mode):
            return False
        readable, _, _ = select.select([fd], [], [], grace)
    except (AttributeError, OSError, ValueError):
        return False
    return not readable


def read_stdin(*, optional: bool = False) -> str | None:
    """Piped input, or None when stdin is a terminal or absent.

    ``optional`` (a MESSAGE was given): a pipe that sends nothing, not even
    end-of-file, within STDIN_GRACE seconds is left unread.
    """
    if sys.stdin is None or stdin_is_terminal():
        return None
    if optional and _stdin_sends_nothing(STDIN_GRACE):
        return None
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"stdin is not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "convert it first, e.g. with iconv -t UTF-8"
        ) from None


def compose_message(argument: str | None, piped: str | None) -> str | None:
    """The argument, the piped text, or both (the piped text follows as context)."""
    parts = [p for p in (argument, piped) if p is not None and p.strip()]
    return "\n\n".join(parts) if parts else None


@click.command()
@click.argument("message", required=False)
@session_option("Session name; created when new, continued otherwise.", required=False)
@click.option(
    "-c",
    "--continue",
    "continue_latest",
    is_flag=True,
    help="Continue the most recently active session (instead of -s).",
)
@click.option(
    "-m", "--model", metavar="MODEL", help="Model as provider:model, e.g. echo. Env: FOLIKO_MODEL."
)
@click.option(
    "-a",
    "--agent",
    metavar="NAME",
    help="Run the turn as agent NAME from the config ([agents.NAME]).",
)
@click.option("--new", is_flag=True, help="Start the session over (history and variables).")
@click.option(
    "--from",
    "fork_from",
    metavar="SRC",
    shell_complete=complete_session_ids,
    help="Fork SRC into this (new) session, then run the turn.",
)
@click.option(
    "--turns",
    type=click.IntRange(min=0),
    metavar="N",
    help="With --from: copy only SRC's first N turns (a turn is a user message and its replies).",
)
@click.option(
    "--regenerate",
    is_flag=True,
    help="Replace the session's last turn by a new answer to its message (give no MESSAGE).",
)
@click.option(
    "--system", metavar="TEXT", help="System prompt for this session; kept for its later turns."
)
@var_option("Set a session variable before the turn (repeatable; V is JSON or text).")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="Give up on the turn after this many seconds (default 120).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON object with the reply, ids, step count and usage "
    "(with --stream: NDJSON events, the last one 'done').",
)
@click.option(
    "--stream/--no-stream",
    default=None,
    help="Write the reply as it arrives (default: on a terminal).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print what would be sent to the model as JSON; call nothing, save nothing.",
)
@click.pass_context
def chat(
    ctx: click.Context,
    message: str | None,
    session_id: str | None,
    continue_latest: bool,
    turns: int | None,
    regenerate: bool,
    model: str | None,
    agent: str | None,
    new: bool,
    fork_from: str | None,
    system: str | None,
    variables: tuple[tuple[str, object], ...],
    timeout: float | None,
    as_json: bool,
    stream: bool | None,
    dry_run: bool,
) -> None:
    """Run one chat turn in session ID and print the reply.

    MESSAGE comes from the argument, from stdin when it is not a terminal,
    or both (stdin is appended after the argument; with an argument, a pipe
    that sends nothing, not even end-of-file, for 2 seconds is ignored). With no message on a
    terminal, starts an interactive loop that saves after every turn
    (Ctrl-D ends it, Ctrl-C cancels the running turn).

    \b
    Examples:
      foliko chat --session s1 "hi"
      git diff | foliko chat -s review "Summarise this change"
      foliko chat -s s2 --from s1 "try another way"
    """
    if continue_latest == (session_id is not None):
        raise UsageError(
            "name the session with -s/--session or continue the latest with -c/--continue "
            "(one of them)"
        )
    if turns is not None and fork_from is None:
        raise UsageError("--turns needs --from SRC: it says how many of SRC's turns to copy")
    text = (
        None if regenerate else compose_message(message, read_stdin(optional=message is not None))
    )
    if regenerate and message is not None:
        raise UsageError("--regenerate reuses the last turn's message; give no MESSAGE")
    facade = open_facade(ctx, model=model, timeout=timeout)
    if continue_latest:
        session_id = facade.latest_session_id()
    options = {
        "model": model,
        "new": new,
        "fork_from": fork_from,
        "variables": dict(variables),
        "system": system,
        "agent": agent,
        "turns": turns,
        "regenerate": regenerate,
    }
    if text is None and not regenerate:
        if not stdin_is_terminal():
            raise UsageError(
                'no message: pass it as an argument (foliko chat -s ID "hi") or pipe it on stdin'
            )
        if dry_run or as_json:
            raise UsageError("--dry-run and --json need a message; pass MESSAGE")
        interactive(facade, session_id, options)
        return
    if dry_run:
        emit_json(facade.dry_run(session_id, text, **options), pretty=True)
        return
    if stream is None:
        stream = sys.stdout.isatty() and not as_json
    if not stream:
        result = facade.chat(session_id, text, **options)
        emit_json(result.to_dict()) if as_json else click.echo(result.message)
    elif as_json:
        result = facade.chat(session_id, text, on_event=emit_json, **options)
        emit_json({"type": "done", "result": result.to_dict()})
    else:
        facade.chat(session_id, text, on_event=write_delta, **options)
        click.echo()


def write_delta(event: dict) -> None:
    if event["type"] == "delta":
        sys.stdout.write(event["text"])
        sys.stdout.flush()


def interactive(facade, session_id: str, options: dict) -> None:
    """Read a line, run a turn, print the reply, until end of input."""
    note(f"session {session_id!r}; Ctrl-D to end, Ctrl-C cancels a running turn")
    while True:
        try:
            line = input("> ")
        except EOFError:
            click.echo(err=True)
            return
        except KeyboardInterrupt:
            click.echo(err=True)
            continue
        if not line.strip():
            continue
        try:
            facade.chat(session_id, line, on_event=write_delta, **options)
            click.echo()
        except (KeyboardInterrupt, Interrupted):
            click.echo()
            note("turn cancelled; nothing saved")
            continue
        except FolikoError as exc:
            note(f"error: {exc}")
            continue
        options = {**options, "new": False, "fork_from": None, "variables": {}, "turns": None}
