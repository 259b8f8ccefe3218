"""A ``tools/call`` result as the text of a foliko tool result.

Text blocks are kept as they are; images and audio are described (the model
gets tool results as text); resource links and embedded resources are named
by URI. Structured content is shown as JSON only when there is no text
block: the spec asks a server that returns structured content to send its
JSON as text too, and that text is what the server meant the model to read.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson


def _decoded_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)


def _resource(resource: Any) -> str:
    uri = str(getattr(resource, "uri", ""))
    text = getattr(resource, "text", None)
    if text is not None:
        return f"[resource {uri}]\n{text}"
    mime = getattr(resource, "mime_type", None) or "application/octet-stream"
    size = _decoded_size(getattr(resource, "blob", "") or "")
    return f"[resource {uri}: {mime}, {size} bytes]"


def _block(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return block.text
    if kind in ("image", "audio"):
        return f"[{kind}: {block.mime_type}, {_decoded_size(block.data)} bytes]"
    if kind == "resource_link":
        details = ", ".join(part for part in (block.mime_type, block.description) if part)
        return f"[resource link {block.name}: {block.uri}" + (f" ({details})]" if details else "]")
    if kind == "resource":
        return _resource(block.resource)
    return f"[{kind or 'unknown'} content]"


def result_text(result: Any) -> str:
    """The text the model reads for ``result`` (an ``mcp`` ``CallToolResult``)."""
    parts = [_block(block) for block in result.content or []]
    structured = getattr(result, "structured_content", None)
    has_text = any(getattr(b, "type", None) == "text" for b in result.content or [])
    if structured is not None and not has_text:
        parts.append(orjson.dumps(structured, option=orjson.OPT_NON_STR_KEYS).decode())
    return "\n".join(parts) if parts else "(no content)"
