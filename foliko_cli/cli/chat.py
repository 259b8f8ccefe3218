"""``foliko chat``: one turn in a named session, or an interactive loop."""

from __future__ import annotations

import sys

import click

from foliko_cli.cli.app import open_facade
from foliko_cli.cli.output import emit_json, note
from foliko_cli.cli.params import KeyValue, complete_session_ids, session_option, var_option
from foliko_cli.errors import FolikoError, UsageError

STDIN_GRACE = 2.0


class ModelOption(KeyValue):
    """``-o KEY=VALUE``: VALUE as JSON when it parses (0.2, true, ["END"]), else text."""

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        key, sep, _ = str(value).partition("=")
        if not sep or not key.strip():
            self.fail(f"{value!r} is not KEY=VALUE; write e.g. -o temperature=0.2", param, ctx)
        key, parsed = super().convert(value, param, ctx)
        if key == "max_tokens" and (
            not isinstance(parsed, int) or isinstance(parsed, bool) or parsed < 1
        ):
            self.fail(f"max_tokens must be a positive whole number, not {parsed!r}", param, ctx)
        return key, parsed


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
@session_option("Session name; created when new, continued otherwise.")
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
    "-o",
    "--option",
    "model_options",
    type=ModelOption(),
    multiple=True,
    metavar="KEY=VALUE",
    help="A model option for this turn: temperature, top_p, seed, max_tokens, stop... "
    "(repeatable; VALUE is JSON or text).",
)
@click.option(
    "--schema",
    metavar="FILE|JSON",
    help="A JSON Schema the reply must follow (structured output); the reply is "
    "printed whole once it is checked, and an invalid one fails the turn.",
)
@click.option(
    "-u",
    "--usage",
    "show_usage",
    is_flag=True,
    help="Print the turn's tokens and time (and cost, with prices) on stderr.",
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
    session_id: str,
    model: str | None,
    agent: str | None,
    new: bool,
    fork_from: str | None,
    system: str | None,
    variables: tuple[tuple[str, object], ...],
    timeout: float | None,
    as_json: bool,
    stream: bool | None,
    model_options: tuple[tuple[str, object], ...],
    schema: str | None,
    show_usage: bool,
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
    reply_schema = None
    if schema is not None:
        from foliko_cli.models.schema import load_schema

        reply_schema = load_schema(schema)
    text = compose_message(message, read_stdin(optional=message is not None))
    facade = open_facade(ctx, model=model, timeout=timeout)
    options = {
        "model": model,
        "new": new,
        "fork_from": fork_from,
        "variables": dict(variables),
        "system": system,
        "agent": agent,
        "options": dict(model_options),
        "schema": reply_schema,
    }
    if text is None:
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
    if stream is None or reply_schema is not None:
        stream = sys.stdout.isatty() and not as_json and reply_schema is None
    if not stream:
        result = facade.chat(session_id, text, **options)
        emit_json(result.to_dict()) if as_json else click.echo(result.message)
    elif as_json:
        result = facade.chat(session_id, text, on_event=emit_json, **options)
        emit_json({"type": "done", "result": result.to_dict()})
    else:
        result = facade.chat(session_id, text, on_event=write_delta, **options)
        click.echo()
    if show_usage:
        click.echo(usage_line(result), err=True)


def usage_line(result) -> str:
    """``N input, M output tokens, T s`` (and the cost when the model has prices)."""
    usage = result.usage
    line = (
        f"{usage.get('input_tokens', 0):,} input, {usage.get('output_tokens', 0):,} output "
        f"tokens, {result.duration_ms / 1000:.1f} s"
    )
    return f"{line}, ${result.cost:.6f}" if result.cost is not None else line


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
            if options.get("schema") is None:
                facade.chat(session_id, line, on_event=write_delta, **options)
                click.echo()
            else:
                click.echo(facade.chat(session_id, line, **options).message)
        except KeyboardInterrupt:
            click.echo()
            note("turn cancelled; nothing saved")
            continue
        except FolikoError as exc:
            note(f"error: {exc}")
            continue
        options = {**options, "new": False, "fork_from": None, "variables": {}}
