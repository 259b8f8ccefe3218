"""``foliko keys``: API keys kept in foliko's home, in llm's ``keys.json`` format."""

from __future__ import annotations

import sys

import click

from foliko_cli.cli.app import settings_for
from foliko_cli.cli.output import emit_rows, list_options, note
from foliko_cli.common.keys import KeyStore, check_name, variable_for
from foliko_cli.errors import UsageError


@click.group()
def keys() -> None:
    """Stored API keys (llm's keys.json format, owner-only, in foliko's home).

    A model uses the stored key named for its variable when neither the
    environment nor the config gives one: openai for OPENAI_API_KEY,
    anthropic for ANTHROPIC_API_KEY, deepseek for an alias whose api_key_env
    is DEEPSEEK_API_KEY. Only 'keys get' prints a key.

    \b
    Examples:
      foliko keys set openai                  # asks for the key, hidden
      printf %s "$KEY" | foliko keys set anthropic
      foliko keys list
      export OPENAI_API_KEY="$(foliko keys get openai)"
    """


def _store(ctx: click.Context) -> KeyStore:
    return KeyStore(settings_for(ctx).home)


@keys.command("set")
@click.argument("name")
@click.option(
    "--value",
    metavar="KEY",
    help="The key (else asked for on a terminal, or read from stdin); a key on the "
    "command line is seen by ps and kept in the shell's history.",
)
@click.pass_context
def set_key(ctx: click.Context, name: str, value: str | None) -> None:
    """Store a key as NAME, replacing one of that name.

    \b
    Example:
      foliko keys set openai
    """
    check_name(name)
    store = _store(ctx)
    store.set(name, read_key(name) if value is None else value)
    note(f"key {name!r} stored in {store.path}")


def read_key(name: str) -> str:
    """The key typed (hidden) on a terminal, or all of stdin."""
    if sys.stdin is None or sys.stdin.closed:
        raise UsageError(
            "no key given: stdin is closed",
            fix=f"type it on a terminal, pipe it in, or pass --value (foliko keys set {name})",
        )
    if sys.stdin.isatty():
        try:
            return click.prompt(f"Enter the key for {name}", hide_input=True, err=True)
        except click.exceptions.Abort:
            click.echo(err=True)
            raise UsageError("no key was typed; nothing stored") from None
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError("the key on stdin is not UTF-8 text", fix="pipe the key itself") from None


@keys.command("get")
@click.argument("name")
@click.pass_context
def get_key(ctx: click.Context, name: str) -> None:
    """Print the key stored as NAME.

    \b
    Example:
      export OPENAI_API_KEY="$(foliko keys get openai)"
    """
    store = _store(ctx)
    found = store.get(name)
    if found is None:
        stored = f" (stored: {', '.join(store)})" if store else ""
        raise UsageError(
            f"no key {name!r} is stored in {store.path}{stored}",
            fix=f"store it: foliko keys set {name}",
        )
    click.echo(found)


@keys.command("list")
@list_options
@click.pass_context
def list_keys(ctx: click.Context, fmt: str) -> None:
    """The names of the stored keys (never the keys), and the variable each stands in for.

    \b
    Example:
      foliko keys list -q
    """
    store = _store(ctx)
    rows = [{"name": name, "variable": variable_for(name)} for name in store]
    if not rows:
        note(f"no keys are stored in {store.path}; foliko keys set NAME stores one")
    emit_rows(rows, {"name": "name", "variable": "stands in for"}, fmt)


@keys.command("path")
@click.pass_context
def key_path(ctx: click.Context) -> None:
    """Print the path of the key store (keys.json), which may not exist yet.

    \b
    Example:
      foliko keys path
    """
    click.echo(_store(ctx).path)
