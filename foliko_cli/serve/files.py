"""``input_file`` parts: a text file sent inline, taken as ``chat -a`` takes one.

The file's text goes into the message as a fenced block under its name.
foliko keeps no uploaded files and fetches nothing for a client, so a file
must come as ``file_data`` (base64, optionally a ``data:`` URL).
"""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING

from foliko_cli.serve.errors import ApiError

if TYPE_CHECKING:
    from foliko_cli.serve.openai_types import ContentPart

ACCEPTED = "UTF-8 text files sent as file_data (base64)"


def file_text(part: ContentPart, where: str, param: str) -> str:
    from foliko_cli.errors import AttachmentError
    from foliko_cli.messages.attachments import classify, fenced

    data = part.file_data
    if data is None:
        given = "file_id" if part.file_id else "file_url" if part.file_url else None
        problem = f"{given} is not supported" if given else "file_data is missing"
        raise ApiError(400, f"{where}: {problem}; foliko takes {ACCEPTED}", param=param)
    if data.startswith("data:"):
        data = data.partition(",")[2]
    name = part.filename or "file"
    try:
        loaded = classify(name, base64.b64decode(data, validate=True), label=where)
    except (binascii.Error, ValueError):
        raise ApiError(400, f"{where}: file_data is not base64", param=param) from None
    except AttachmentError as exc:
        raise ApiError(
            400, f"{where}: {exc.problem}; foliko takes {ACCEPTED}", param=param
        ) from None
    if loaded.text is None:
        raise ApiError(
            400, f"{where}: {name} is an image; send it as an input_image part", param=param
        )
    return fenced(loaded.part["name"], loaded.text)
