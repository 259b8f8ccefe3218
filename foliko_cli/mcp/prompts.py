"""MCP prompts: listing a server's, and getting one as the input of a turn.

A prompt is named ``SERVER__NAME``, as a tool is. Its messages become the
turn's input: consecutive messages of one role are joined, the last user
message is the turn's message (with its images attached) and the messages
before it are added ahead of it. Text after the prompt (``extra``) joins the
last user message, or is the user's message after a prompt that ends with
the assistant's. Embedded text resources go in as fenced blocks; images
outside the last message, audio and other blobs are described.
"""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING, Any, NamedTuple

from foliko_cli.errors import ToolError, UsageError
from foliko_cli.mcp.names import SEPARATOR
from foliko_cli.mcp.resources import pages
from foliko_cli.mcp.results import block_text
from foliko_cli.messages.attachments import Attachment, fenced

if TYPE_CHECKING:
    from foliko_cli.mcp.connection import ServerConnection
    from foliko_cli.mcp.manager import MCPManager

_EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp"}


class PromptTurn(NamedTuple):
    """What a prompt sends: ``message`` with ``attachments``, after ``messages``."""

    message: str
    messages: list[dict[str, Any]]
    attachments: list[Attachment]


async def list_prompts(connection: ServerConnection) -> list[Any]:
    """The server's prompts (none when it declares no prompts)."""

    async def fetch(client: Any, cursor: str | None) -> tuple[Any, list[Any]]:
        page = await client.list_prompts(cursor=cursor)
        return page, page.prompts

    return await pages(connection, "prompts/list", fetch, "prompts")


def prompt_row(server: str, prompt: Any) -> dict[str, Any]:
    return {
        "name": f"{server}{SEPARATOR}{prompt.name}",
        "server": server,
        "prompt": prompt.name,
        "arguments": [
            {"name": a.name, "description": a.description or "", "required": bool(a.required)}
            for a in prompt.arguments or []
        ],
        "description": prompt.description or getattr(prompt, "title", None) or "",
    }


def _candidates(manager: MCPManager, reference: str) -> list[tuple[str, str]]:
    """(server, prompt) pairs ``reference`` may mean, the longest server name first."""
    pairs = [
        (server, reference[len(server) + len(SEPARATOR) :])
        for server in manager.configs
        if reference.startswith(server + SEPARATOR) and len(reference) > len(server + SEPARATOR)
    ]
    return sorted(pairs, key=lambda pair: -len(pair[0]))


async def prompt_turn(
    manager: MCPManager, reference: str, arguments: dict[str, str], extra: str = ""
) -> PromptTurn:
    """Get prompt ``reference`` (``SERVER__NAME``) with ``arguments``, as a turn's input."""
    candidates = _candidates(manager, reference)
    if not candidates:
        known = ", ".join(manager.configs) or "none configured"
        raise UsageError(
            f"no MCP prompt {reference!r}: a prompt is named SERVER__NAME, "
            f"with a configured server (known: {known})",
            fix="list the servers' prompts",
        )
    for server, name in candidates:
        connection = manager.connection(server)
        try:
            listed = await list_prompts(connection)
        except ToolError as exc:
            raise UsageError(f"cannot get prompt {reference!r}: {exc}") from None
        prompt = next((p for p in listed if p.name == name), None)
        if prompt is not None:
            break
    else:
        server = candidates[0][0]
        raise UsageError(
            f"MCP server {server!r} has no prompt {candidates[0][1]!r}",
            fix="list the server's prompts",
        )
    _check_arguments(reference, prompt, arguments)
    try:
        result = await connection.request(
            "prompts/get", lambda client: client.get_prompt(name, arguments)
        )
    except ToolError as exc:
        raise UsageError(f"cannot get prompt {reference!r}: {exc}") from None
    return _turn(reference, result.messages, extra)


def _check_arguments(reference: str, prompt: Any, arguments: dict[str, str]) -> None:
    declared = {a.name: a for a in prompt.arguments or []}
    for key in arguments:
        if key not in declared:
            names = ", ".join(declared) or "none"
            raise UsageError(
                f"prompt {reference!r} has no argument {key!r} (its arguments: {names})"
            )
    for key, argument in declared.items():
        if argument.required and key not in arguments:
            raise UsageError(
                f"prompt {reference!r} needs its argument {key!r}"
                + (f" ({argument.description})" if argument.description else ""),
                fix=f"give it as {key}=VALUE",
            )


def _turn(reference: str, messages: list[Any], extra: str) -> PromptTurn:
    joined: list[tuple[str, list[Any]]] = []
    for message in messages:
        if joined and joined[-1][0] == message.role:
            joined[-1][1].append(message.content)
        else:
            joined.append((message.role, [message.content]))
    extra = extra.strip()
    if not joined or joined[-1][0] != "user":
        if not extra:
            raise UsageError(
                f"prompt {reference!r} ends with no message of the user's",
                fix="write the message after the prompt",
            )
        joined.append(("user", []))
    *before, (_, last) = joined
    history = [
        {"role": role, "content": "\n\n".join(_text(block) for block in blocks)}
        for role, blocks in before
    ]
    texts: list[str] = []
    attachments: list[Attachment] = []
    for block in last:
        image = _image(reference, block, len(attachments))
        if image is not None:
            attachments.append(image)
        else:
            texts.append(_text(block))
    if extra:
        texts.append(extra)
    return PromptTurn("\n\n".join(texts), history, attachments)


def _text(block: Any) -> str:
    kind = getattr(block, "type", None)
    resource = getattr(block, "resource", None)
    text = getattr(resource, "text", None)
    if kind == "resource" and text is not None:
        return fenced(str(getattr(resource, "uri", "")), text)
    return block_text(block)


def _image(reference: str, block: Any, count: int) -> Attachment | None:
    """An image block (or an embedded image resource) as an attachment."""
    kind = getattr(block, "type", None)
    if kind == "image":
        mime, data = block.mime_type, block.data
    elif kind == "resource" and getattr(block.resource, "blob", None) is not None:
        mime, data = block.resource.mime_type or "", block.resource.blob
    else:
        return None
    if mime not in _EXTENSIONS:
        return None
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    return Attachment(f"{reference}-{count + 1}.{_EXTENSIONS[mime]}", raw)
