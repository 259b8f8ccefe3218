"""The turn engine (the seed's AgentChatHandler).

A turn: take the session's place in its FIFO queue, lock it in storage,
reload it if another process moved it, append the user message, call the
model, run the tools it asks for (at most ``max_steps`` model calls), then
append every new message in one storage write. If anything fails, the
session is restored in memory and nothing is written (R1).

The write itself is never cut short: a cancellation (Ctrl-C, SIGTERM, the
deadline) that arrives while it runs waits for it, and once it has
committed the turn stands and its result is returned — so "not saved" is
only ever said of a turn that was not.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

from foliko_cli.clock import now_ms
from foliko_cli.completion import run_to_completion
from foliko_cli.compression import Compressor
from foliko_cli.context import AgentContext, RequestContext, SessionContext
from foliko_cli.errors import TurnTimeoutError
from foliko_cli.framework import Framework
from foliko_cli.models.base import ModelProvider, ModelRequest, ModelResponse
from foliko_cli.storage.record import SessionRecord, SessionState, clear_record, new_metadata
from foliko_cli.tools import ToolResult

T = TypeVar("T")

DEFAULT_MAX_STEPS = 10
_MODEL_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name", "is_error")


class TurnResult(NamedTuple):
    success: bool
    message: str
    step_count: int
    request_id: str
    trace_id: str
    session_id: str
    usage: dict[str, int]
    finish_reason: str = "stop"
    model: str = ""

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


class TurnSetup(NamedTuple):
    """Changes made inside the turn, before the user message, saved with it.

    ``start_from`` replaces the stored session (an empty record starts it over,
    a copy of another session forks it); ``system_prompt`` is kept in the
    session's metadata for later turns. ``messages`` are added before the
    user message (an empty user message adds none: a turn may continue after
    tool results). ``instructions`` stand in for the session's own system
    prompt in this turn only (they are not kept). ``client_tools`` are tool
    specs the caller runs itself: when the model calls one, the turn ends
    there (finish reason ``tool_calls``). ``on_start`` gets the history
    position of the turn's first message, ``on_message`` each message the
    turn adds and its position, as it is added, ``on_finish`` the messages
    it wrote (before they are saved).
    """

    start_from: SessionRecord | None = None
    variables: Mapping[str, Any] = MappingProxyType({})
    system_prompt: str | None = None
    messages: tuple[dict[str, Any], ...] = ()
    instructions: str | None = None
    client_tools: tuple[dict[str, Any], ...] = ()
    on_start: Callable[[int], None] | None = None
    on_message: Callable[[int, dict[str, Any]], None] | None = None
    on_finish: Callable[[list[dict[str, Any]]], None] | None = None

    def apply(self, session: SessionContext) -> bool:
        """Change ``session``; return True when it must be saved whole."""
        if self.start_from is not None:
            session.apply_record(self.start_from)
            session.metadata = {
                **new_metadata(),
                **self.start_from.metadata,
                "message_count": len(session.messages),
            }
        session.variables.update(self.variables)
        if self.system_prompt is not None:
            session.metadata["system_prompt"] = self.system_prompt
        return self.start_from is not None


class AgentChatHandler:
    def __init__(
        self,
        framework: Framework,
        model: ModelProvider,
        *,
        agent: AgentContext | None = None,
        system_prompt: str | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        context_window: int | None = None,
    ):
        if max_steps < 1:
            raise ValueError("max_steps must be at least 1")
        self.framework = framework
        self.model = model
        self.agent = agent
        self.system_prompt = system_prompt
        self.max_steps = max_steps
        self.compressor = Compressor(context_window or model.context_window)

    # public

    async def chat(
        self,
        message: str,
        *,
        session_id: str,
        request: RequestContext | None = None,
        setup: TurnSetup | None = None,
    ) -> TurnResult:
        """One turn without streaming: the model is asked for whole replies."""
        request = request or self.framework.get_request_context() or RequestContext()
        task = asyncio.ensure_future(
            self._serialised_turn(message, session_id, request, None, setup or TurnSetup())
        )
        request.on_cancel(task.cancel)
        try:
            return await task
        finally:
            request.remove_on_cancel(task.cancel)

    async def chat_stream(
        self,
        message: str,
        *,
        session_id: str,
        request: RequestContext | None = None,
        setup: TurnSetup | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield ``delta``, ``tool_call`` and ``tool_result`` events, then ``done``.

        The model streams its replies; the deltas are passed on as they come.
        """
        request = request or self.framework.get_request_context() or RequestContext()
        events: asyncio.Queue[dict[str, Any] | BaseException | None] = asyncio.Queue()

        async def produce() -> None:
            try:
                result = await self._serialised_turn(
                    message, session_id, request, events, setup or TurnSetup()
                )
                await events.put({"type": "done", "result": result})
            except BaseException as exc:
                await events.put(exc)
                if not isinstance(exc, Exception):
                    raise
            finally:
                await events.put(None)

        task = asyncio.ensure_future(produce())
        request.on_cancel(task.cancel)
        try:
            while True:
                try:
                    event = await events.get()
                except asyncio.CancelledError:
                    if not await _committed_anyway(task, events):
                        raise
                    continue
                if event is None:
                    break
                if isinstance(event, BaseException):
                    raise event
                yield event
        finally:
            request.remove_on_cancel(task.cancel)
            if not task.done():
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def clear_history(self, session_id: str, timeout: float = 30.0) -> None:
        """Drop the session's messages, keeping its variables."""
        storage = self.framework.session_storage
        async with self.framework.hold_session(session_id, timeout):
            record = await storage.load(session_id)
            if record is None:
                return
            revision = await storage.save(clear_record(record))
            session = self.framework.context_manager.get_session_context(session_id)
            if session is not None:
                session.apply_record(record)
                session.revision = revision

    async def run_tool(
        self, name: str, arguments: Any, *, session_id: str, request: RequestContext | None = None
    ) -> ToolResult:
        """Run one tool inside the session (a workflow step), saving what it changed."""
        request = request or self.framework.get_request_context() or RequestContext()

        async def work(session: SessionContext) -> tuple[ToolResult, bool]:
            return await self.framework.execute_tool(name, arguments), False

        return await self._in_session(session_id, request, work)

    # the turn

    async def _serialised_turn(
        self,
        message: str,
        session_id: str,
        request: RequestContext,
        events: asyncio.Queue | None,
        setup: TurnSetup,
    ) -> TurnResult:
        async def work(session: SessionContext) -> tuple[TurnResult, bool]:
            replace = setup.apply(session)
            return await self._run_steps(message, session, request, events, setup), replace

        return await self._in_session(session_id, request, work)

    async def _in_session(
        self,
        session_id: str,
        request: RequestContext,
        work: Callable[[SessionContext], Awaitable[tuple[T, bool]]],
    ) -> T:
        """Hold the session, run ``work`` on its fresh state, save whole or not at all.

        ``work`` returns its result and whether the session must be replaced
        (rather than appended to).
        """
        committed: list[T] = []
        try:
            async with self.framework.hold_session(
                session_id, request.timeout, wait=request.remaining()
            ):
                session = self.framework.get_or_create_session_context(session_id)
                try:
                    async with asyncio.timeout(request.remaining()):
                        return await self._transaction(session, request, work, committed)
                except TimeoutError:
                    if committed:
                        return committed[0]
                    raise TurnTimeoutError(request.timeout) from None
                finally:
                    self.framework.release_session_context(session_id)
        except asyncio.CancelledError:
            if committed:
                return committed[0]
            raise

    async def _transaction(
        self,
        session: SessionContext,
        request: RequestContext,
        work: Callable[[SessionContext], Awaitable[tuple[T, bool]]],
        committed: list[T],
    ) -> T:
        """Run ``work`` and write its outcome; once written, ``committed`` holds the result."""
        storage = self.framework.session_storage
        await self._sync_history(session)
        checkpoint = session.checkpoint()
        try:
            with self.framework.bind(request=request, session=session, agent=self.agent):
                result, replace = await work(session)
            if replace:
                record = session.to_record()
                record.saved_at = 0
                write = storage.save(record)
            else:
                write = storage.append(
                    session.session_id,
                    session.messages[checkpoint.message_count :],
                    SessionState(session.variables, session.metadata, session.compression_state),
                    expected_revision=checkpoint.revision,
                )
            session.revision, _ = await run_to_completion(write)
        except BaseException:
            session.restore(checkpoint)
            raise
        committed.append(result)
        return result

    async def _sync_history(self, session: SessionContext) -> None:
        """Load the history once, and again only when another writer moved it."""
        stored_revision = await self.framework.session_storage.revision(session.session_id)
        if session.history_loaded and stored_revision == session.revision:
            return
        if stored_revision is None:
            session.apply_record(SessionRecord(session.session_id, metadata=new_metadata()))
        else:
            await session.load_from_storage(recent_only=True)

    def _stamp(self, message: dict[str, Any], request: RequestContext) -> dict[str, Any]:
        message["created_at"] = now_ms()
        message["request_id"] = request.request_id
        message["trace_id"] = request.trace_id
        return message

    def build_system_prompt(
        self, session: SessionContext, instructions: str | None = None
    ) -> str | None:
        """The agent's prompt, then the turn's ``instructions``, else the session's
        own (``--system``) or the default."""
        agent_prompt = self.agent.build_system_prompt() if self.agent else None
        own = instructions or session.metadata.get("system_prompt") or self.system_prompt
        return "\n\n".join(p for p in (agent_prompt, own) if p) or None

    def model_request(
        self, session: SessionContext, tools: list[dict[str, Any]], request: RequestContext
    ) -> ModelRequest:
        """What the model is sent: the compressed view, reduced to the model's keys."""
        system, messages = self.compressor.view(session, session.system_prompt)
        return ModelRequest(
            messages=[{k: m[k] for k in _MODEL_KEYS if k in m} for m in messages],
            system=system,
            tools=tools,
            deadline=time.monotonic() + request.remaining(),
        )

    async def _run_steps(
        self,
        message: str,
        session: SessionContext,
        request: RequestContext,
        events: asyncio.Queue | None,
        setup: TurnSetup | None = None,
    ) -> TurnResult:
        setup = setup or TurnSetup()
        first = len(session.messages)
        if setup.on_start is not None:
            setup.on_start(session.message_offset + first)

        def add(new: dict[str, Any]) -> None:
            session.add_message(self._stamp(new, request))
            if setup.on_message is not None:
                setup.on_message(session.message_offset + len(session.messages) - 1, new)

        for extra in setup.messages:
            add(dict(extra))
        if message or not setup.messages:
            add({"role": "user", "content": message})
        tools = self.framework.resolve_tools()
        specs = [tool.spec() for tool in tools.values()]
        client_tools = {spec["name"] for spec in setup.client_tools}
        specs += [spec for spec in setup.client_tools if spec["name"] not in tools]
        self.compressor.count_tools(specs)
        session.system_prompt = self.build_system_prompt(session, setup.instructions)
        usage: dict[str, int] = {}
        response = ModelResponse(text="")
        step = 0
        handed_back = False
        while step < self.max_steps:
            step += 1
            await self.compressor.compress_if_needed(
                session,
                session.system_prompt,
                self.model,
                time.monotonic() + request.remaining(),
            )
            response = await self._call_model(self.model_request(session, specs, request), events)
            for key, value in response.usage.items():
                usage[key] = usage.get(key, 0) + value
            reply: dict[str, Any] = {
                "role": "assistant",
                "content": response.text,
                "model": self.model.name,
                "usage": dict(response.usage),
            }
            if response.tool_calls:
                reply["tool_calls"] = [
                    {"id": c.id, "name": c.name, "arguments": c.arguments}
                    for c in response.tool_calls
                ]
            add(reply)
            if not response.tool_calls:
                break
            for call in response.tool_calls:
                if call.name in client_tools and call.name not in tools:
                    handed_back = True
                    continue
                await _emit(
                    events,
                    {
                        "type": "tool_call",
                        "id": call.id,
                        "name": call.name,
                        "arguments": call.arguments,
                    },
                )
                result = await self.framework.execute_tool(call.name, call.arguments)
                tool_message = {
                    "role": "tool",
                    "content": result.content,
                    "tool_call_id": call.id,
                    "name": call.name,
                }
                if result.is_error:
                    tool_message["is_error"] = True
                add(tool_message)
                await _emit(
                    events,
                    {
                        "type": "tool_result",
                        "id": call.id,
                        "name": call.name,
                        "content": result.content,
                        "is_error": result.is_error,
                    },
                )
            if handed_back:
                break
        if setup.on_finish is not None:
            setup.on_finish(session.messages[first:])
        if handed_back:
            finish = "tool_calls"
        else:
            finish = "max_steps" if response.tool_calls else response.finish_reason
        return TurnResult(
            success=True,
            message=response.text,
            step_count=step,
            request_id=request.request_id,
            trace_id=request.trace_id,
            session_id=session.session_id,
            usage=usage,
            finish_reason=finish,
            model=self.model.name,
        )

    async def _call_model(
        self, request: ModelRequest, events: asyncio.Queue | None
    ) -> ModelResponse:
        if events is None:
            return await self.model.generate(request)
        response: ModelResponse | None = None
        async for event in self.model.stream(request):
            if event.type == "delta":
                await _emit(events, {"type": "delta", "text": event.text})
            elif event.type == "done":
                response = event.response
        if response is None:
            raise RuntimeError(f"model {self.model.name!r} ended its stream without a response")
        return response


async def _committed_anyway(task: asyncio.Task, events: asyncio.Queue) -> bool:
    """After the consumer was cancelled: stop the turn, and say whether it had
    committed (its ``done`` event is then waiting in ``events``)."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    pending = [events.get_nowait() for _ in range(events.qsize())]
    for event in pending:
        events.put_nowait(event)
    return any(isinstance(e, dict) and e.get("type") == "done" for e in pending)


async def _emit(events: asyncio.Queue | None, event: dict[str, Any]) -> None:
    if events is not None:
        await events.put(event)
