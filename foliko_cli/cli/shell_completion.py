"""``foliko completion SHELL``: print the shell completion script."""

from __future__ import annotations

import click

SHELLS = ("bash", "zsh", "fish")


def _quoting_scripts() -> dict[str, type]:
    """Click's scripts, changed so that a value with spaces or quotes stays one word.

    bash inserts COMPREPLY as it is: each value is escaped with ``printf %q``
    (and read with ``read -r``, unglobbed). fish splits each line on every
    comma: it splits on the first only. zsh's compadd quotes by itself.
    """
    from click.shell_completion import BashComplete, FishComplete, ZshComplete

    class QuotingBash(BashComplete):
        source_template = BashComplete.source_template.replace(
            "IFS=',' read type value", "IFS=',' read -r type value"
        ).replace(
            "COMPREPLY+=($value)",
            'printf -v value \'%%q\' "$value"\n            COMPREPLY+=("$value")',
        )

    class QuotingFish(FishComplete):
        source_template = FishComplete.source_template.replace(
            'string split "," $completion', 'string split -m1 "," -- $completion'
        )

    return {"bash": QuotingBash, "zsh": ZshComplete, "fish": QuotingFish}


def completion_script(shell: str) -> str:
    from foliko_cli.cli.main import cli

    completer = _quoting_scripts()[shell](cli, {}, "foliko", "_FOLIKO_COMPLETE")
    source: str = completer.source()
    return source


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
