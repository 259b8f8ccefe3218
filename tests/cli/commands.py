"""The command tree, walked as ``foliko`` resolves it, so new commands are covered
by the tests that walk it without anyone adding them."""

from __future__ import annotations

from collections.abc import Iterator

import click

from foliko_cli.cli.main import cli


def leaf_commands(
    group: click.Group = cli, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every command that runs (not a group), with the words that name it."""
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            yield from leaf_commands(command, (*path, name))
        else:
            yield (*path, name), command


LEAVES = dict(leaf_commands())
LEAF_IDS = [" ".join(path) for path in LEAVES]


def value_options(command: click.Command) -> list[click.Option]:
    """The command's own options that take a value (flags and --help left out)."""
    return [
        p
        for p in command.params
        if isinstance(p, click.Option)
        and not p.is_flag
        and not p.count
        and p.name not in ("storage", "user")
    ]
