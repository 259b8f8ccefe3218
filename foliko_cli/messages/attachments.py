"""Files, URLs and piped bytes attached to a user message.

A text attachment goes into the message itself, as a fenced block under its
name; an image (png, jpeg, webp, gif) travels as an image content part to
providers that take images. Each attachment is recorded on the user message
as a part of ``message["attachments"]``:

``{"type": "text" | "image", "name", "media_type", "size", "sha256"}`` plus,
for an image, ``data`` (base64) when it is at most INLINE_LIMIT bytes or came
from a URL or stdin, else ``path`` (absolute): the file is read again, and its
hash checked, whenever the history is sent. A URL attachment also keeps its
``url``. ``mcp:SERVER:URI`` names an MCP server's resource: whoever loads
the attachments reads it (``read_resource``), each content a part as a
file's would be.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeGuard, cast

from foliko_cli.common.redaction import redact_url
from foliko_cli.errors import AttachmentError
from foliko_cli.messages.fences import fence_for

INLINE_LIMIT = 1024 * 1024
MAX_IMAGE_BYTES = 20 * 1024 * 1024
MAX_TEXT_BYTES = 4 * 1024 * 1024
IMAGE_KINDS = "png, jpeg, webp or gif"
STDIN_NAME = "stdin"
_LANGUAGE = re.compile(r"^[A-Za-z0-9+#-]{1,16}$")


class Attachment(NamedTuple):
    """Bytes given in memory (stdin, an upload) under a display name."""

    name: str
    data: bytes


Source = str | os.PathLike[str] | Attachment


def image_type(data: bytes) -> str | None:
    """The media type of an image foliko can send, from its first bytes."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def is_url(source: object) -> TypeGuard[str]:
    return isinstance(source, str) and source.startswith(("http://", "https://"))


def is_resource(source: object) -> TypeGuard[str]:
    """``mcp:SERVER:URI``: an MCP server's resource."""
    return isinstance(source, str) and source.startswith("mcp:")


class Loaded(NamedTuple):
    """One attachment read: its part, and for text the text to put in the message."""

    part: dict[str, Any]
    text: str | None = None


def _part(kind: str, name: str, media_type: str, data: bytes) -> dict[str, Any]:
    return {
        "type": kind,
        "name": name,
        "media_type": media_type,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def image_part(name: str, media_type: str, data: bytes) -> dict[str, Any]:
    """An image part kept inline (its bytes as base64)."""
    part = _part("image", name, media_type, data)
    part["data"] = base64.b64encode(data).decode("ascii")
    return part


def classify(
    name: str, data: bytes, *, path: Path | None = None, label: str | None = None
) -> Loaded:
    """Read ``data`` as an image or UTF-8 text; AttachmentError (naming ``label``, by
    default ``name``) for anything else."""
    label = label or name
    media_type = image_type(data)
    if media_type is not None:
        if len(data) > MAX_IMAGE_BYTES:
            raise AttachmentError(
                f"cannot attach {label}: the image is {len(data):,} bytes, over the limit of "
                f"{MAX_IMAGE_BYTES:,}",
                fix="scale it down",
            )
        part = _part("image", name, media_type, data)
        if path is not None and len(data) > INLINE_LIMIT:
            part["path"] = str(path)
        else:
            part["data"] = base64.b64encode(data).decode("ascii")
        return Loaded(part)
    if len(data) > MAX_TEXT_BYTES:
        raise AttachmentError(
            f"cannot attach {label}: {len(data):,} bytes, over the limit of {MAX_TEXT_BYTES:,} "
            "for a text attachment",
            fix="attach a part of it",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\x00" in text:
        raise AttachmentError(
            f"cannot attach {label}: it is neither UTF-8 text nor a {IMAGE_KINDS} image",
            fix="attach a text file or an image",
        )
    return Loaded(_part("text", name, "text/plain", data), text)


def read_file(path: str | os.PathLike[str]) -> Loaded:
    target = Path(path).expanduser()
    try:
        resolved = target.resolve(strict=True)
        if not resolved.is_file():
            raise AttachmentError(f"cannot attach {path}: not a file", fix="name a file")
        with open(resolved, "rb") as handle:
            data = handle.read(max(MAX_IMAGE_BYTES, MAX_TEXT_BYTES) + 1)
    except FileNotFoundError:
        raise AttachmentError(f"cannot attach {path}: no such file", fix="check the path") from None
    except OSError as exc:
        raise AttachmentError(
            f"cannot attach {path}: {exc.strerror or exc}", fix="check the file and its permissions"
        ) from None
    return classify(target.name, data, path=resolved, label=str(path))


class DownloadFailed(Exception):
    """Why ``download`` got nothing: ``network`` when the network or the server failed
    (trying again may work), else the address or what it holds is at fault."""

    def __init__(self, reason: str, *, network: bool = False):
        super().__init__(reason)
        self.network = network


async def download(url: str, timeout: float, limit: int) -> bytes:
    """The body at the http(s) ``url`` (redirects followed, to http(s) only), at most
    ``limit`` bytes, within ``timeout`` seconds; DownloadFailed otherwise."""
    from foliko_cli.common.loop import require_loop

    require_loop(f"downloading {url}")
    import httpx2

    try:
        async with (
            httpx2.AsyncClient(follow_redirects=True, max_redirects=5, timeout=timeout) as client,
            client.stream("GET", url) as response,
        ):
            if response.status_code >= 400:
                raise DownloadFailed(
                    f"the server answered HTTP {response.status_code}",
                    network=response.status_code >= 500,
                )
            chunks, size = [], 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > limit:
                    raise DownloadFailed(f"larger than {limit:,} bytes")
                chunks.append(chunk)
    except httpx2.UnsupportedProtocol:
        raise DownloadFailed("it leads to an address that is not http(s)") from None
    except httpx2.TooManyRedirects:
        raise DownloadFailed("it redirects more than 5 times") from None
    except httpx2.HTTPError as exc:
        raise DownloadFailed(f"{type(exc).__name__}: {exc or 'no answer'}", network=True) from None
    return b"".join(chunks)


async def fetch_url(url: str, timeout: float) -> Loaded:
    """Download ``url`` (following redirects) within ``timeout`` seconds."""
    limit = max(MAX_IMAGE_BYTES, MAX_TEXT_BYTES)
    name = url.rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0] or url
    shown = redact_url(url)
    try:
        data = await download(url, timeout, limit)
    except DownloadFailed as exc:
        if exc.network:
            fix = "check the address and the network"
        elif str(exc).startswith("larger"):
            fix = "attach a smaller file"
        else:
            fix = "check the address"
        raise AttachmentError(f"cannot attach {shown}: {exc}", fix=fix) from None
    loaded = classify(name, data, label=url)
    loaded.part["url"] = url
    return loaded


async def load_all(
    sources: Sequence[Source | dict[str, Any]],
    timeout: float = 30.0,
    read_resource: Callable[[str], Awaitable[list[Loaded]]] | None = None,
) -> list[Loaded]:
    """Every source read, in order: a path, an http(s) URL, an ``Attachment``,
    an MCP resource (read by ``read_resource``) or a part already read (a dict,
    taken as it is)."""
    deadline = time.monotonic() + timeout
    loaded = []
    for source in sources:
        if isinstance(source, dict):
            loaded.append(Loaded(dict(source)))
        elif isinstance(source, Attachment):
            loaded.append(classify(source.name, bytes(source.data)))
        elif is_resource(source):
            if read_resource is None:
                raise AttachmentError(
                    f"cannot attach {source}: no MCP servers here", fix="attach a file"
                )
            loaded.extend(await read_resource(source))
        elif is_url(source):
            loaded.append(await fetch_url(source, max(1.0, deadline - time.monotonic())))
        else:
            loaded.append(read_file(source))
    return loaded


def fenced(name: str, text: str) -> str:
    """``text`` as a Markdown fenced block under its name."""
    fence = fence_for(text)
    suffix = Path(name).suffix[1:]
    language = suffix if _LANGUAGE.match(suffix) else ""
    body = text if text.endswith("\n") or not text else text + "\n"
    return f"{name}:\n{fence}{language}\n{body}{fence}"


def compose(message: str, loaded: Sequence[Loaded]) -> tuple[str, list[dict[str, Any]]]:
    """The message with each text attachment appended, and the parts to record."""
    blocks = [fenced(item.part["name"], item.text) for item in loaded if item.text is not None]
    text = "\n\n".join(([message] if message else []) + blocks)
    return text, [item.part for item in loaded]


def images(message: dict[str, Any]) -> list[dict[str, Any]]:
    if "attachments" not in message:  # most messages: a turn asks for each one's
        return []
    return [p for p in message["attachments"] or () if p.get("type") == "image"]


def image_data(part: dict[str, Any]) -> str | None:
    """The image's bytes as base64, or None when a by-path file is gone or changed."""
    if "data" in part:
        return cast(str, part["data"])
    try:
        with open(part["path"], "rb") as handle:
            data = handle.read(MAX_IMAGE_BYTES + 1)
    except (OSError, KeyError, TypeError):
        return None
    if hashlib.sha256(data).hexdigest() != part.get("sha256"):
        return None
    return base64.b64encode(data).decode("ascii")


def unavailable(part: dict[str, Any]) -> str:
    """What the model is told in place of an image that can no longer be read."""
    return f"[image {part.get('name')} is not available: {part.get('path')} is missing or changed]"


def describe(part: dict[str, Any]) -> str:
    """``cat.png (image/png, 12.3 kB)``, for transcripts and listings."""
    size = part.get("size", 0)
    shown = f"{size:,} B" if size < 1000 else f"{size / 1000:,.1f} kB"
    if size >= 1_000_000:
        shown = f"{size / 1_000_000:,.1f} MB"
    where = f", {part['path']}" if "path" in part else ""
    where += f", {part['url']}" if "url" in part else ""
    return f"{part.get('name')} ({part.get('media_type')}, {shown}{where})"
