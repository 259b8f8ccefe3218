"""Running one turn for a route: stored or on a scratch copy, whole or streamed.

A streamed turn answers with its HTTP status only once the turn holds its
session (or has failed before that): a busy session is a 409, not an error
event inside a 200 stream. Every turn is first admitted by its user's quotas
(quotas.py) and charged its tokens once it has finished.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING, Any

from foliko_cli.errors import ConflictError
from foliko_cli.serve import ids
from foliko_cli.serve.metrics import METRICS
from foliko_cli.serve.quotas import turn_tokens
from foliko_cli.serve.state import Services, scratch_id
from foliko_cli.service import AsyncFoliko
from foliko_cli.service.values import TurnRequest, TurnResult

if TYPE_CHECKING:
    from typing import Unpack

    from foliko_cli.service.values import TurnEvents, TurnParams, TurnStream


class Turn:
    """One turn to run: where (``session_id``; None: on a scratch copy of
    ``scratch``), with what (``asked``), under which RequestContext
    (``context``); after it, ``start`` and ``messages``
    say where its messages begin and what they are, ``first_item`` the item
    number of the first. ``api`` names the API
    that runs it, for the metrics.

    A turn may have a fallback (``fall_back_to``): when its session moved
    past the revision it expects (a ConflictError before anything is
    written), it runs once more in the fallback's session instead.
    """

    def __init__(
        self,
        service: AsyncFoliko,
        session_id: str | None,
        text: str | None,
        *,
        scratch: list[dict[str, Any]] | None = None,
        api: str = "responses",
        **params: Unpack[TurnParams],
    ):
        self.api = api
        self.service = service
        self.session_id = session_id
        self.scratch = scratch
        asked = TurnRequest(session_id or "", text, **params)
        self.context = asked.request or service.request()
        self.asked = asked._replace(request=self.context)
        self.start = 0
        self.first_item = 0
        self.messages: list[dict[str, Any]] = []
        self.tool_positions: dict[str, int] = {}
        self.result: TurnResult | None = None
        self.created_at = int(time.time())
        self._unstored = ids.unstored_scope()
        self._fallback: tuple[str, dict[str, Any]] | None = None
        self._admitted = False

    @property
    def stored(self) -> bool:
        return self.scratch is None

    @property
    def scope(self) -> str:
        """The id scope of the turn's items (see ids.py)."""
        if self.stored and self.session_id is not None:
            return ids.scope_of(self.session_id)
        return self._unstored

    @property
    def response_id(self) -> str:
        if self.stored and self.session_id is not None:
            return ids.response_id(self.scope, self.first_item)
        return "resp_x" + self._unstored[1:]

    @property
    def text(self) -> str | None:
        return self.asked.message

    @property
    def user(self) -> str | None:
        return getattr(self.context, "user_id", None)

    async def admit(self, services: Services) -> None:
        """Count the turn in its user's quotas, once (a 429 when over one)."""
        if services.quotas is not None and not self._admitted:
            await services.quotas.admit(services.base, self.user)
        self._admitted = True

    async def _finished(self, services: Services, result: TurnResult) -> None:
        """Once the turn is saved, in its own task: charge its tokens, count it."""
        self.result = result
        if services.quotas is not None:
            tokens = turn_tokens(result.usage)
            await services.quotas.charge(services.base, self.user, tokens)
        METRICS.turn(self.api, result)

    def fall_back_to(self, session_id: str, **target: Any) -> None:
        self._fallback = (session_id, target)

    def _take_fallback(self, error: BaseException) -> bool:
        if not isinstance(error, ConflictError) or self._fallback is None:
            return False
        self.session_id, target = self._fallback
        self._fallback = None
        self.asked = self.asked._replace(expected_revision=None, **target)
        return True

    def _on_start(self, position: int, number: int) -> None:
        self.start, self.first_item = position, number

    def number(self, position: int) -> int:
        """The item number of the turn's message at ``position`` (item_numbers.py)."""
        return position - self.start + self.first_item

    def _on_message(self, position: int, message: dict[str, Any]) -> None:
        if message.get("role") == "tool" and message.get("tool_call_id"):
            self.tool_positions[message["tool_call_id"]] = position

    def _on_finish(self, messages: list[dict[str, Any]]) -> None:
        self.messages = [dict(m) for m in messages]

    @contextlib.asynccontextmanager
    async def _target(self, services: Services) -> AsyncIterator[tuple[AsyncFoliko, str]]:
        if self.scratch is None:
            assert self.session_id is not None
            yield self.service, self.session_id
            return
        scratch = services.ephemeral
        session_id = scratch_id()
        await scratch.create_session(session_id, messages=self.scratch)
        try:
            yield scratch, session_id
        finally:
            await scratch.delete_sessions([session_id])

    def _request_in(self, session_id: str, services: Services) -> TurnRequest:
        async def on_done(result: TurnResult) -> None:
            await self._finished(services, result)

        return self.asked._replace(
            session_id=session_id,
            on_start=self._on_start,
            on_message=self._on_message,
            on_finish=self._on_finish,
            on_done=on_done,
        )

    async def run(self, services: Services) -> TurnResult:
        await self.admit(services)
        while True:
            try:
                async with self._target(services) as (service, session_id):
                    return await service.chat(self._request_in(session_id, services))
            except ConflictError as exc:
                if not self._take_fallback(exc):
                    raise

    async def count_tokens(self, services: Services) -> tuple[int, bool]:
        """The tokens the turn would send its model (see AsyncFoliko.count_tokens)."""
        async with self._target(services) as (service, session_id):
            return await service.count_tokens(self.asked._replace(session_id=session_id))

    async def stream(self, services: Services) -> AsyncGenerator[dict[str, Any], None]:
        """Wait until the turn holds its session (raising what stopped it before),
        then return its events; ``done`` carries the TurnResult."""
        await self.admit(services)
        while True:
            try:
                return await self._stream_once(services)
            except ConflictError as exc:
                if not self._take_fallback(exc):
                    raise

    async def _stream_once(self, services: Services) -> AsyncGenerator[dict[str, Any], None]:
        from foliko_cli.service.values import TurnStream

        async def run(events: TurnEvents) -> TurnResult:
            async with self._target(services) as (service, session_id):
                return await service.run_turn(self._request_in(session_id, services), events)

        stream = TurnStream(run, self.context)
        try:
            await stream.started()
        except BaseException:
            await stream.aclose()
            raise
        return self._events(stream)

    @staticmethod
    async def _events(stream: TurnStream) -> AsyncGenerator[dict[str, Any], None]:
        METRICS.streams += 1
        try:
            async for event in stream:
                yield event
        finally:
            METRICS.streams -= 1
            await stream.aclose()
