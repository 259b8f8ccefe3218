"""A scripted ``httpx2.MockTransport`` for in-process provider tests.

``Script`` answers each request from the replies queued for its path (or a
default per path), recording every request (method, path, parsed body). No
sockets: the tests that need a real connection (cut-offs, chunking, a peer
that hangs up) use ``fake_servers.FakeServer``.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Any, NamedTuple

import httpx2
import orjson


class Sent(NamedTuple):
    method: str
    path: str
    headers: dict[str, str]
    body: Any


Answer = httpx2.Response | Callable[[Sent], Any]


def json_response(body: Any, status: int = 200) -> httpx2.Response:
    return httpx2.Response(status, json=body)


def chat_reply(
    text: str = "ok",
    *,
    usage: dict[str, Any] | None = None,
    finish_reason: str = "stop",
    tool_calls: list[dict[str, Any]] | None = None,
) -> httpx2.Response:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return json_response(
        {
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": usage or {"prompt_tokens": 10, "completion_tokens": 2},
        }
    )


def llama_overflow(prompt: int, window: int) -> httpx2.Response:
    """llama.cpp's answer to a prompt larger than its window."""
    return json_response(
        {
            "error": {
                "code": 400,
                "message": f"request ({prompt} tokens) exceeds the available context size "
                f"({window} tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": prompt,
                "n_ctx": window,
            }
        },
        status=400,
    )


class Script:
    def __init__(self) -> None:
        self.sent: list[Sent] = []
        self.queued: dict[str, collections.deque[Answer]] = collections.defaultdict(
            collections.deque
        )
        self.defaults: dict[str, Answer] = {}
        self.transport = httpx2.MockTransport(self._handle)

    def queue(self, path: str, *answers: Answer) -> None:
        self.queued[path].extend(answers)

    def on(self, path: str, answer: Answer) -> None:
        self.defaults[path] = answer

    def bodies(self, path: str) -> list[Any]:
        return [s.body for s in self.sent if s.path == path]

    async def _handle(self, request: httpx2.Request) -> httpx2.Response:
        content = await request.aread()
        sent = Sent(
            request.method,
            request.url.path,
            dict(request.headers),
            orjson.loads(content) if content else None,
        )
        self.sent.append(sent)
        queue = self.queued.get(sent.path)
        answer = queue.popleft() if queue else self.defaults.get(sent.path)
        if answer is None:
            return json_response({"error": {"message": f"no route {sent.path}"}}, 404)
        if callable(answer):
            answer = answer(sent)
            if asyncio.iscoroutine(answer):
                answer = await answer
        return answer
