"""A real, scriptable model server on 127.0.0.1 for the provider tests.

``FakeServer`` listens on an ephemeral port in a background thread and answers
POST /v1/chat/completions (OpenAI chat completions) and POST /v1/messages
(Anthropic messages). Each test queues the replies it wants, in order; every
request is recorded (path, headers, parsed JSON body) before it is answered.

A ``Reply`` is a status, headers and either a JSON body or a list of
server-sent events. Streams are sent with chunked transfer encoding, one
chunk per event, so ``cut_after`` can end the connection abruptly half-way
(no terminating chunk: the client sees a broken body, not a clean end).
``stall`` makes the handler wait for a ``threading.Event`` before answering
(or, with ``stall_after``, after that many events), which the test sets when
it is done; stopping the server releases every stall. ``drop`` closes the
connection without answering at all (a connection error, not a cut-off).

The builders below (``openai_*``, ``anthropic_*``, ``error_reply``) produce
replies in each protocol's real wire format.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson

OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"
KNOWN_PATHS = (OPENAI_PATH, ANTHROPIC_PATH)
STALL_LIMIT = 60.0  # a forgotten stall never hangs the test run for longer
OPENAI_KEY = "test-key-123"
ANTHROPIC_KEY = "test-anthropic-key-456"


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # sent as JSON with a Content-Length
    events: list[str] | None = None  # or these server-sent events, one chunk each
    headers: dict[str, str] = field(default_factory=dict)
    cut_after: int | None = None  # events (or body bytes) sent before the connection breaks
    stall: threading.Event | None = None  # wait for it before answering ...
    stall_after: int | None = None  # ... or after this many events
    drop: bool = False  # close the connection without any answer


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw: bytes


ReplySource = Reply | Callable[[Recorded], Reply]


class FakeServer:
    """``queue`` replies in order; ``default`` answers when the queue is empty;
    a request nothing was planned for gets a 400 and counts in ``unplanned``."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.probes: list[Recorded] = []
        self.metadata: dict[str, Any] = {}  # GET path -> JSON answer
        self.default: ReplySource | None = None
        self.unplanned = 0
        self._replies: collections.deque[ReplySource] = collections.deque()
        self._lock = threading.Lock()
        self._stalls: list[threading.Event] = []
        self.arrived = threading.Condition(self._lock)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    # scripting

    def queue(self, *replies: ReplySource) -> None:
        with self._lock:
            for reply in replies:
                if isinstance(reply, Reply) and reply.stall is not None:
                    self._stalls.append(reply.stall)
                self._replies.append(reply)

    def wait_for_requests(self, count: int, timeout: float = 30.0) -> bool:
        with self.arrived:
            return self.arrived.wait_for(lambda: len(self.requests) >= count, timeout)

    # lifecycle

    def start(self) -> FakeServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def release(self) -> None:
        """Let every stalled handler go on."""
        with self._lock:
            stalls = list(self._stalls)
        for event in stalls:
            event.set()

    # serving

    def _next_reply(self, request: Recorded) -> Reply:
        with self._lock:
            self.requests.append(request)
            self.arrived.notify_all()
            source = self._replies.popleft() if self._replies else self.default
            if source is None:
                self.unplanned += 1
                return error_reply(400, "fake server: no reply was queued for this request")
        reply = source(request) if callable(source) else source
        if reply.stall is not None:
            with self._lock:
                self._stalls.append(reply.stall)
        return reply


class _Handler(BaseHTTPRequestHandler):
    """Answers for ``fake`` (set by ``_handler_for``: ``self.server`` is the HTTP server)."""

    protocol_version = "HTTP/1.1"
    fake: FakeServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _record_other(self) -> None:
        """Any other method (a proxy's CONNECT) is recorded and refused."""
        headers = {name.lower(): value for name, value in self.headers.items()}
        with self.fake._lock:
            self.fake.requests.append(Recorded(self.command, self.path, headers, None, b""))
            self.fake.arrived.notify_all()
        self._send(error_reply(405, f"fake server: {self.command} is not served"))

    def do_GET(self) -> None:
        """Metadata probes (``/v1/models``, ``/props``) go to ``probes``: answered
        from ``self.fake.metadata`` when the test set it, else 404."""
        headers = {name.lower(): value for name, value in self.headers.items()}
        with self.fake._lock:
            self.fake.probes.append(Recorded("GET", self.path, headers, None, b""))
        body = self.fake.metadata.get(self.path)
        if body is None:
            self._send(error_reply(404, f"fake server: no route {self.path}"))
        else:
            self._send(Reply(body=body))

    do_CONNECT = do_PUT = do_DELETE = _record_other

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            body = None
        headers = {name.lower(): value for name, value in self.headers.items()}
        recorded = Recorded("POST", self.path, headers, body, raw)
        if self.path not in KNOWN_PATHS:
            with self.fake._lock:
                self.fake.probes.append(recorded)
            answer = self.fake.metadata.get(self.path)
            if answer is None:
                self._send(error_reply(404, f"fake server: no route {self.path}"))
            else:
                self._send(Reply(body=answer))
            return
        self._send(self.fake._next_reply(recorded))

    def _send(self, reply: Reply) -> None:
        try:
            if reply.stall is not None and reply.stall_after is None:
                reply.stall.wait(STALL_LIMIT)
            if reply.drop:
                self._abort()
            elif reply.events is not None:
                self._send_events(reply)
            else:
                self._send_json(reply)
        except OSError:
            self.close_connection = True  # the client went away

    def _start(self, reply: Reply, content_type: str) -> None:
        self.send_response(reply.status)
        self.send_header("content-type", content_type)
        for name, value in reply.headers.items():
            self.send_header(name, value)

    def _send_json(self, reply: Reply) -> None:
        payload = orjson.dumps(reply.body) if reply.body is not None else b""
        self._start(reply, "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        if reply.cut_after is not None:
            self.wfile.write(payload[: reply.cut_after])
            self._abort()
            return
        self.wfile.write(payload)
        self.wfile.flush()

    def _send_events(self, reply: Reply) -> None:
        self._start(reply, "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for index, event in enumerate(reply.events or []):
            if index == reply.cut_after:
                self._abort()
                return
            if index == reply.stall_after and reply.stall is not None:
                reply.stall.wait(STALL_LIMIT)
            data = event.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        if reply.cut_after is not None and reply.cut_after >= len(reply.events or []):
            self._abort()
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _abort(self) -> None:
        """End the connection without finishing the body."""
        self.wfile.flush()
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


def _handler_for(server: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        fake = server

    return Handler


def free_port() -> int:
    """A port nothing listens on (bound once, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# server-sent events


def sse(data: Any, event: str | None = None) -> str:
    text = data if isinstance(data, str) else orjson.dumps(data).decode()
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n"


# errors


def error_reply(
    status: int,
    message: str,
    *,
    headers: dict[str, str] | None = None,
    protocol: str = "openai",
) -> Reply:
    if protocol == "anthropic":
        body = {"type": "error", "error": {"type": "api_error", "message": message}}
    else:
        body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    return Reply(status, body=body, headers=dict(headers or {}))


# OpenAI chat completions

ToolCallSpec = tuple[str, str, Any]  # (id, name, arguments)
_ids = itertools.count(1)


def openai_message(
    text: str | None = None,
    tool_calls: Sequence[ToolCallSpec] = (),
    *,
    usage: tuple[int, int] = (11, 7),
    model: str = "some-model",
    finish_reason: str | None = None,
) -> Reply:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": orjson.dumps(arguments).decode()},
            }
            for call_id, name, arguments in tool_calls
        ]
    return Reply(
        body={
            "id": f"chatcmpl-{next(_ids)}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
                }
            ],
            "usage": {
                "prompt_tokens": usage[0],
                "completion_tokens": usage[1],
                "total_tokens": sum(usage),
            },
        }
    )


def openai_stream_events(
    chunks: Iterable[str] = (),
    tool_calls: Sequence[ToolCallSpec] = (),
    *,
    usage: tuple[int, int] | None = (11, 7),
    model: str = "some-model",
    finish: bool = True,
    done: bool = True,
    finish_reason: str | None = None,
) -> list[str]:
    """``chat.completion.chunk`` events; tool call arguments arrive in two pieces."""
    ident = f"chatcmpl-{next(_ids)}"

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
        return sse(
            {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": 1_700_000_000,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }
        )

    events = [chunk({"role": "assistant", "content": ""}), ": keep-alive\n\n"]
    events += [chunk({"content": piece}) for piece in chunks]
    for index, (call_id, name, arguments) in enumerate(tool_calls):
        text = orjson.dumps(arguments).decode()
        half = len(text) // 2
        events.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": text[:half]},
                        }
                    ]
                }
            )
        )
        events.append(
            chunk({"tool_calls": [{"index": index, "function": {"arguments": text[half:]}}]})
        )
    if finish:
        events.append(chunk({}, finish_reason or ("tool_calls" if tool_calls else "stop")))
    if usage is not None:
        events.append(
            sse(
                {
                    "id": ident,
                    "object": "chat.completion.chunk",
                    "created": 1_700_000_000,
                    "model": model,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": usage[0],
                        "completion_tokens": usage[1],
                        "total_tokens": sum(usage),
                    },
                }
            )
        )
    if done:
        events.append(sse("[DONE]"))
    return events


@dataclass
class StreamedOrWhole(Reply):
    """Server-sent events when the request asks to stream, else ``whole`` as one JSON body."""

    whole: Reply | None = None

    def __call__(self, request: Recorded) -> Reply:
        if isinstance(request.body, dict) and request.body.get("stream"):
            return Reply(**{f.name: getattr(self, f.name) for f in dataclasses.fields(Reply)})
        return self.whole


def openai_stream(
    chunks: Iterable[str] = (), tool_calls: Sequence[ToolCallSpec] = (), **options: Any
) -> StreamedOrWhole:
    chunks = list(chunks)
    whole = {k: v for k, v in options.items() if k in ("usage", "model")}
    return StreamedOrWhole(
        events=openai_stream_events(chunks, tool_calls, **options),
        whole=openai_message("".join(chunks) or None, tool_calls, **whole),
    )


def chooses_tools(request: Recorded) -> Reply:
    """An upstream model that does what the echo model does, as its own choice:
    a last user message ``/tool NAME {json}`` gets the model's call of NAME (not
    one the user typed: approval applies), tool results get ``NAME returned:
    RESULT``, anything else is echoed. Streams when asked to."""
    messages = request.body.get("messages") or [{}]
    last = messages[-1]
    if last.get("role") == "tool":
        names = {}
        for message in messages:
            for call in message.get("tool_calls") or ():
                names[call["id"]] = call["function"]["name"]
        results = []
        for message in reversed(messages):
            if message.get("role") != "tool":
                break
            name = names.get(message.get("tool_call_id"), "tool")
            results.append(f"{name} returned: {message.get('content')}")
        return openai_stream(["\n".join(reversed(results))])(request)
    text = str(last.get("content") or "")
    if text.startswith("/tool "):
        name, _, arguments = text[6:].strip().partition(" ")
        call = (f"call_{next(_ids)}", name, orjson.loads(arguments or "{}"))
        return openai_stream(tool_calls=[call])(request)
    return openai_stream([text])(request)


# Anthropic messages


def anthropic_message(
    text: str | None = None,
    tool_uses: Sequence[ToolCallSpec] = (),
    *,
    usage: tuple[int, int] = (13, 5),
    model: str = "claude-x",
) -> Reply:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [
        {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
        for call_id, name, arguments in tool_uses
    ]
    return Reply(
        body={
            "id": f"msg_{next(_ids)}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": "tool_use" if tool_uses else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
        }
    )


def anthropic_stream_events(
    chunks: Iterable[str] = (),
    tool_uses: Sequence[ToolCallSpec] = (),
    *,
    usage: tuple[int, int] = (13, 5),
    model: str = "claude-x",
    stop: bool = True,
) -> list[str]:
    """A Messages stream: text deltas in block 0, then one block per tool use."""
    events = [
        sse(
            {
                "type": "message_start",
                "message": {
                    "id": f"msg_{next(_ids)}",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": usage[0], "output_tokens": 1},
                },
            },
            "message_start",
        ),
        sse({"type": "ping"}, "ping"),
    ]
    index = 0
    chunks = list(chunks)
    if chunks:
        events.append(
            sse(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
                "content_block_start",
            )
        )
        events += [
            sse(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": piece},
                },
                "content_block_delta",
            )
            for piece in chunks
        ]
        events.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
        index += 1
    for call_id, name, arguments in tool_uses:
        text = orjson.dumps(arguments).decode()
        half = len(text) // 2
        events.append(
            sse(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}},
                },
                "content_block_start",
            )
        )
        for piece in (text[:half], text[half:]):
            events.append(
                sse(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    },
                    "content_block_delta",
                )
            )
        events.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
        index += 1
    events.append(
        sse(
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": "tool_use" if tool_uses else "end_turn",
                    "stop_sequence": None,
                },
                "usage": {"output_tokens": usage[1]},
            },
            "message_delta",
        )
    )
    if stop:
        events.append(sse({"type": "message_stop"}, "message_stop"))
    return events


def anthropic_stream(
    chunks: Iterable[str] = (), tool_uses: Sequence[ToolCallSpec] = (), **options: Any
) -> StreamedOrWhole:
    chunks = list(chunks)
    whole = {k: v for k, v in options.items() if k in ("usage", "model")}
    return StreamedOrWhole(
        events=anthropic_stream_events(chunks, tool_uses, **options),
        whole=anthropic_message("".join(chunks) or None, tool_uses, **whole),
    )


# what a well-formed request looks like


OPENAI_MESSAGE_KEYS = {
    "system": {"role", "content"},
    "user": {"role", "content"},
    "assistant": {"role", "content", "tool_calls"},
    "tool": {"role", "content", "tool_call_id"},
}


def openai_protocol_problems(messages: list[dict[str, Any]]) -> list[str]:
    """Ways ``messages`` break the chat-completions rules; [] when well formed.

    Only the keys the protocol knows; a system message only first; the
    conversation starts with a user message; each assistant tool call is
    answered by exactly one tool message right after it (same id), and every
    tool message answers a call of the assistant message before it.
    """
    problems = []
    pending: list[str] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        extra = set(message) - OPENAI_MESSAGE_KEYS.get(role, set())
        if role not in OPENAI_MESSAGE_KEYS:
            problems.append(f"{index}: unknown role {role!r}")
            continue
        if extra:
            problems.append(f"{index}: unexpected keys {sorted(extra)}")
        if role == "system" and index != 0:
            problems.append(f"{index}: system message not first")
        first = 1 if messages and messages[0].get("role") == "system" else 0
        if index == first and role != "user":
            problems.append(f"{index}: the conversation starts with {role!r}, not 'user'")
        if role == "tool":
            if message.get("tool_call_id") not in pending:
                problems.append(f"{index}: tool result {message.get('tool_call_id')!r} unpaired")
            else:
                pending.remove(message["tool_call_id"])
            if not isinstance(message.get("content"), str):
                problems.append(f"{index}: tool content is not a string")
            continue
        if pending:
            problems.append(f"{index}: tool calls {pending} have no result before {role!r}")
            pending = []
        if role == "assistant" and message.get("tool_calls"):
            for call in message["tool_calls"]:
                if call.get("type") != "function" or not isinstance(
                    call.get("function", {}).get("arguments"), str
                ):
                    problems.append(f"{index}: malformed tool call {call!r}")
            pending = [call["id"] for call in message["tool_calls"]]
    if pending:
        problems.append(f"end: tool calls {pending} have no result")
    return problems


def anthropic_protocol_problems(messages: list[dict[str, Any]]) -> list[str]:
    """Ways ``messages`` break the Messages API rules; [] when well formed.

    Roles alternate starting with user; content is a list of blocks; every
    tool_use is answered by a tool_result in the very next (user) message,
    the tool_results first in it; no tool_result without its tool_use.
    """
    problems = []
    pending: set[str] = set()
    for index, message in enumerate(messages):
        role = message.get("role")
        expected = "user" if index % 2 == 0 else "assistant"
        if role != expected:
            problems.append(f"{index}: role {role!r}, expected {expected!r}")
        if set(message) != {"role", "content"}:
            problems.append(f"{index}: keys {sorted(message)}")
        blocks = message.get("content")
        if not isinstance(blocks, list) or not blocks:
            problems.append(f"{index}: content is not a non-empty list of blocks")
            continue
        results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        if set(results) != pending:
            problems.append(f"{index}: tool results {results} do not answer {sorted(pending)}")
        kinds = [b.get("type") for b in blocks]
        if results and kinds[: len(results)] != ["tool_result"] * len(results):
            problems.append(f"{index}: tool_result blocks are not first: {kinds}")
        for block in blocks:
            if block.get("type") == "text" and not block.get("text"):
                problems.append(f"{index}: empty text block")
            if block.get("type") == "tool_use" and not isinstance(block.get("input"), dict):
                problems.append(f"{index}: tool_use input is not an object")
        pending = {b["id"] for b in blocks if b.get("type") == "tool_use"}
        if pending and role != "assistant":
            problems.append(f"{index}: tool_use in a {role!r} message")
    if pending:
        problems.append(f"end: tool uses {sorted(pending)} have no result")
    return problems


# running foliko


def stored_bytes(home: Path) -> bytes:
    """Everything foliko wrote under ``home`` (databases, WAL files, JSON files)."""
    return b"".join(path.read_bytes() for path in sorted(home.rglob("*")) if path.is_file())


def foliko_executable() -> str:
    installed = Path(sys.executable).with_name("foliko")
    found = str(installed) if installed.exists() else shutil.which("foliko")
    assert found, "the foliko console script is not installed in this environment"
    return found


def run_in(
    cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    """Run the installed ``foliko`` in ``cwd`` (the project config is read from there)."""
    return subprocess.run(
        [foliko_executable(), *args],
        input=b"",
        capture_output=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=timeout,
    )
