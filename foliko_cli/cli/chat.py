"""``foliko chat``: one turn in a named session."""

from __future__ import annotations

import sys

import click

from foliko_cli.cli.app import open_facade
from foliko_cli.cli.output import emit_json
from foliko_cli.errors import UsageError


def read_stdin() -> str | None:
    """Piped input, or None when stdin is a terminal."""
    stream = sys.stdin.buffer
    if stream.isatty():
        return None
    data = stream.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"stdin is not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "convert it first, e.g. with iconv -t UTF-8"
        ) from None


def compose_message(argument: str | None, piped: str | None) -> str:
    """The argument, the piped text, or both (the piped text follows as context)."""
    parts = [p for p in (argument, piped) if p is not None and p.strip()]
    if not parts:
        raise UsageError(
            'no message: pass it as an argument (foliko chat -s ID "hi") or pipe it on stdin'
        )
    return "\n\n".join(parts)


@click.command()
@click.argument("message", required=False)
@click.option(
    "-s",
    "--session",
    "session_id",
    required=True,
    metavar="ID",
    help="Session name; created when new, continued otherwise.",
)
@click.option(
    "-m", "--model", metavar="MODEL", help="Model as provider:model, e.g. echo. Env: FOLIKO_MODEL."
)
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
    help="Print one JSON object with the reply, ids, step count and usage.",
)
@click.pass_context
def chat(
    ctx: click.Context,
    message: str | None,
    session_id: str,
    model: str | None,
    timeout: float | None,
    as_json: bool,
) -> None:
    """Run one chat turn in session ID and print the reply.

    MESSAGE comes from the argument, from stdin when it is not a terminal,
    or both (stdin is appended after the argument).

    \b
    Examples:
      foliko chat --session s1 "hi"
      git diff | foliko chat -s review "Summarise this change"
    """
    text = compose_message(message, read_stdin())
    facade = open_facade(ctx, model=model, timeout=timeout)
    result = facade.chat(session_id, text)
    if as_json:
        emit_json(result.to_dict())
    else:
        click.echo(result.message)
