"""A fixed-delay OpenAI-compatible upstream for P7: ``python upstream.py DELAY_S``.

Every ``POST /v1/chat/completions`` is answered after DELAY_S seconds with
the same short chat completion; ``GET /stats`` answers at once with the
number of completions served. Raw asyncio, HTTP/1.1 keep-alive, one request
at a time per connection (pipelined ones in order): it costs far less than
the delay, so it is never the bottleneck. It prints ``listening on URL``
on stderr once it accepts connections.
"""

from __future__ import annotations

import asyncio
import sys

COMPLETION = (
    b'{"id":"chatcmpl-bench","object":"chat.completion","created":0,"model":"bench",'
    b'"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},'
    b'"finish_reason":"stop","logprobs":null}],'
    b'"usage":{"prompt_tokens":8,"completion_tokens":1,"total_tokens":9}}'
)
NOT_FOUND = b'{"error":{"message":"no such route","type":"invalid_request_error"}}'


def response(status: bytes, body: bytes) -> bytes:
    head = b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    return head % (status, len(body)) + body


ANSWER = response(b"200 OK", COMPLETION)
MISSING = response(b"404 Not Found", NOT_FOUND)


class Upstream(asyncio.Protocol):
    served = 0

    def __init__(self, delay: float):
        self.delay = delay
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].lower()
            length = 0
            at = head.find(b"\r\ncontent-length:")
            if at >= 0:
                stop = head.find(b"\r\n", at + 2)
                length = int(head[at + 17 : stop if stop >= 0 else None])
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            if head.startswith(b"post /v1/chat/completions "):
                Upstream.served += 1
                self.loop.call_later(self.delay, self.send, ANSWER)
            elif head.startswith(b"get /stats "):
                self.send(response(b"200 OK", b'{"served":%d}' % Upstream.served))
            else:
                self.send(MISSING)

    def send(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def serve(delay: float) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Upstream(delay), "127.0.0.1", 0, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    print(f"listening on http://127.0.0.1:{port}", file=sys.stderr, flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(float(sys.argv[1])))
