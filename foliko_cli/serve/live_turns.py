"""``POST /v1/sessions/{id}/turns``: one turn of a session, its events streamed
as they happen (the web page's turns), and ``POST .../turns/{turn_id}/cancel``.

The body: ``message``; ``model``; ``attachments``, a list of ``{name, data}``
(base64: an image or a UTF-8 text file); ``regenerate`` (replace the last
turn by a new answer to its message, or with ``message``, by a turn of that
message: edit and resend); ``create`` (the session must not exist yet: the
turn creates it, titled after its message); ``system``, the session's own
system prompt from this turn on (kept in the turn's write). The name of the
model, as asked or the server's default (an alias in the config, say), is
kept as ``model_alias`` on the turn's first message.

A turn that fails before it holds its session, and before it is known to
wait for it, is an error answer (400, 404, 409, ...). Otherwise the answer is
server-sent events, one JSON object per ``data:`` line, each with its
``type``:

- ``waiting``: another turn holds the session (``holder`` says which, when
  known), and this one waits for it, up to its timeout: sent at once when the
  holder is a turn of this worker, after a second for one elsewhere (when
  the CLI says it waits);
- ``started``: it holds the session; ``turn_id`` names it for a cancel;
- ``delta`` (``text``), ``tool_call``, ``tool_result``: as they happen;
- ``done``: ``position`` and ``messages``, the turn's messages as stored
  (each reply with its model, usage and duration_ms), ``usage`` and
  ``duration_ms`` of the whole turn;
- ``cancelled``: stopped before it was saved: nothing of it was;
- ``error``: it failed (``error``: message, type, code); nothing was saved.

A cancel answers once the turn has ended: ``cancelled`` true when it was
stopped before it was saved, false when it had been saved (its events end
with ``done``). A client that closes the stream cancels the turn the same
way. The running turns are known to the worker running them: with several
workers a cancel reaching another one is a 404, and closing the stream is
what stops the turn.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request

from foliko_cli.messages.record import SessionRecord, new_metadata
from foliko_cli.serve.access_log import LOG_SESSION
from foliko_cli.serve.common import if_busy, request_context, service
from foliko_cli.serve.errors import SHUTTING_DOWN, ApiError, error_event
from foliko_cli.serve.native_types import Attachment, TurnCancelled, TurnCreate
from foliko_cli.serve.schema import Api
from foliko_cli.serve.sse import EventStream
from foliko_cli.serve.turns import Turn

TITLE_LENGTH = 60
_END = object()

_running: dict[tuple[str | None, str], LiveTurn] = {}

api = Api("Sessions")


def title_of(message: str | None, names: list[str]) -> str:
    """A new session's title: its first message's first line of text, shortened."""
    for line in (message or "").splitlines():
        line = " ".join(line.lstrip("#>*-+ \t").split())  # a heading's or a list's marks
        if line:
            return line if len(line) <= TITLE_LENGTH else line[: TITLE_LENGTH - 1] + "…"
    return names[0] if names else "New session"


def _attachments(given: list[Attachment] | None) -> list[Any]:
    from foliko_cli.messages.attachments import Attachment as File

    found = []
    for number, item in enumerate(given or (), start=1):
        name = (item.name or "").strip()
        if not name:
            raise ApiError(400, f"attachment {number} needs a name", param="attachments")
        if item.data is None:
            raise ApiError(400, f"attachment {name!r} needs its data, base64", param="attachments")
        try:
            found.append(File(name, base64.b64decode(item.data, validate=True)))
        except (binascii.Error, ValueError):
            raise ApiError(
                400, f"attachment {name!r}: its data is not base64", param="attachments"
            ) from None
    return found


def plan(request: Request, body: TurnCreate) -> Turn:
    """The turn the request asks for (its input checked)."""
    svc = service(request)
    session_id = request.path_params["session_id"]
    message, regenerate, create = body.message, body.regenerate, body.create
    attachments = _attachments(body.attachments)
    if regenerate and create:
        raise ApiError(400, "a new session has no turn to regenerate", param="regenerate")
    if message is None and not regenerate:
        raise ApiError(400, "message is required", param="message")
    target: dict[str, Any] = {}
    picked = svc.model_name(body.model)  # the name asked for, or the default's
    if create:
        title = title_of(message, [a.name for a in attachments])
        start = SessionRecord(session_id, metadata={**new_metadata(), "title": title})
        target = {"start_from": start, "expected_revision": 0}
    return Turn(
        svc,
        session_id,
        message,  # None: regenerate the last one's
        api="sessions",
        model=body.model,
        request=request_context(request, svc),
        if_busy=if_busy(request),
        regenerate=regenerate,
        attachments=attachments,
        system=body.system,
        annotations={"model_alias": picked} if isinstance(picked, str) else None,
        **target,
    )


class LiveTurn:
    """A turn run in a task of its own, its events queued for the stream."""

    def __init__(self, turn: Turn, services: Any, turn_id: str):
        self.turn = turn
        self.turn_id = turn_id
        self.events: asyncio.Queue[Any] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        self.started = loop.create_future()
        self.waiting = loop.create_future()
        with turn.service.listening_for_waits(self._waiting):
            self.task = asyncio.ensure_future(self._run(services))

    def _waiting(self, session_id: str, holder: str | None) -> None:
        if self.waiting.done() or session_id != self.turn.session_id:
            return
        self.waiting.set_result(holder)
        who = f" (held by {holder})" if holder else ""
        self.events.put_nowait(
            {
                "type": "waiting",
                "holder": holder,
                "message": f"another turn is running in this session{who}; this one "
                "starts when it ends (stop it to give up)",
            }
        )

    async def _run(self, services: Any) -> None:
        try:
            events = await self.turn.stream(services)
            self.started.set_result(True)
            self.events.put_nowait({"type": "started", "turn_id": self.turn_id})
            async for event in events:
                self.events.put_nowait(event)
        finally:
            if not self.started.done():
                self.started.set_result(False)
            self.events.put_nowait(_END)

    async def saved(self) -> bool:
        """Whether the turn's messages are stored (a cancel may come too late)."""
        turn = self.turn
        if turn.result is not None:
            return True
        if not self.started.done() or not self.started.result():
            return False
        from foliko_cli.errors import SessionNotFoundError

        try:
            record = await turn.service.session_window(
                turn.session_id,  # type: ignore[arg-type]
                turn.start,
                turn.start + 1,
            )
        except SessionNotFoundError:  # the turn was to create it
            return False
        stored = record.messages
        return bool(stored) and stored[0].get("request_id") == turn.context.request_id

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)

    async def stream(self) -> AsyncIterator[dict[str, Any]]:
        try:
            while (event := await self.events.get()) is not _END:
                yield self._shown(event)
            await asyncio.gather(self.task, return_exceptions=True)
            if self.task.cancelled():
                yield self._done() if await self.saved() else {"type": "cancelled"}
            elif (failure := self.task.exception()) is not None:
                yield {"type": "error", "error": error_event(failure)}
        finally:
            self.forget()
            self.task.cancel()  # when the client left: the turn stops, nothing is saved

    def _shown(self, event: dict[str, Any]) -> dict[str, Any]:
        if event["type"] == "done":
            return self._done()
        return event

    def _done(self) -> dict[str, Any]:
        turn, result = self.turn, self.turn.result
        return {
            "type": "done",
            "position": turn.start,
            "messages": turn.messages,
            "usage": result.usage if result else {},
            "duration_ms": result.duration_ms if result else None,
        }

    def forget(self) -> None:
        key = (self.turn.user, self.turn_id)
        if _running.get(key) is self:
            del _running[key]


def _ending() -> list[dict[str, Any]]:
    return [{"type": "error", "error": error_event(SHUTTING_DOWN)}]


_ONE = "/v1/sessions/{session_id:id}/turns"


@api.post(_ONE, body=TurnCreate, events=True)
async def create_turn(request: Request, body: TurnCreate) -> Any:
    """Run one turn, its events streamed (the web app's turns).

    Each event's data is a JSON object whose type is waiting, started
    (turn_id), delta, tool_call or tool_result, then done (position,
    messages, usage, duration_ms), cancelled or error."""
    turn = plan(request, body)
    setattr(request.state, LOG_SESSION, turn.session_id)
    live = LiveTurn(turn, request.app.state.services, request.state.ids.request_id)
    _running[(turn.user, live.turn_id)] = live
    try:
        await asyncio.wait({live.started, live.waiting}, return_when=asyncio.FIRST_COMPLETED)
        if live.started.done() and not live.started.result():
            live.forget()
            await asyncio.gather(live.task, return_exceptions=True)
            live.task.result()  # raises what stopped the turn before it started
    except BaseException:
        live.forget()
        if not live.task.done():
            await live.stop()
        raise
    return EventStream(live.stream(), ending=_ending)


@api.post(_ONE + "/{turn_id:id}/cancel", answer=TurnCancelled)
async def cancel_turn(request: Request) -> Any:
    """Stop a running turn: nothing of it is saved (``cancelled`` false: it was)."""
    turn_id = request.path_params["turn_id"]
    await service(request).check_access(request.path_params["session_id"], write=True)
    live = _running.get((request.state.user, turn_id))
    if live is None or live.turn.session_id != request.path_params["session_id"]:
        raise ApiError(
            404,
            f"no turn {turn_id[:100]!r} is running in this session on this server worker; "
            "close its stream to stop it",
            code="not_found",
        )
    await live.stop()
    return TurnCancelled(turn_id=turn_id, cancelled=not await live.saved())


routes = api.routes
