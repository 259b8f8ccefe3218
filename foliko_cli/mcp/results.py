"""A ``tools/call`` result as the text of a foliko tool result, and its images.

Text blocks are kept as they are; images and audio are described in the
text (every provider reads it); a png, jpeg, webp or gif image of at most
``attachments.INLINE_LIMIT`` bytes (an image block, or an embedded resource
blob) is also kept as an image part, for providers that take images in tool
results. Resource links and embedded resources are named by URI.

Structured content follows as JSON unless a text block holds the same
value: the spec asks a server that returns structured content to send its
JSON as text too, and the model need not read it twice (a value that is not
an object comes wrapped as ``{"result": value}``, the text being the
value). Next to prose, the JSON adds what the prose leaves out.
"""

from __future__ import annotations

from typing import Any, cast

import orjson


def _decoded_size(data: str) -> int:
    try:
        import base64

        return len(base64.b64decode(data, validate=False))
    except ValueError:  # binascii.Error is one
        return len(data)


def _resource(resource: Any) -> str:
    uri = str(getattr(resource, "uri", ""))
    text = getattr(resource, "text", None)
    if text is not None:
        return f"[resource {uri}]\n{text}"
    mime = getattr(resource, "mime_type", None) or "application/octet-stream"
    size = _decoded_size(getattr(resource, "blob", "") or "")
    return f"[resource {uri}: {mime}, {size} bytes]"


def block_text(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return cast(str, block.text)
    if kind in ("image", "audio"):
        return f"[{kind}: {block.mime_type}, {_decoded_size(block.data)} bytes]"
    if kind == "resource_link":
        details = ", ".join(part for part in (block.mime_type, block.description) if part)
        return f"[resource link {block.name}: {block.uri}" + (f" ({details})]" if details else "]")
    if kind == "resource":
        return _resource(block.resource)
    return f"[{kind or 'unknown'} content]"


def _holds(text: str, structured: Any) -> bool:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        value = text
    if value == structured:
        return True
    return (
        isinstance(structured, dict)
        and set(structured) == {"result"}
        and (value == structured["result"] or text == structured["result"])
    )


def result_images(result: Any, name: str) -> list[dict[str, Any]]:
    """The result's images as attachment parts named ``NAME-1.png``, ... (``name``: the tool)."""
    from foliko_cli.messages.attachments import INLINE_LIMIT, image_part, image_type

    parts: list[dict[str, Any]] = []
    for block in result.content or []:
        kind = getattr(block, "type", None)
        if kind == "image":
            data = block.data
        elif kind == "resource" and getattr(block.resource, "blob", None) is not None:
            data = block.resource.blob
        else:
            continue
        try:
            import base64

            raw = base64.b64decode(data, validate=True)
        except ValueError:  # binascii.Error is one
            continue
        media_type = image_type(raw)
        if media_type is None or len(raw) > INLINE_LIMIT:
            continue
        extension = media_type.split("/", 1)[1].replace("jpeg", "jpg")
        parts.append(image_part(f"{name}-{len(parts) + 1}.{extension}", media_type, raw))
    return parts


def result_text(result: Any) -> str:
    """The text the model reads for ``result`` (an ``mcp`` ``CallToolResult``)."""
    blocks = result.content or []
    parts = [block_text(block) for block in blocks]
    structured = getattr(result, "structured_content", None)
    texts = [b.text for b in blocks if getattr(b, "type", None) == "text"]
    if structured is not None and not any(_holds(text, structured) for text in texts):
        shown = orjson.dumps(structured, option=orjson.OPT_NON_STR_KEYS).decode()
        parts.append(f"[structured content]\n{shown}" if parts else shown)
    return "\n".join(parts) if parts else "(no content)"
