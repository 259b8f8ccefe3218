"""MCP resources: listing a server's, and reading one as a message attachment.

``mcp:SERVER:URI`` names a resource wherever a file can be attached. Each
of its contents becomes an attachment part as a file's would: text goes into
the message under its name, an image blob travels as an image; a blob of
any other kind is refused, as a binary file is. A server that declares no
resources lists none.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from foliko_cli.errors import AttachmentError, ToolError
from foliko_cli.messages.attachments import IMAGE_KINDS, MAX_TEXT_BYTES, Loaded, classify

if TYPE_CHECKING:
    from foliko_cli.mcp.connection import ServerConnection
    from foliko_cli.mcp.manager import MCPManager

PREFIX = "mcp:"
MAX_PAGES = 100
_TEXT_TYPES = ("application/json", "application/xml", "application/yaml", "application/toml")


async def pages(
    connection: ServerConnection,
    what: str,
    fetch: Callable[[Any, str | None], Awaitable[Any]],
    capability: str,
) -> list[Any]:
    """Every item of a paginated list (``fetch(client, cursor)`` gives a page and its
    items), started if need be; none from a server without ``capability``."""
    items: list[Any] = []

    async def collect(client: Any) -> None:
        if getattr(client.server_capabilities, capability, None) is None:
            return
        cursor = None
        for _ in range(MAX_PAGES):
            page, listed = await fetch(client, cursor)
            items.extend(listed)
            cursor = page.next_cursor
            if cursor is None:
                return

    await connection.request(what, collect)
    return items


async def resource_rows(connection: ServerConnection) -> list[dict[str, Any]]:
    """The server's resources and resource templates (none when it declares no resources)."""

    async def resources(client: Any, cursor: str | None) -> tuple[Any, list[Any]]:
        page = await client.list_resources(cursor=cursor)
        return page, page.resources

    async def templates(client: Any, cursor: str | None) -> tuple[Any, list[Any]]:
        page = await client.list_resource_templates(cursor=cursor)
        return page, page.resource_templates

    rows = [
        _row(connection.name, resource, str(resource.uri), False)
        for resource in await pages(connection, "resources/list", resources, "resources")
    ]
    try:
        listed = await pages(connection, "resources/templates/list", templates, "resources")
    except ToolError:
        listed = []  # a server may list resources and have no templates method
    rows += [_row(connection.name, t, t.uri_template, True) for t in listed]
    return rows


def _row(server: str, item: Any, uri: str, template: bool) -> dict[str, Any]:
    return {
        "server": server,
        "uri": uri,
        "attach": None if template else f"{PREFIX}{server}:{uri}",
        "name": item.name,
        "title": getattr(item, "title", None),
        "mime_type": item.mime_type,
        "size": getattr(item, "size", None),
        "template": template,
        "description": item.description or "",
    }


def parse(source: str) -> tuple[str, str]:
    """``mcp:SERVER:URI`` as (SERVER, URI); a UsageError when either is missing."""
    server, _, uri = source.removeprefix(PREFIX).partition(":")
    if not server or not uri:
        raise AttachmentError(
            f"cannot attach {source}: an MCP resource is named mcp:SERVER:URI",
            fix="list the server's resources",
        )
    return server, uri


async def read_resource(manager: MCPManager, source: str) -> list[Loaded]:
    """The attachment parts of resource ``source`` (``mcp:SERVER:URI``)."""
    server, uri = parse(source)
    manager.check([server], f"cannot attach {source}")
    connection = manager.connection(server)
    try:
        result = await connection.request(
            "resources/read", lambda client: client.read_resource(uri)
        )
    except ToolError as exc:
        raise AttachmentError(
            f"cannot attach {source}: {exc}", fix="list the server's resources"
        ) from None
    if not result.contents:
        raise AttachmentError(f"cannot attach {source}: the server sent no content")
    return [_loaded(server, source, content) for content in result.contents]


def _loaded(server: str, source: str, content: Any) -> Loaded:
    uri = str(getattr(content, "uri", "") or "")
    name = f"{PREFIX}{server}:{uri}" if uri else source
    mime = getattr(content, "mime_type", None)
    text = getattr(content, "text", None)
    if text is not None:
        data = text.encode("utf-8")
        if len(data) > MAX_TEXT_BYTES:
            raise AttachmentError(
                f"cannot attach {source}: {len(data):,} bytes, over the limit of "
                f"{MAX_TEXT_BYTES:,} for a text attachment"
            )
        loaded = classify(name, data, label=source)
        if loaded.text is None:  # text that looks like an image: keep it as the text it is
            return Loaded({**loaded.part, "type": "text", "media_type": "text/plain"}, text)
        loaded.part["media_type"] = mime or "text/plain"
        return loaded
    try:
        data = base64.b64decode(getattr(content, "blob", "") or "", validate=True)
    except (binascii.Error, ValueError):
        raise AttachmentError(f"cannot attach {source}: its blob is not valid base64") from None
    textual = mime is None or mime.startswith("text/") or mime in _TEXT_TYPES
    if mime is not None and not mime.startswith("image/") and not textual:
        raise AttachmentError(
            f"cannot attach {source}: its content is {mime}, neither text nor a "
            f"{IMAGE_KINDS} image",
            fix="attach a text or image resource",
        )
    return classify(name, data, label=source)
