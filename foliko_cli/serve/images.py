"""Images in requests (base64 ``data:`` URLs) as attachment parts, and back.

Both APIs carry them: Chat Completions as ``image_url`` parts, Responses as
``input_image`` parts. The server never fetches an http(s) URL for a client.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from foliko_cli.serve.errors import ApiError


def image_part(url: Any, where: str, param: str) -> dict[str, Any]:
    """The attachment part of an image sent as a base64 data: URL; 400 otherwise."""
    from foliko_cli.errors import AttachmentError
    from foliko_cli.messages.attachments import classify

    if not isinstance(url, str) or not url.startswith("data:") or ";base64," not in url:
        raise ApiError(400, f"{where}: an image must be a base64 data: URL", param=param)
    try:
        data = base64.b64decode(url.split(";base64,", 1)[1], validate=True)
        loaded = classify(f"image-{hashlib.sha256(data).hexdigest()[:12]}", data, label=where)
    except (ValueError, AttachmentError) as exc:
        raise ApiError(400, f"{where}: {exc}", param=param) from None
    if loaded.text is not None:
        raise ApiError(400, f"{where}: not a png, jpeg, webp or gif image", param=param)
    return loaded.part


def attached(message: dict[str, Any]) -> list[Any]:
    """The message's images as attachments for the turn that sends it."""
    from foliko_cli.messages.attachments import Attachment, image_data

    parts = message.get("attachments") or ()
    return [Attachment(p["name"], base64.b64decode(image_data(p) or "")) for p in parts]


def data_url(part: dict[str, Any]) -> str | None:
    """A stored image part as a data: URL (None when its file is gone or changed)."""
    from foliko_cli.messages.attachments import image_data

    data = image_data(part)
    return None if data is None else f"data:{part.get('media_type')};base64,{data}"
