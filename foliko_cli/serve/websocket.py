"""WebSocket mode on ``/v1/responses``: many responses over one connection.

The client sends ``{"type": "response.create", ...}`` (the body of ``POST
/v1/responses`` without ``stream`` or ``background``) and gets the events a
streamed response sends, one JSON text frame each, without ``[DONE]``.
Responses run one at a time in the order they came; a ``stream_id`` names a
lane of its own: lanes run side by side, each in order, and every event of a
lane's response carries its ``stream_id``.

A ``store: false`` response is kept in the connection's memory (the latest
one of each lane) so the next ``response.create`` can continue it by
``previous_response_id``; stored responses continue from storage, on any
connection. A continuation that fails drops the response it named from that
memory. Every failure is an ``error`` frame ``{type, status, error: {type,
code, message, param}}`` and the connection stays open. A connection lasts
at most ``LIFETIME_S``: then queued responses are refused, running ones
finish, and it closes with 1001 after ``websocket_connection_limit_reached``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from types import SimpleNamespace
from typing import Any

import msgspec
import orjson
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketDisconnected

from foliko_cli.errors import FolikoError
from foliko_cli.serve import ids
from foliko_cli.serve.errors import ApiError, error_body, status_of
from foliko_cli.serve.middleware import TraceIds
from foliko_cli.serve.openai_types import ResponseCreate, SocketMessage
from foliko_cli.serve.response_stream import response_events
from foliko_cli.serve.responses import finished_response, plan_turn
from foliko_cli.serve.schema import convert

LIFETIME_S = 60 * 60
MAX_LANES = 32
MAX_IN_FLIGHT = 16
GOING_AWAY = 1001
HTTP_ONLY = ("stream", "stream_options", "background")

_log = logging.getLogger("foliko.serve")
_Gone = (WebSocketDisconnect, WebSocketDisconnected)


class SocketError(ApiError):
    """An error only a socket answers; ``lane`` is the stream_id it concerns."""

    def __init__(self, status: int, message: str, *, lane: str | None = None, **fields: Any):
        super().__init__(status, message, **fields)
        self.lane = lane


def status_for(exc: BaseException) -> int:
    if isinstance(exc, ApiError):
        return exc.status
    if isinstance(exc, FolikoError):
        return status_of(exc).status
    return 500


def error_frame(exc: BaseException, lane: str | None) -> dict[str, Any]:
    if isinstance(exc, ApiError):
        status, message, code, param = exc.status, exc.message, exc.code, exc.param
    elif isinstance(exc, FolikoError):
        status, code = status_of(exc)[:2]
        message, param = str(exc), None
    else:
        status, message, code, param = 500, "internal error", "internal_error", None
    error = orjson.loads(error_body(status, message, code, param))["error"]
    if error["code"] is None:
        error["code"] = "invalid_request" if status < 500 else "server_error"
    return with_lane({"type": "error", "status": status, "error": error}, lane)


def with_lane(event: dict[str, Any], lane: str | None) -> dict[str, Any]:
    if lane is not None:
        event["stream_id"] = lane
    return event


def previous_not_found(previous: str) -> SocketError:
    return SocketError(
        400,
        f"no response {previous[:200]!r} to continue: a store: false response lives only "
        "on the connection that made it, the latest one of its lane; send the full input "
        "without previous_response_id",
        code="previous_response_not_found",
        param="previous_response_id",
    )


class TurnRequest:
    """What ``plan_turn`` reads of a request, for one response on the socket:
    the connection's app, headers and user, and a request id of its own (the
    id that groups a turn's messages into one response)."""

    def __init__(self, websocket: WebSocket):
        self.app = websocket.app
        self.scope = websocket.scope
        self.headers = websocket.headers
        state = websocket.state
        self.state = SimpleNamespace(
            user=state.user, scope=state.scope, client=state.client, ids=TraceIds(websocket.headers)
        )


class Memory:
    """The latest ``store: false`` response of each lane: its id and the whole
    history it ends (what continuing it starts from)."""

    def __init__(self) -> None:
        self._latest: dict[str | None, tuple[str, list[dict[str, Any]]]] = {}

    def history_of(self, response_id: Any) -> list[dict[str, Any]] | None:
        for kept_id, history in self._latest.values():
            if kept_id == response_id:
                return history
        return None

    def keep(self, lane: str | None, response_id: str, history: list[dict[str, Any]]) -> None:
        self._latest[lane] = (response_id, history)

    def forget(self, response_id: Any) -> None:
        for lane, (kept_id, _) in list(self._latest.items()):
            if kept_id == response_id:
                del self._latest[lane]


class Connection:
    def __init__(self, websocket: WebSocket, lifetime: float = LIFETIME_S):
        self.websocket = websocket
        self.lifetime = lifetime
        self.memory = Memory()
        self.lanes: dict[str | None, asyncio.Queue[dict[str, Any] | None]] = {}
        self.workers: list[asyncio.Task[Any]] = []
        self.in_flight = 0
        self._send_lock = asyncio.Lock()

    async def send(self, event: dict[str, Any]) -> None:
        async with self._send_lock:
            await self.websocket.send_text(msgspec.json.encode(event).decode())

    async def run(self) -> None:
        try:
            try:
                async with asyncio.timeout(self.lifetime):
                    await self._read()
            except TimeoutError:
                await self._end_at_limit()
        except _Gone:
            pass
        finally:
            for worker in self.workers:
                worker.cancel()
            await asyncio.gather(*self.workers, return_exceptions=True)

    async def _read(self) -> None:
        while True:
            message = await self.websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            raw = message.get("text")
            if raw is None:
                raw = message.get("bytes") or b""
            try:
                await self._accept(raw)
            except ApiError as exc:
                await self.send(error_frame(exc, getattr(exc, "lane", None)))

    async def _accept(self, raw: str | bytes) -> None:
        try:
            event = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise SocketError(400, f"the message is not valid JSON: {exc}") from None
        message = convert(event, SocketMessage)
        if message.type == "response.steer":
            await self._refuse_steer(event)
            return
        lane = message.stream_id
        named = len(self.lanes) - (None in self.lanes)
        if lane is not None and lane not in self.lanes and named >= MAX_LANES:
            raise self._limit(f"at most {MAX_LANES} stream_id lanes; reuse one", lane)
        if self.in_flight >= MAX_IN_FLIGHT:
            raise self._limit(
                f"at most {MAX_IN_FLIGHT} responses may wait or run; wait for one", lane
            )
        self._lane(lane).put_nowait(event)
        self.in_flight += 1

    @staticmethod
    def _limit(what: str, lane: str | None) -> SocketError:
        return SocketError(
            400,
            f"this WebSocket connection has reached its stream limit: {what}",
            code="websocket_stream_limit_reached",
            param="stream_id",
            lane=lane,
        )

    async def _refuse_steer(self, event: dict[str, Any]) -> None:
        failed = {
            "type": "response.steer.failed",
            "sequence_number": 0,
            "error": {
                "type": "invalid_request_error",
                "code": "steering_not_supported",
                "message": "foliko does not steer responses; send response.create when it ends",
            },
            "steer": {
                "input": event.get("input"),
                "previous_response_id": event.get("previous_response_id"),
            },
        }
        await self.send(failed)

    def _lane(self, lane: str | None) -> asyncio.Queue[dict[str, Any] | None]:
        queue = self.lanes.get(lane)
        if queue is None:
            queue = self.lanes[lane] = asyncio.Queue()
            self.workers.append(asyncio.ensure_future(self._work(lane, queue)))
        return queue

    async def _work(self, lane: str | None, queue: asyncio.Queue[dict[str, Any] | None]) -> None:
        try:
            while (event := await queue.get()) is not None:
                try:
                    await self._respond(lane, event)
                except _Gone:
                    raise
                except Exception as exc:
                    _log.error("internal error on a WebSocket response: %r", exc)
                    await self.send(error_frame(exc, lane))
                finally:
                    self.in_flight -= 1
        except _Gone:
            return

    async def _respond(self, lane: str | None, event: dict[str, Any]) -> None:
        body = {key: value for key, value in event.items() if key not in ("type", "stream_id")}
        previous = body.get("previous_response_id")
        failed = True
        try:
            failed = await self._stream(lane, body)
        finally:
            if failed and previous is not None:
                self.memory.forget(previous)

    async def _stream(self, lane: str | None, body: dict[str, Any]) -> bool:
        """Send one response's events; True when it failed."""
        previous = body.get("previous_response_id")
        services = self.websocket.app.state.services
        try:
            for name in HTTP_ONLY:
                if body.get(name) is not None:
                    raise SocketError(
                        400,
                        f"{name} is not sent over a WebSocket (every response streams); drop it",
                        code="invalid_value",
                        param=name,
                    )
            if body.get("generate") is False:
                raise SocketError(
                    400,
                    "generate: false (a warm-up) is not available; send the request without it",
                    code="invalid_value",
                    param="generate",
                )
            asked = convert(body, ResponseCreate)
            remembered = self.memory.history_of(previous)
            try:
                # TurnRequest has what plan_turn reads of a Request (not a subclass)
                request = TurnRequest(self.websocket)
                turn, options = await plan_turn(request, asked, remembered)  # type: ignore[arg-type]
            except ApiError as exc:
                if isinstance(previous, str) and _names_missing(exc, previous):
                    raise previous_not_found(previous) from None
                raise
            turn.api = "websocket"
            events = await turn.stream(services)
        except (ApiError, FolikoError) as exc:
            await self.send(error_frame(exc, lane))
            return True
        failure: list[BaseException] = []
        failed = False
        async with contextlib.AsyncExitStack() as generators:
            await generators.enter_async_context(contextlib.aclosing(events))
            watched = await generators.enter_async_context(
                contextlib.aclosing(_watched(events, failure))
            )
            stream = response_events(turn, watched, options, asked.model, finished_response)
            async for out in await generators.enter_async_context(contextlib.aclosing(stream)):
                if out["type"] == "error":
                    out["status"] = status_for(failure[0]) if failure else 500
                    failed = True
                await self.send(with_lane(out, lane))
        if not failed and not turn.stored:
            self.memory.keep(lane, turn.response_id, [*(turn.scratch or ()), *turn.messages])
        return failed

    async def _end_at_limit(self) -> None:
        """Refuse what waits, let what runs finish, then say why and close."""
        limit = SocketError(
            400,
            f"this WebSocket connection reached its {self.lifetime:g} s limit; open a new "
            "one and continue by previous_response_id (stored responses) or full input",
            code="websocket_connection_limit_reached",
        )
        for lane, queue in self.lanes.items():
            while not queue.empty():
                if queue.get_nowait() is not None:
                    self.in_flight -= 1
                    await self.send(error_frame(limit, lane))
            queue.put_nowait(None)
        await asyncio.gather(*self.workers, return_exceptions=True)
        await self.send(error_frame(limit, None))
        await self.websocket.close(GOING_AWAY)


def _names_missing(exc: ApiError, previous: str) -> bool:
    """``plan_turn`` found no response ``previous`` (not some other 404)."""
    return exc.status == 404 and exc.message == ids.response_not_found(previous).message


async def _watched(
    events: AsyncIterator[dict[str, Any]], failure: list[BaseException]
) -> AsyncGenerator[dict[str, Any], None]:
    """The turn's events; the exception that ends them lands in ``failure``."""
    try:
        async for event in events:
            yield event
    except Exception as exc:
        failure.append(exc)
        raise


async def responses_socket(websocket: WebSocket) -> None:
    await websocket.accept()
    await Connection(websocket).run()


routes = [WebSocketRoute("/v1/responses", responses_socket)]
