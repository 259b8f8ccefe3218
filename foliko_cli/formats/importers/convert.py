"""What the importers share to turn a tool's records into foliko messages:
times, tool arguments and results, attachment parts, token counts, and an
answer that interleaves text, tool calls and their results."""

from __future__ import annotations

import base64
import binascii
import hashlib
import mimetypes
from datetime import UTC, datetime
from typing import Any, cast

import orjson

from foliko_cli.messages.attachments import MAX_IMAGE_BYTES, fenced, image_type

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/gif"})


def ms(value: Any) -> int:
    """Milliseconds since the epoch from an ISO 8601 text or an epoch number in
    seconds, milliseconds, microseconds or nanoseconds (told apart by size); 0
    when there is no usable time."""
    if isinstance(value, str) and value:
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            return 0
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return max(0, int(moment.timestamp() * 1000))
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        for limit, per_ms in ((1e11, 1e-3), (1e14, 1.0), (1e17, 1e3)):
            if value < limit:
                return round(value / per_ms)
        return round(value / 1e6)
    return 0


def text_of(value: Any) -> str:
    return value if isinstance(value, str) else ""


def arguments(raw: Any) -> Any:
    """Tool call arguments as foliko keeps them: parsed when they are JSON text."""
    if not isinstance(raw, str):
        return raw if raw is not None else {}
    try:
        return orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError:
        return raw


def result_text(value: Any) -> str:
    """A tool result's text: a string, or the text parts of a content list."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = [p.get("text") for p in value if isinstance(p, dict)]
        return "\n".join(t for t in texts if isinstance(t, str))
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        return cast(str, value["text"])
    return "" if value is None else orjson.dumps(value).decode()


def attachment(
    name: Any,
    media_type: Any = None,
    *,
    data: bytes | None = None,
    size: Any = None,
    sha256: Any = None,
    **where: Any,
) -> dict[str, Any]:
    """An attachment part (see foliko_cli.messages.attachments): an image when foliko can
    send it, else a ``file`` kept for the record; an image's bytes inline when
    the source held them. ``where`` adds a ``path`` or ``url`` when known."""
    media_type = media_type if isinstance(media_type, str) and "/" in media_type else None
    if media_type is None and isinstance(name, str):
        media_type = mimetypes.guess_type(name, strict=False)[0]
    if data is not None:
        media_type = image_type(data) or media_type
    kind = "image" if media_type in IMAGE_TYPES else "file"
    part: dict[str, Any] = {
        "type": kind,
        "name": name if isinstance(name, str) and name else "attachment",
        "media_type": media_type or "application/octet-stream",
    }
    if data is not None:
        part["size"] = len(data)
        part["sha256"] = hashlib.sha256(data).hexdigest()
        if kind == "image" and len(data) <= MAX_IMAGE_BYTES:
            part["data"] = base64.b64encode(data).decode("ascii")
    else:
        if isinstance(size, int) and not isinstance(size, bool) and size >= 0:
            part["size"] = size
        if isinstance(sha256, str) and len(sha256) == 64:
            part["sha256"] = sha256
    part.update({key: value for key, value in where.items() if isinstance(value, str) and value})
    return part


def decoded(text: Any) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True) if isinstance(text, str) else None
    except (binascii.Error, ValueError):
        return None


def data_url(url: Any, name: str = "image") -> dict[str, Any] | None:
    """The attachment a ``data:`` URL holds, or one recording an http(s) URL."""
    if not isinstance(url, str):
        return None
    if url.startswith("data:") and "," in url:
        header, _, body = url.partition(",")
        media_type = header[5:].split(";")[0] or None
        data = decoded(body) if header.endswith(";base64") else body.encode()
        if data is not None:
            return attachment(name, media_type, data=data)
    if url.startswith(("http://", "https://")):
        return attachment(url.rsplit("/", 1)[-1].split("?")[0] or name, url=url)
    return None


def with_text_attachment(message: dict[str, Any], name: str, text: str) -> None:
    """A text the user attached, as foliko keeps one: fenced into the message
    under its name, and recorded as a ``text`` part."""
    block = fenced(name, text)
    message["content"] = f"{message['content']}\n\n{block}" if message["content"] else block
    data = text.encode()
    message.setdefault("attachments", []).append(
        {
            "type": "text",
            "name": name,
            "media_type": "text/plain",
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    )


def usage(
    data: Any, *, input_key: str, output_key: str, cached_key: str = "", reasoning_key: str = ""
) -> dict[str, int]:
    """Token counts in foliko's names (input/output, cached and reasoning when not 0)."""
    if not isinstance(data, dict):
        return {}
    names = {
        input_key: "input_tokens",
        output_key: "output_tokens",
        cached_key: "cached_tokens",
        reasoning_key: "reasoning_tokens",
    }
    counts: dict[str, int] = {}
    for key, name in names.items():
        value = data.get(key) if key else None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            continue
        if value or name in ("input_tokens", "output_tokens"):
            counts[name] = value
    return counts


class Replies:
    """An answer that mixes text, tool calls and their results, as foliko
    messages: assistant text with the calls that follow it, then each result,
    then the next assistant message. ``fields`` (time, model) go on each
    assistant message; ``last_fields`` (tokens) on the last one."""

    def __init__(self, created_at: int, **fields: Any):
        self.messages: list[dict[str, Any]] = []
        self._fields = {"created_at": created_at, **fields}
        self._open: dict[str, Any] | None = None

    def _reply(self) -> dict[str, Any]:
        if self._open is None:
            self._open = {"role": "assistant", "content": "", **self._fields}
            self.messages.append(self._open)
        return self._open

    def text(self, text: str) -> None:
        if text.strip():
            reply = self._reply()
            reply["content"] = f"{reply['content']}\n\n{text}" if reply["content"] else text

    def call(self, call_id: str, name: str, raw_arguments: Any) -> None:
        call = {"id": call_id, "name": name, "arguments": arguments(raw_arguments)}
        self._reply().setdefault("tool_calls", []).append(call)

    def result(self, call_id: str, name: str, content: str, *, is_error: bool = False) -> None:
        if not name:
            calls = [c for m in self.messages for c in m.get("tool_calls", ())]
            name = next((c["name"] for c in calls if c["id"] == call_id), "")
        message = {
            "role": "tool",
            "content": content,
            "tool_call_id": call_id,
            "name": name,
            "created_at": self._fields["created_at"],
        }
        if is_error:
            message["is_error"] = True
        self.messages.append(message)
        self._open = None

    def done(self, **last_fields: Any) -> list[dict[str, Any]]:
        replies = [m for m in self.messages if m["role"] == "assistant"]
        if replies:
            replies[-1].update({k: v for k, v in last_fields.items() if v})
        return self.messages
