"""Running one turn for a route: stored or on a scratch copy, whole or streamed.

A streamed turn answers with its HTTP status only once the turn holds its
session (or has failed before that): a busy session is a 409, not an error
event inside a 200 stream. Every turn is first admitted by its user's quotas
(quotas.py) and charged its tokens once it has finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from foliko_cli.engine.handler import TurnResult
from foliko_cli.errors import ConflictError
from foliko_cli.serve import ids
from foliko_cli.serve.metrics import METRICS
from foliko_cli.serve.quotas import turn_tokens
from foliko_cli.serve.state import Services, scratch_id
from foliko_cli.service import AsyncFoliko


class Turn:
    """One turn to run: where, with what; after it, ``start`` and ``messages``
    say where its messages begin and what they are. ``api`` names the API
    that runs it, for the metrics.

    A turn may have a fallback (``fall_back_to``): when its session moved
    past the revision it expects (a ConflictError before anything is
    written), it runs once more in the fallback's session instead.
    """

    def __init__(
        self,
        service: AsyncFoliko,
        session_id: str | None,
        text: str,
        *,
        scratch: list[dict[str, Any]] | None = None,
        api: str = "responses",
        **options: Any,
    ):
        self.api = api
        self.service = service
        self.session_id = session_id
        self.text = text
        self.scratch = scratch
        self.options = options
        self.start = 0
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
            return ids.response_id(self.scope, self.start)
        return "resp_x" + self._unstored[1:]

    @property
    def user(self) -> str | None:
        return getattr(self.options.get("request"), "user_id", None)

    async def admit(self, services: Services) -> None:
        """Count the turn in its user's quotas, once (a 429 when over one)."""
        if services.quotas is not None and not self._admitted:
            await services.quotas.admit(services.base.storage, self.user)
        self._admitted = True

    async def _charge(self, services: Services) -> None:
        if services.quotas is not None and self.result is not None:
            tokens = turn_tokens(self.result.usage)
            await services.quotas.charge(services.base.storage, self.user, tokens)

    def fall_back_to(self, session_id: str, **target: Any) -> None:
        self._fallback = (session_id, target)

    def _take_fallback(self, error: BaseException) -> bool:
        if not isinstance(error, ConflictError) or self._fallback is None:
            return False
        self.session_id, target = self._fallback
        self._fallback = None
        self.options = {
            key: value for key, value in self.options.items() if key != "expected_revision"
        }
        self.options.update(target)
        return True

    def _on_start(self, position: int) -> None:
        self.start = position

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

    def _arguments(self) -> dict[str, Any]:
        return {
            **self.options,
            "on_start": self._on_start,
            "on_message": self._on_message,
            "on_finish": self._on_finish,
        }

    async def run(self, services: Services) -> TurnResult:
        await self.admit(services)
        while True:
            try:
                async with self._target(services) as (service, session_id):
                    self.result = await service.chat(session_id, self.text, **self._arguments())
                await self._charge(services)
                METRICS.turn(self.api, self.result)
                return self.result
            except ConflictError as exc:
                if not self._take_fallback(exc):
                    raise

    async def count_tokens(self, services: Services) -> tuple[int, bool]:
        """The tokens the turn would send its model (see AsyncFoliko.count_tokens)."""
        unused = ("request", "options", "schema", "compress")
        options = {k: v for k, v in self.options.items() if k not in unused}
        async with self._target(services) as (service, session_id):
            return await service.count_tokens(session_id, self.text, **options)

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
        queue: asyncio.Queue[dict[str, Any] | BaseException | None] = asyncio.Queue()
        started = asyncio.get_running_loop().create_future()
        arguments = self._arguments()

        def on_start(position: int) -> None:
            self._on_start(position)
            if not started.done():
                started.set_result(position)

        arguments["on_start"] = on_start

        async def pump() -> None:
            try:
                async with self._target(services) as (service, session_id):
                    async for event in service.chat_stream(session_id, self.text, **arguments):
                        if event["type"] == "done":
                            self.result = event["result"]
                            await self._charge(services)
                            METRICS.turn(self.api, self.result)
                        await queue.put(event)
            except Exception as exc:
                await queue.put(exc)
            finally:
                queue.put_nowait(None)

        task = asyncio.ensure_future(pump())
        try:
            await asyncio.wait([started, task], return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            raise
        if not started.done():
            started.cancel()
            while (event := queue.get_nowait()) is not None:
                if isinstance(event, BaseException):
                    raise event
        return self._events(queue, task)

    @staticmethod
    async def _events(
        queue: asyncio.Queue[dict[str, Any] | BaseException | None], task: asyncio.Future[None]
    ) -> AsyncGenerator[dict[str, Any], None]:
        METRICS.streams += 1
        try:
            while (event := await queue.get()) is not None:
                if isinstance(event, BaseException):
                    raise event
                yield event
        finally:
            METRICS.streams -= 1
            if not task.done():
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)
