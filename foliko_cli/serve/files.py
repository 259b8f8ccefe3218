"""``input_file`` parts: a text file sent inline, taken as ``chat -a`` takes one.

The file's text goes into the message as a fenced block under its name.
foliko keeps no uploaded files and fetches nothing for a client, so a file
must come as ``file_data`` (base64, optionally a ``data:`` URL).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from foliko_cli.serve.errors import ApiError

ACCEPTED = "UTF-8 text files sent as file_data (base64)"


def file_text(part: dict[str, Any], where: str) -> str:
    from foliko_cli.errors import AttachmentError
    from foliko_cli.messages.attachments import classify, fenced

    data = part.get("file_data")
    if not isinstance(data, str):
        given = "file_id" if "file_id" in part else "file_url" if "file_url" in part else None
        problem = f"{given} is not supported" if given else "file_data is missing"
        raise ApiError(400, f"{where}: {problem}; foliko takes {ACCEPTED}", param="input")
    if data.startswith("data:"):
        data = data.partition(",")[2]
    name = part.get("filename") if isinstance(part.get("filename"), str) else "file"
    try:
        loaded = classify(name or "file", base64.b64decode(data, validate=True), label=where)
    except (binascii.Error, ValueError):
        raise ApiError(400, f"{where}: file_data is not base64", param="input") from None
    except AttachmentError as exc:
        raise ApiError(
            400, f"{where}: {exc.problem}; foliko takes {ACCEPTED}", param="input"
        ) from None
    if loaded.text is None:
        raise ApiError(
            400,
            f"{where}: {name} is an image; send it as an input_image part",
            param="input",
        )
    return fenced(loaded.part["name"], loaded.text)
