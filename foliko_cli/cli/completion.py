"""``foliko completion SHELL``: print the shell completion script."""

from __future__ import annotations

import click

SHELLS = ("bash", "zsh", "fish")


def completion_script(shell: str) -> str:
    from click.shell_completion import get_completion_class

    from foliko_cli.cli.main import cli

    completer = get_completion_class(shell)(cli, {}, "foliko", "_FOLIKO_COMPLETE")
    return completer.source()


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the completion script for SHELL (session ids complete from storage).

    \b
    Examples:
      eval "$(foliko completion bash)"          # in ~/.bashrc
      foliko completion fish > ~/.config/fish/completions/foliko.fish
    """
    click.echo(completion_script(shell), nl=False)
