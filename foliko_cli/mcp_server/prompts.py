"""Each configured agent as a prompt: its instructions, then the message the
user gives (optional), as user messages a host puts in its own conversation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from foliko_cli.errors import UsageError
from foliko_cli.service import AsyncFoliko

MESSAGE_ARGUMENT = "message"


class PromptError(Exception):
    """An unknown prompt or argument, or an agent the config gets wrong."""


def agent_prompts(service: AsyncFoliko) -> list[dict[str, Any]]:
    """The fields of each agent's ``Prompt``, by name."""
    listed = []
    for name in sorted(service.agents):
        config = service.agent_config(name)
        listed.append(
            {
                "name": name,
                "description": config.description or f"The instructions of foliko's agent {name}",
                "arguments": [
                    {
                        "name": MESSAGE_ARGUMENT,
                        "description": "A message to send after the instructions",
                        "required": False,
                    }
                ],
            }
        )
    return listed


def agent_prompt(
    service: AsyncFoliko, name: str, arguments: Mapping[str, str] | None
) -> tuple[str | None, list[str]]:
    """The agent's description and the texts of the prompt's messages."""
    if name not in service.agents:
        known = ", ".join(sorted(service.agents)) or "none: no agents are configured"
        raise PromptError(f"unknown prompt {name!r}; the prompts are the agents ({known})")
    unknown = sorted(set(arguments or {}) - {MESSAGE_ARGUMENT})
    if unknown:
        raise PromptError(
            f"prompt {name!r} has no argument {unknown[0]!r}; it takes {MESSAGE_ARGUMENT}"
        )
    try:
        config = service.agent_config(name)
    except UsageError as exc:
        raise PromptError(str(exc)) from None
    instructions = config.system_prompt or config.description or f"Act as the agent {name}."
    texts = [instructions]
    message = (arguments or {}).get(MESSAGE_ARGUMENT)
    if message:
        texts.append(message)
    return config.description, texts
