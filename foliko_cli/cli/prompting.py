"""``/prompt SERVER__NAME key=value ...``: an MCP server's prompt as a turn's input.

In ``foliko chat`` a message whose first line is ``/prompt ...`` is replaced
by the prompt's messages (the lines after it, and piped text, follow the
prompt's last user message); the interactive loop takes the same line.
Arguments are ``key=value`` words, quoted as in a shell.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, TypeGuard

from foliko_cli.errors import UsageError

if TYPE_CHECKING:
    from foliko_cli.service.facade import Foliko
    from foliko_cli.service.values import TurnRequest

COMMAND = "/prompt"
USAGE = "/prompt SERVER__NAME key=value ..."


def is_prompt(text: str | None) -> TypeGuard[str]:
    if text is None:
        return False
    first = text.lstrip().split("\n", 1)[0].strip()
    return first == COMMAND or first.startswith(COMMAND + " ")


def parse(text: str) -> tuple[str, dict[str, str], str]:
    """The prompt's name, its arguments and the text after the command's line."""
    first, _, rest = text.lstrip().partition("\n")
    try:
        words = shlex.split(first.strip().removeprefix(COMMAND))
    except ValueError as exc:
        raise UsageError(f"cannot read {first.strip()!r}: {exc}", fix=f"write {USAGE}") from None
    if not words:
        raise UsageError(f"{COMMAND} needs a prompt's name", fix=f"write {USAGE}")
    name, arguments = words[0], {}
    for word in words[1:]:
        key, equals, value = word.partition("=")
        if not equals or not key:
            raise UsageError(
                f"{COMMAND} arguments are key=value; {word!r} is not", fix=f"write {USAGE}"
            )
        arguments[key] = value
    return name, arguments, rest


def expand(facade: Foliko, turn: TurnRequest) -> TurnRequest:
    """The turn ``/prompt ...`` in its message stands for."""
    assert turn.message is not None
    name, arguments, rest = parse(turn.message)
    prompted = facade.mcp_prompt(name, arguments, rest)
    return turn._replace(
        message=prompted.message,
        attachments=(*turn.attachments, *prompted.attachments),
        messages=(*turn.messages, *prompted.messages),
    )
