"""The interactive loop of ``foliko chat -s ID`` on a terminal.

Lines are edited with readline, which keeps a history file (mode 0600) and
takes a bracketed paste as one input, so a pasted multi-line text is one
message. ``/multi`` (ended by ``/end``), a ``\"\"\"`` block or ``/edit``
(``$VISUAL`` or ``$EDITOR``) enter several lines by hand; llm's ``!multi``
(ended by ``!end``) and ``!edit`` work too. Every turn is saved when it
finishes.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from foliko_cli.cli.output import note, paint, render
from foliko_cli.errors import FolikoError, Interrupted

if TYPE_CHECKING:
    from types import ModuleType

    from foliko_cli.service.facade import Foliko
    from foliko_cli.service.values import TurnRequest

PROMPT = "> "
MORE = "... "
HISTORY_LENGTH = 1000
BLOCK = '"""'
HELP = """commands:
  /help           this list
  /exit           end the session (as Ctrl-D does)
  /multi          type several lines; a line /end sends them (llm's !multi ... !end too)
  /edit           write the next message in $VISUAL or $EDITOR (llm's !edit too)
  /attach PATH    attach a file, an http(s) URL or an MCP resource (mcp:SERVER:URI)
                  to the next message
  /fragment X ... put fragments (files, URLs, saved names) before the next message
                  (llm's !fragment too)
  /prompt SERVER__NAME key=value ...
                  send an MCP server's prompt (foliko mcp prompts lists them)
  \"\"\"             on its own line: the same, ended by another \"\"\"
Ctrl-C cancels a running turn (nothing is saved); Ctrl-D at the prompt ends."""


def _load_readline(history: Path) -> ModuleType | None:
    """readline with the history file loaded, or None where readline is missing."""
    try:
        import readline
    except ImportError:
        return None
    readline.set_history_length(HISTORY_LENGTH)
    readline.parse_and_bind("set enable-bracketed-paste on")
    with contextlib.suppress(OSError):
        readline.read_history_file(history)
    return readline


def _save_history(readline: ModuleType | None, history: Path) -> None:
    if readline is None:
        return
    try:
        history.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(history, os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(descriptor)
        os.chmod(history, 0o600)
        readline.write_history_file(history)
    except OSError as exc:
        note(f"cannot save the line history to {history} ({exc.strerror}); it is kept in memory")


def read_block(end: str) -> str | None:
    """Lines up to one that is exactly ``end``; None when input ends first."""
    lines: list[str] = []
    while True:
        try:
            line = input(MORE)
        except EOFError:
            return None
        if line.strip() == end:
            return "\n".join(lines)
        lines.append(line)


def next_message(
    readline: ModuleType | None,
    history: Path,
    attached: list[str] | None = None,
    fragments: list[str] | None = None,
) -> str | None:
    """The next message typed (or pasted); None to end the loop.

    Commands are handled here (``/attach`` adds to ``attached``, ``/fragment``
    to ``fragments``: read when the message is sent); a blank line asks again.
    """
    while True:
        line = input(PROMPT)
        if readline is not None and line.strip():
            _save_history(readline, history)
        command = line.strip()
        if command in ("/exit", "/quit"):
            return None
        if command == "/help":
            click.echo(HELP, err=True)
            continue
        if (command == "/attach" or command.startswith("/attach ")) and attached is not None:
            attach(command.removeprefix("/attach").strip(), attached)
            continue
        if command.split(" ", 1)[0] in ("/fragment", "!fragment") and fragments is not None:
            add_fragments(command.split()[1:], fragments)
            continue
        if command in ("/edit", "!edit"):
            text = edited()
            if text is not None:
                return text
            continue
        end = block_end(command)
        if end is not None:
            text = read_block(end)
            if text is None:
                return None
            if text.strip():
                return text
            continue
        if command == "/prompt":
            note("/prompt needs a prompt's name: /prompt SERVER__NAME key=value ...")
            continue
        if command.startswith("/") and " " not in command and "\n" not in command:
            note(f"unknown command {command}; /help lists them")
            continue
        if command:
            return line


def add_fragments(named: list[str], fragments: list[str]) -> None:
    """``/fragment NAME ...``: what goes before the next message."""
    fragments.extend(named)
    if named:
        note(f"{', '.join(named)} go before the next message")
    else:
        note("/fragment needs a file, a URL or a saved name: /fragment NAME ...")


def block_end(command: str) -> str | None:
    """The line that ends the block ``command`` starts (``/multi``, ``\"\"\"``,
    llm's ``!multi [TOKEN]``, ended by ``!end [TOKEN]``), or None."""
    if command in ("/multi", BLOCK):
        return "/end" if command == "/multi" else BLOCK
    if command == "!multi" or command.startswith("!multi "):
        return " ".join(["!end", *command.split()[1:]])
    return None


def edited() -> str | None:
    """A message written in $VISUAL or $EDITOR (as llm's ``!edit``); None, with a
    note, when the editor was closed without one or failed."""
    try:
        text = click.edit(extension=".md")
    except click.ClickException as exc:
        note(f"the editor failed ({exc.message}); set VISUAL or EDITOR to one that works")
        return None
    if text is None or not text.strip():
        note("the editor was closed without a message; nothing was sent")
        return None
    return text.strip()


def attach(source: str, attached: list[str]) -> None:
    """Add a file (checked now: it must be one foliko can attach), an http(s) URL
    or an MCP resource (both read when the message is sent) to the next
    message; a problem is one line, and nothing is attached."""
    from foliko_cli.errors import AttachmentError
    from foliko_cli.messages.attachments import is_resource, is_url, read_file

    if not source:
        note("/attach needs a file or an http(s) URL: /attach PATH")
        return
    try:
        if is_resource(source):
            from foliko_cli.service.library import parse_resource

            parse_resource(source)
        elif not is_url(source):
            read_file(source)
    except AttachmentError as exc:
        note(f"{paint('error:', 'red', err=True)} {render(exc)}; nothing was attached")
        return
    attached.append(source)
    note(f"{source} goes with the next message")


def interactive(
    facade: Foliko,
    turn: TurnRequest,
    *,
    history: Path,
    latest: bool = False,
    compose: Callable[[str], str] | None = None,
) -> None:
    """Read a message, run a turn (``turn`` with it), print the reply, until /exit
    or end of input (``latest``: the session is the one ``-c`` picked;
    ``compose`` makes each message typed into the one sent, as a template does)."""
    from foliko_cli.cli.prompting import expand, is_prompt
    from foliko_cli.cli.reply import ReplyWriter, turn_notes

    session_id = turn.session_id
    readline = _load_readline(history)
    note(f"session {session_id!r}; /help for commands, Ctrl-D to end, Ctrl-C cancels a turn")
    attached: list[str] = []
    fragments: list[str] = []
    while True:
        try:
            text = next_message(readline, history, attached, fragments)
        except EOFError:
            click.echo(err=True)
            return
        except KeyboardInterrupt:
            click.echo(err=True)
            continue
        if text is None:
            return
        prompted = is_prompt(text)
        if compose is not None and not prompted:
            text = compose(text)
        writer = ReplyWriter()
        this = turn._replace(
            message=text,
            attachments=tuple(attached),
            fragments=(*turn.fragments, *fragments),
        )
        attached.clear()
        fragments.clear()
        try:
            if prompted:
                this = expand(facade, this)
            if turn.schema is None:
                result = facade.chat(this, on_event=writer.on_event)
                writer.end_line()
            else:
                result = facade.chat(this)
                click.echo(result.message)
        except (KeyboardInterrupt, Interrupted) as exc:
            writer.end_line()
            saved = exc.result if isinstance(exc, Interrupted) else None
            if saved is None:
                note("turn cancelled; nothing saved")
                continue
            note("interrupted after the turn was saved")
            if turn.schema is not None:
                click.echo(saved.message)
            result = saved
        except FolikoError as exc:
            writer.end_line()
            note(f"{paint('error:', 'red', err=True)} {render(exc)}")
            continue
        if turn.new:
            from foliko_cli.cli.trash import note_started_over

            note_started_over(facade, session_id, result, latest=latest)
        for line in turn_notes(result, terminal=sys.stderr.isatty()):
            note(line)
        turn = turn._replace(
            new=False,
            fork_from=None,
            variables={},
            turns=None,
            fragments=(),  # -f goes with the first message, as in llm chat
            system=None,  # the session keeps them
            system_fragments=None,
        )
