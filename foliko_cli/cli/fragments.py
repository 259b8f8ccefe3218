"""``foliko fragments``: texts saved under a name for ``chat -f NAME`` (llm's aliases)."""

from __future__ import annotations

import sys
from typing import Any

import click

from foliko_cli.cli.app import open_facade
from foliko_cli.cli.output import emit_rows, format_ms, list_options, note
from foliko_cli.errors import UsageError


@click.group()
def fragments() -> None:
    """Fragments saved under a name, for chat -f NAME and --sf NAME.

    A fragment is a text put before the message (-f) or in the system prompt
    (--sf): a file, an http(s) URL, stdin (-), a saved name or a hash. Its
    text is stored once per storage however often it is used; saved ones
    are kept in foliko's home.

    \b
    Examples:
      foliko fragments set style ./style-guide.md
      foliko chat -s review -f style -f src/app.py "Review this file"
      foliko fragments list
    """


def stdin_fragment(value: str) -> Any:
    """``-``: all of stdin as a fragment; any other value as it is."""
    if value != "-":
        return value
    from foliko_cli.messages.fragments import STDIN, from_bytes

    if sys.stdin is None or sys.stdin.closed or sys.stdin.isatty():
        raise UsageError(
            "the fragment - is stdin, which is a terminal or closed",
            fix="pipe the text in (... | foliko chat -s ID -f - MESSAGE) or name a file",
        )
    return from_bytes(sys.stdin.buffer.read(), STDIN, label="on stdin")


@fragments.command("set")
@click.argument("name")
@click.argument("source", metavar="FILE|URL|-")
@click.pass_context
def set_fragment(ctx: click.Context, name: str, source: str) -> None:
    """Save the text of FILE, an http(s) URL or stdin (-) as NAME, replacing the
    fragment of that name. The text is copied: a later change to the file is
    not seen until it is saved again.

    \b
    Examples:
      foliko fragments set style ./style-guide.md
      curl -s https://example.com/notes.txt | foliko fragments set notes -
    """
    from foliko_cli.service.fragments import check_name

    check_name(name)
    saved = open_facade(ctx).save_fragment(name, stdin_fragment(source))
    note(f"fragment {name!r} saved ({saved.size:,} bytes, sha256 {saved.sha256[:12]})")


@fragments.command("list")
@list_options
@click.pass_context
def list_fragments(ctx: click.Context, fmt: str) -> None:
    """The saved fragments: name, hash, size, where the text came from, when.

    \b
    Example:
      foliko fragments list --json
    """
    rows = [saved.to_dict() for saved in open_facade(ctx).saved_fragments()]
    if not rows:
        note("no fragments are saved; foliko fragments set NAME FILE saves one")
    emit_rows(
        rows,
        {
            "name": "name",
            "sha256": "sha256",
            "size": "bytes",
            "saved_at": "saved",
            "source": "source",
        },
        fmt,
        human={"sha256": lambda v: str(v)[:12], "saved_at": format_ms},
    )


@fragments.command("show")
@click.argument("name", metavar="NAME|HASH")
@click.pass_context
def show_fragment(ctx: click.Context, name: str) -> None:
    """Print the text of the fragment saved as NAME, or whose SHA-256 is HASH.

    \b
    Example:
      foliko fragments show style
    """
    text = open_facade(ctx).fragment(name).text
    click.echo(text, nl=not text.endswith("\n"))


@fragments.command("remove")
@click.argument("name")
@click.pass_context
def remove_fragment(ctx: click.Context, name: str) -> None:
    """Forget the fragment saved as NAME (messages that used it keep their copy).

    \b
    Example:
      foliko fragments remove style
    """
    if not open_facade(ctx).remove_fragment(name):
        raise UsageError(
            f"no fragment is saved as {name!r}", fix="see the names: foliko fragments list"
        )
    note(f"fragment {name!r} removed")
