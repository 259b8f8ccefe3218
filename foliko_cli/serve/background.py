"""Background responses (``background: true``): the turn runs after the request
has returned, and every worker sharing the storage can follow it.

A background response's id is ``resp_bgR_SCOPE`` (ids.py): the turn that
request R writes in SCOPE's session. Where in the session is known only once
the turn holds the session's lock, so while it runs the response lives in a
*journal*: a session of its own, ``.foliko/background/R``, in the same
storage (and the same user's view of it) as its conversation. The journal's
variables hold

- ``response``: the Response object as it stands; its ``status`` goes
  ``queued`` (waiting for the session) → ``in_progress`` → ``completed``,
  ``incomplete``, ``failed`` or ``cancelled``;
- ``events``: the stream's events so far, when it was created with
  ``stream: true`` (what ``GET ?stream=true&starting_after=N`` replays);
- ``turn``: the session and the item number of the turn's first message, once it started;
- ``heartbeat``: when the worker running the turn last wrote (ms);
- ``cancel``: set by any worker asked to cancel it; ``finished_at`` (ms).

The worker running the turn writes the journal in batches: at most once per
FLUSH_S while events arrive, at least once per HEARTBEAT_S, and at the end.
Every write is a compare-and-set on the journal's revision, so a cancel
request written meanwhile is never lost, and reads ``cancel`` back: a cancel
asked of another worker is noticed at the running worker's next write. Other
workers read the journal, waiting for it to change with the storage's poll
helper (backing off up to FLUSH_S). A running journal whose heartbeat is
older than the lease (its worker died) is settled by the first reader that
sees it: completed when the turn was saved after all, else failed (or
cancelled, when a cancel was asked). The servers' clocks must agree to well
within the lease.

Cancelling cancels the turn's task: the engine then saves nothing of it,
unless its write had already committed (then the turn stands and the
response is completed). Finished journals are kept for the retention time
(10 minutes, as OpenAI keeps background responses for polling) and then
deleted by a later background request of the same user on that worker. The
id still resolves afterwards, to the stored turn: request R's messages in
SCOPE's session. A turn that fell back to a fork (its previous response
stopped being the latest before it ran) is in another session: its journal
is kept, without its events, as the pointer.

Journals are foliko's own sessions (``service.common.is_internal``):
``sessions list`` and ``chat --continue`` leave them out. A journal's
metadata names its session (``session``), so forgetting that session
removes the journal too (service/forgetting.py).

``FOLIKO_SERVE_BACKGROUND_LEASE`` (seconds, default 15) and
``FOLIKO_SERVE_BACKGROUND_RETENTION`` (seconds, default 600) change the
lease and the retention time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import msgspec
from starlette.requests import Request

from foliko_cli.common.clock import now_ms
from foliko_cli.common.poll import poll
from foliko_cli.errors import ConflictError
from foliko_cli.messages.item_numbers import number_of, offset_of
from foliko_cli.messages.record import SessionState, new_metadata
from foliko_cli.serve import ids
from foliko_cli.serve.common import keep_service, service
from foliko_cli.serve.errors import ApiError
from foliko_cli.serve.openai_types import Response, ResponseCreate, ResponseQuery
from foliko_cli.serve.response_object import response_object
from foliko_cli.serve.response_stream import error_of, response_events
from foliko_cli.serve.sse import DONE, EventStream
from foliko_cli.serve.turns import Turn
from foliko_cli.service import AsyncFoliko
from foliko_cli.service.common import INTERNAL_PREFIX

if TYPE_CHECKING:
    from foliko_cli.serve.state import Services

JOURNAL_PREFIX = INTERNAL_PREFIX + "background/"
FLUSH_S = 0.1
HEARTBEAT_S = 1.0
LEASE_ENV = "FOLIKO_SERVE_BACKGROUND_LEASE"
RETENTION_ENV = "FOLIKO_SERVE_BACKGROUND_RETENTION"
PRUNE_EVERY_S = 60.0
RUNNING = ("queued", "in_progress")
SAVED = ("completed", "incomplete")

_log = logging.getLogger("foliko.serve")


class Hooks(NamedTuple):
    """What this module uses of responses.py (which imports it)."""

    plan: Callable[[Request, ResponseCreate], Awaitable[tuple[Turn, dict[str, Any]]]]
    finished: Callable[[Turn, dict[str, Any], str | None], Response]
    stored: Callable[[AsyncFoliko, str], Awaitable[Response]]
    """The Response object of a stored turn (``resp_P_S``); a 404 when it is gone."""


def _seconds(name: str, default: float) -> float:
    try:
        return max(0.0, float(os.environ.get(name, default)))
    except ValueError:
        return default


def lease_s() -> float:
    return max(_seconds(LEASE_ENV, 15.0), 2 * HEARTBEAT_S)


def journal_id(request_id: str) -> str:
    return JOURNAL_PREFIX + request_id


def _stale(variables: dict[str, Any]) -> bool:
    return (
        variables["response"]["status"] in RUNNING
        and now_ms() - variables.get("heartbeat", 0) > lease_s() * 1000
    )


def _named(response: Response | dict[str, Any], response_id: str) -> dict[str, Any]:
    """The response (as plain JSON values, as the journal keeps it) under its id."""
    return {**msgspec.to_builtins(response), "id": response_id, "background": True}


# the journal


async def _load(svc: AsyncFoliko, journal: str) -> dict[str, Any] | None:
    record = await svc.get_state(journal)
    return None if record is None else {**record.variables, "revision": record.revision}


async def _update(
    svc: AsyncFoliko, journal: str, change: Callable[[dict[str, Any]], bool]
) -> dict[str, Any] | None:
    """Apply ``change`` to the journal's variables (it returns False: nothing to
    write) as a compare-and-set, again on a conflict; the variables, or None
    when there is no journal."""
    while True:
        record = await svc.get_state(journal)
        if record is None:
            return None
        variables = record.variables
        if not change(variables):
            return {**variables, "revision": record.revision}
        state = SessionState(variables, record.metadata, record.compression_state)
        try:
            revision = await svc.storage.append(
                journal, [], state, expected_revision=record.revision
            )
        except ConflictError:
            continue
        return {**variables, "revision": revision}


async def _turn_number(svc: AsyncFoliko, session_id: str, request_id: str) -> int | None:
    """The item number of request ``request_id``'s turn's first message in
    ``session_id``, if it was saved."""
    record = await svc.storage.load(session_id)
    if record is None:
        return None
    offset = offset_of(record.metadata)
    for index, message in enumerate(record.messages):
        if message.get("request_id") == request_id:
            return number_of(message, record.first_seq + index, offset)
    return None


# running a response (on the worker that took the request)


class Run:
    """A background response this worker runs: the turn's task, its events and
    the journal writes."""

    def __init__(
        self,
        svc: AsyncFoliko,
        response_id: str,
        request_id: str,
        streamed: bool,
        queued: dict[str, Any],
    ):
        self.svc = svc
        self.id = response_id
        self.journal = journal_id(request_id)
        self.streamed = streamed
        self.response = queued
        self.events: list[dict[str, Any]] = []
        self.turn_at: dict[str, Any] | None = None
        self.finished = False
        self._tick = asyncio.Event()
        self._dirty = asyncio.Event()
        self._play: asyncio.Task[Any] | None = None
        self.task: asyncio.Task[Any] | None = None

    def initial_journal(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "response": self.response,
            "events": [],
            "stream": self.streamed,
            "turn": None,
            "heartbeat": now_ms(),
            "cancel": False,
            "finished_at": None,
        }

    def start(
        self,
        turn: Turn,
        options: dict[str, Any],
        model: str | None,
        services: Services,
        hooks: Hooks,
    ) -> None:
        self._play = asyncio.ensure_future(self._run_turn(turn, options, model, services, hooks))
        self.task = asyncio.ensure_future(self._main(turn, options, model, hooks))

    def _changed(self) -> None:
        self._tick.set()
        self._tick = asyncio.Event()
        self._dirty.set()

    def _add(self, kind: str, **fields: Any) -> None:
        if self.streamed:
            self.events.append({"type": kind, "sequence_number": len(self.events), **fields})

    def _failed(self, exc: Exception) -> None:
        event, failure = error_of(exc, len(self.events))
        self.response = {**self.response, "status": "failed", "error": failure}
        if self.streamed:
            self.events.append(event)
        self._add("response.failed", response=self.response)

    async def _run_turn(
        self,
        turn: Turn,
        options: dict[str, Any],
        model: str | None,
        services: Services,
        hooks: Hooks,
    ) -> None:
        events = await turn.stream(services)
        self.turn_at = {"session": turn.session_id, "number": turn.first_item}
        async for event in response_events(turn, events, options, model, hooks.finished):
            if "response" in event:
                event["response"] = self.response = _named(event["response"], self.id)
            if self.streamed:
                self.events.append(msgspec.to_builtins(event))
            self._changed()

    async def _main(
        self, turn: Turn, options: dict[str, Any], model: str | None, hooks: Hooks
    ) -> None:
        assert self._play is not None
        writer = asyncio.ensure_future(self._keep_journal())
        await asyncio.wait([self._play])
        try:
            self._play.result()
        except asyncio.CancelledError:
            if turn.result is not None:  # its write had committed: the turn stands
                self.response = _named(hooks.finished(turn, options, model), self.id)
                self._add(f"response.{self.response['status']}", response=self.response)
            else:
                self.response = {**self.response, "status": "cancelled"}
        except Exception as exc:
            self._failed(exc)
        self.finished = True
        self._changed()
        await writer
        await self._write_final()

    async def _keep_journal(self) -> None:
        while not self.finished:
            await asyncio.sleep(FLUSH_S)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(HEARTBEAT_S - FLUSH_S):
                    await self._dirty.wait()
            if self.finished:
                return
            self._dirty.clear()
            try:
                await self._write()
            except Exception as exc:  # a storage hiccup: the next write tries again
                _log.warning("background response %s: the journal write failed: %s", self.id, exc)

    async def _write(self, **final: Any) -> None:
        written = {
            "response": self.response,
            "events": list(self.events),
            "turn": self.turn_at,
            "heartbeat": now_ms(),
            **final,
        }

        def change(variables: dict[str, Any]) -> bool:
            variables.update(written)
            return True

        stored = await _update(self.svc, self.journal, change)
        if stored and stored.get("cancel") and self._play and not self._play.done():
            self._play.cancel()

    async def _write_final(self) -> None:
        for attempt in range(5):
            try:
                await self._write(finished_at=now_ms())
                return
            except Exception as exc:
                _log.warning("background response %s: the final write failed: %s", self.id, exc)
                await asyncio.sleep(0.2 * 2**attempt)

    async def cancel(self) -> None:
        if self._play is not None and not self._play.done():
            self._play.cancel()
        assert self.task is not None
        await asyncio.wait([self.task])

    async def events_after(self, after: int) -> AsyncIterator[dict[str, Any]]:
        seen = after
        while True:
            tick = self._tick
            for event in self.events[seen + 1 :]:
                seen = event["sequence_number"]
                yield event
            if self.finished:
                return
            await tick.wait()


_RUNS: dict[str, Run] = {}  # the background responses this worker process runs, by id


# the routes (responses.py calls them for background ids)


async def create(request: Request, body: ResponseCreate, hooks: Hooks) -> Any:
    if not body.store:
        raise ApiError(
            400,
            "a background response must be stored: send store: true, or no background",
            param="background",
        )
    streamed, model = body.stream, body.model
    turn, options = await hooks.plan(request, body)
    assert turn.session_id is not None
    await turn.admit(request.app.state.services)  # a 429 now, not a failed response
    svc = service(request)
    request_id = turn.context.request_id
    response_id = ids.background_response_id(request_id, ids.scope_of(turn.session_id))
    queued = response_object(
        response_id=response_id,
        session_id=turn.session_id,
        output=[],
        outputs=[],
        model=model,
        status="queued",
        options=options,
        created_at=turn.created_at,
    )
    run = Run(svc, response_id, request_id, streamed, _named(queued, response_id))
    # "session": the session whose content it holds (a forget of it removes it too)
    state = SessionState(run.initial_journal(), {**new_metadata(), "session": turn.session_id}, {})
    await svc.storage.append(run.journal, [], state, expected_revision=0)
    _RUNS[response_id] = run
    release = keep_service(request)
    run.start(turn, options, model, request.app.state.services, hooks)
    assert run.task is not None
    run.task.add_done_callback(lambda _: (_RUNS.pop(response_id, None), release()))
    _prune_soon(request, svc)
    if not streamed:
        return run.response
    return _sse(run.events_after(-1))


def _sse(events: AsyncIterator[dict[str, Any]]) -> EventStream:
    async def then_done() -> AsyncIterator[Any]:
        async for event in events:
            yield event
        yield DONE

    return EventStream(then_done(), named=True)


async def _journal_of(
    svc: AsyncFoliko, response_id: str, hooks: Hooks | None = None
) -> dict[str, Any] | None:
    """The journal's variables, settled first when its worker died (with ``hooks``)."""
    request_id, _ = ids.parse_background_id(response_id) or ("", "")
    journal = journal_id(request_id)
    variables = await _load(svc, journal)
    if variables is not None and hooks is not None and _stale(variables):
        variables = await _settle(svc, response_id, journal, variables, hooks)
    return variables


async def _settle(
    svc: AsyncFoliko, response_id: str, journal: str, variables: dict[str, Any], hooks: Hooks
) -> dict[str, Any]:
    """End a journal whose worker stopped writing: completed when its turn was
    saved after all, else failed (cancelled when a cancel was asked)."""
    request_id, planned = ids.parse_background_id(response_id) or ("", "")
    session_id = (variables.get("turn") or {}).get("session") or planned
    number = await _turn_number(svc, session_id, request_id)
    response = variables["response"]
    if number is not None:
        turn_id = ids.response_id(ids.scope_of(session_id), number)
        stored = msgspec.to_builtins(await hooks.stored(svc, turn_id))
        response = _named({**stored, **_echoed(response), "status": stored["status"]}, response_id)
        ending: dict[str, Any] = {"type": f"response.{response['status']}", "response": response}
    elif variables.get("cancel"):
        response = {**response, "status": "cancelled"}
        ending = {}
    else:
        failure = {
            "code": "server_error",
            "message": "the server running this response stopped; nothing of it was saved",
        }
        response = {**response, "status": "failed", "error": failure}
        ending = {"type": "response.failed", "response": response}
    turn_at = {"session": session_id, "number": number} if number is not None else None

    def change(current: dict[str, Any]) -> bool:
        if not _stale(current):
            return False
        if ending and current.get("stream"):
            events = current.get("events") or []
            if number is not None:  # what its worker saved but did not stream
                events.extend(_unstreamed(events, response))
            events.append({**ending, "sequence_number": len(events)})
            current["events"] = events
        current.update(response=response, turn=turn_at, finished_at=now_ms())
        return True

    return await _update(svc, journal, change) or variables


def _unstreamed(events: list[dict[str, Any]], response: dict[str, Any]) -> list[dict[str, Any]]:
    """The events that finish streaming ``response``'s output after ``events``
    (its worker died after saving the turn, before streaming all of it): for
    each message, what was not yet added, the text not yet sent as deltas and
    the ``done`` events; for each other item, its ``output_item.done``. So the
    deltas of a stream always add up to the response's text."""
    seen = len(events)
    added = {e["item"]["id"] for e in events if e["type"] == "response.output_item.added"}
    done = {e["item"]["id"] for e in events if e["type"] == "response.output_item.done"}
    sent: dict[str, str] = {}
    for event in events:
        if event["type"] == "response.output_text.delta":
            sent[event["item_id"]] = sent.get(event["item_id"], "") + event["delta"]
    out: list[dict[str, Any]] = []

    def add(kind: str, **fields: Any) -> None:
        out.append({"type": kind, "sequence_number": seen + len(out), **fields})

    for index, item in enumerate(response.get("output") or ()):
        if item["id"] in done:
            continue
        if item.get("type") != "message":
            add("response.output_item.done", output_index=index, item=item)
            continue
        parts = item.get("content") or []
        text = parts[0].get("text", "") if parts else ""
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        if item["id"] not in added:
            shell = {**item, "status": "in_progress", "content": []}
            add("response.output_item.added", output_index=index, item=shell)
            empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            add("response.content_part.added", **where, part=empty)
        already = sent.get(item["id"], "")
        if text.startswith(already) and len(text) > len(already):
            add("response.output_text.delta", **where, delta=text[len(already) :], logprobs=[])
        add("response.output_text.done", **where, text=text, logprobs=[])
        if parts:
            add("response.content_part.done", **where, part=parts[0])
        add("response.output_item.done", output_index=index, item=item)
    return out


def _echoed(response: dict[str, Any]) -> dict[str, Any]:
    """What the request asked for, which a response rebuilt from storage lacks."""
    keys = ("instructions", "metadata", "tools", "tool_choice", "temperature", "top_p", "text")
    return {key: response[key] for key in keys if key in response}


async def _state(
    svc: AsyncFoliko, response_id: str, hooks: Hooks | None = None
) -> dict[str, Any] | None:
    """The response as it stands: this worker's run, else the journal (None: none)."""
    run = _RUNS.get(response_id)
    if run is not None:
        return {
            "response": run.response,
            "stream": run.streamed,
            "turn": run.turn_at,
            "heartbeat": now_ms(),
        }
    return await _journal_of(svc, response_id, hooks)


async def _stored_object(svc: AsyncFoliko, response_id: str, hooks: Hooks) -> dict[str, Any]:
    return _named(await hooks.stored(svc, await stored_id(svc, response_id)), response_id)


async def current(request: Request, response_id: str, hooks: Hooks) -> dict[str, Any]:
    svc = service(request)
    state = await _state(service(request), response_id, hooks)
    if state is None:
        return await _stored_object(svc, response_id, hooks)
    response = state["response"]
    if response["status"] in SAVED:
        await hooks.stored(svc, await stored_id(svc, response_id))  # a 404 once deleted
    return cast("dict[str, Any]", response)


async def get(request: Request, query: ResponseQuery, hooks: Hooks) -> Any:
    response_id = request.path_params["response_id"]
    if not query.stream:
        return await current(request, response_id, hooks)
    after = query.starting_after
    run = _RUNS.get(response_id)
    state = await _state(service(request), response_id, hooks)
    if state is None:
        await _stored_object(service(request), response_id, hooks)  # 404 when unknown
        raise ApiError(
            400,
            "this background response finished and its events are no longer kept; "
            "get it without stream",
            param="stream",
        )
    if not state.get("stream"):
        raise ApiError(
            400,
            "only a background response created with stream: true can be streamed; "
            "get it without stream",
            param="stream",
        )
    if run is not None:
        return _sse(run.events_after(after))
    return _sse(_journal_events(service(request), response_id, state, after, hooks))


async def _journal_events(
    svc: AsyncFoliko, response_id: str, variables: dict[str, Any], after: int, hooks: Hooks
) -> AsyncIterator[dict[str, Any]]:
    seen = after
    while True:
        events = variables.get("events") or ()
        for event in events:
            if event["sequence_number"] > seen:
                seen = event["sequence_number"]
                yield event
        if variables["response"]["status"] not in RUNNING:
            if events and events[-1]["sequence_number"] <= after and "response" in events[-1]:
                # The client saw events live that the journal never kept (their
                # server died before writing them; the ending's number may even be
                # one it saw for another event): it still gets how it ended.
                yield {**events[-1], "sequence_number": after + 1}
            return
        changed = await _changed(svc, response_id, variables["revision"], hooks)
        if changed is None:
            return
        variables = changed


async def _changed(
    svc: AsyncFoliko, response_id: str, revision: int, hooks: Hooks
) -> dict[str, Any] | None:
    """The journal once it has another revision than ``revision`` (settled when
    its worker stopped writing); None when it is gone."""
    found: dict[str, Any] | None = None

    async def moved() -> bool:
        nonlocal found
        found = await _journal_of(svc, response_id)
        return found is None or found["revision"] != revision or _stale(found)

    while not await poll(moved, time.monotonic() + lease_s(), max_delay=FLUSH_S):
        pass
    if found is not None and _stale(found):
        found = await _journal_of(svc, response_id, hooks)
    return found


async def cancel(request: Request, hooks: Hooks) -> dict[str, Any]:
    """Stop the turn and save nothing of it; a finished response is returned as it is."""
    svc = service(request)
    response_id = request.path_params["response_id"]
    run = _RUNS.get(response_id)
    if run is not None:
        await run.cancel()
        return run.response
    state = await _journal_of(svc, response_id, hooks)
    if state is None:
        return await _stored_object(svc, response_id, hooks)
    if state["response"]["status"] in RUNNING:

        def ask(variables: dict[str, Any]) -> bool:
            if variables["response"]["status"] not in RUNNING:
                return False
            variables["cancel"] = True
            return True

        parsed = ids.parse_background_id(response_id)
        assert parsed is not None  # its journal was found under this id
        await _update(svc, journal_id(parsed[0]), ask)
        while state is not None and state["response"]["status"] in RUNNING:
            state = await _changed(svc, response_id, state["revision"], hooks)
        if state is None:
            raise ids.response_not_found(response_id)
    return cast("dict[str, Any]", state["response"])


async def stored_id(svc: AsyncFoliko, response_id: str) -> str:
    """The ``resp_N_S`` id of a finished background response's turn; a 404 when
    it saved nothing, a 400 while it runs."""
    request_id, planned = ids.parse_background_id(response_id) or ("", "")
    missing = ids.response_not_found(response_id)
    state = await _state(svc, response_id)
    if state is not None and not _stale(state):
        status = state["response"]["status"]
        if status in RUNNING:
            raise ApiError(
                400,
                f"response {response_id!r} is still {status}; wait until it has finished",
                param="response_id",
                code="response_in_progress",
            )
        if status not in SAVED or not state.get("turn"):
            raise missing
        turn = state["turn"]
        number = turn["number"] if "number" in turn else turn["position"]
        return ids.response_id(ids.scope_of(turn["session"]), number)
    found = await _turn_number(svc, planned, request_id)
    if found is None:
        raise missing
    return ids.response_id(ids.scope_of(planned), found)


# pruning finished journals


def _prune_soon(request: Request, svc: AsyncFoliko) -> None:
    state = request.app.state
    retention = _seconds(RETENTION_ENV, 600.0)
    last = getattr(state, "background_pruned", None)
    now = time.monotonic()
    if last is not None and now - last < min(PRUNE_EVERY_S, retention):
        return
    state.background_pruned = now
    tasks: set[asyncio.Task[None]] = getattr(state, "background_pruning", set())
    state.background_pruning = tasks
    task = asyncio.ensure_future(_prune(svc, retention))
    tasks.add(task)
    task.add_done_callback(tasks.discard)


async def _prune(svc: AsyncFoliko, retention: float) -> None:
    cutoff = now_ms() - retention * 1000
    try:
        journals = [s for s in await svc.storage.session_ids() if s.startswith(JOURNAL_PREFIX)]
        for journal in journals:
            record = await svc.get_state(journal)
            if record is None:
                continue
            variables = record.variables
            ended = variables.get("finished_at")
            if ended is None and _stale(variables):  # its worker died and no one looked
                ended = variables.get("heartbeat", 0)
            if ended is None or ended > cutoff:
                continue
            planned = (ids.parse_background_id(variables.get("id")) or ("", ""))[1]
            elsewhere = (variables.get("turn") or {}).get("session") not in (None, planned)
            saved = variables.get("response", {}).get("status") in SAVED
            if elsewhere and saved:
                if variables.get("events"):
                    await _update(svc, journal, _without_events)
                continue
            with contextlib.suppress(ConflictError):
                await svc.storage.delete(journal, expected_revision=record.revision)
    except Exception as exc:
        _log.warning("pruning background journals failed: %s", exc)


def _without_events(variables: dict[str, Any]) -> bool:
    variables["events"] = []
    return True
