"""llm's names for what foliko has under another name: an llm user who types
one gets foliko's in the usage error, not a guess at a look-alike option."""

from __future__ import annotations

import click

SESSION = "-s/--session ID"
OPTIONS: dict[str, dict[str, str]] = {
    "chat": {
        "--cid": SESSION,
        "--conversation": SESSION,
        "-d": "--storage sqlite:////PATH.db",
        "--database": "--storage sqlite:////PATH.db",
        "--key": "the provider's variable (OPENAI_API_KEY...) or a stored key: foliko keys set",
        "--at": "-a/--attach (the type is told from the content)",
        "--attachment-type": "-a/--attach (the type is told from the content)",
        "--cl": "max_steps in the config (FOLIKO_MAX_STEPS)",
        "--chain-limit": "max_steps in the config (FOLIKO_MAX_STEPS)",
        "--td": "--stream --json (its tool_call and tool_result events)",
        "--tools-debug": "--stream --json (its tool_call and tool_result events)",
    },
    "sessions show": {
        "-n": "--tail N",
        "--count": "--tail N",
        "--cid": "the ID argument",
        "--conversation": "the ID argument",
        "-c": "the ID argument; -r without one takes the latest session",
        "--current": "the ID argument; -r without one takes the latest session",
        "-q": "'foliko sessions search QUERY'",
        "--query": "'foliko sessions search QUERY'",
    },
    "sessions list": {"-n": "--limit N", "--count": "--limit N"},
    "fragments list": {"--aliases": "the plain command: it lists the saved fragments only"},
}
"""Per command (its path after ``foliko``): llm's option, and foliko's way to say it."""

COMMANDS = {
    "logs": "'foliko sessions list', 'sessions show ID' (-r: the last reply) and 'sessions search'",
    "prompt": "'foliko chat -s ID MESSAGE'",
    "aliases": "a [models.NAME] alias in the config (foliko models list)",
}
"""llm's commands at the top level, and foliko's."""


def llm_equivalent(exc: click.UsageError) -> str | None:
    """The usage error's line when what was typed is llm's name for something foliko
    has under another one; None otherwise."""
    ctx = exc.ctx
    if ctx is None:
        return None
    path = ctx.command_path.partition(" ")[2]
    where = f"see '{ctx.command_path} --help'"
    if isinstance(exc, click.exceptions.NoSuchOption):
        foliko = OPTIONS.get(path, {}).get(exc.option_name)
        if foliko is not None:
            return f"no such option {exc.option_name!r} (llm's); here it is {foliko}; {where}"
    elif isinstance(exc, click.exceptions.NoSuchCommand) and not path:
        foliko = COMMANDS.get(exc.command_name)
        if foliko is not None:
            return f"no such command {exc.command_name!r} (llm's); here it is {foliko}; {where}"
    return None
