"""Running turns: chat, chat_stream, dry runs and single tool calls."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from foliko_cli.engine.tools import ToolResult
from foliko_cli.errors import SessionExistsError, UsageError
from foliko_cli.messages.ids import check_session_id
from foliko_cli.messages.record import SessionRecord, new_metadata
from foliko_cli.messages.turns import cut_compression, drop_turns
from foliko_cli.models.base import ModelProvider
from foliko_cli.service.base import ServiceBase
from foliko_cli.service.common import check_message_text, forked

if TYPE_CHECKING:
    from typing import Unpack

    from foliko_cli.engine.dry_run import RequestCaptured
    from foliko_cli.engine.handler import AgentChatHandler
    from foliko_cli.engine.stream import TurnEvents, TurnStream
    from foliko_cli.engine.turn import TurnOptions, TurnResult, TurnSetup
    from foliko_cli.service.turn_request import TurnParams, TurnRequest


def turn_options(turn: TurnRequest) -> TurnOptions:
    """What the turn asks of the model beyond its messages."""
    from foliko_cli.engine.turn import TurnOptions

    return TurnOptions(turn.options or {}, turn.schema, turn.compress)


def turn_request(
    session_id: str | TurnRequest, message: str | None, params: Mapping[str, Any]
) -> TurnRequest:
    """The TurnRequest a method was called with (imported when a turn is asked
    for: the other commands do without it)."""
    from foliko_cli.service import turn_request as values

    return values.turn_request(session_id, message, params)


class TurnsMixin(ServiceBase):
    """Turns as coroutines and event streams."""

    # turns

    async def _turn_setup(self, turn: TurnRequest) -> TurnSetup:
        from foliko_cli.engine.turn import TurnSetup

        session_id, fork_from = turn.session_id, turn.fork_from
        start_from, expected = turn.start_from, turn.expected_revision
        if fork_from is not None:
            check_session_id(fork_from)
            if fork_from == session_id:
                raise UsageError(
                    f"cannot fork session {session_id!r} into itself", fix="name a new session"
                )
            if not turn.new and await self.storage.revision(session_id) is not None:
                raise SessionExistsError(session_id)
            source = await self.get_session(fork_from)
            start_from = forked(source, session_id, turn.turns, turn.upto)
            expected = None if turn.new else 0
        elif turn.turns is not None or turn.upto is not None:
            raise UsageError("a number of turns to keep needs a session to fork from")
        elif turn.new:
            start_from = SessionRecord(session_id, metadata=new_metadata())
        return TurnSetup(
            start_from=start_from,
            variables=turn.variables or {},
            system_prompt=turn.system,
            expected_revision=expected,
            messages=tuple(turn.messages),
            instructions=turn.instructions,
            client_tools=tuple(turn.client_tools),
            on_start=turn.on_start,
            on_message=turn.on_message,
            on_finish=turn.on_finish,
            on_done=turn.on_done,
            server_tools=turn.server_tools,
            annotations=turn.annotations or {},
            trash="new" if turn.new and self._keeps_trash(session_id) else None,
            tools=tuple(turn.tools),
        )

    async def latest_session_id(self) -> str:
        """The most recently active session (what ``chat --continue`` continues)."""
        latest = await self.list_sessions(sort="updated", limit=1)
        if not latest:
            raise UsageError("there is no session to continue yet", fix="name one to start it")
        return latest[0].session_id

    async def chat(
        self,
        session_id: str | TurnRequest,
        message: str | None = None,
        *,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        **params: Unpack[TurnParams],
    ) -> TurnResult:
        """One turn (see ``TurnRequest`` for what it may ask): the session and the
        message and keywords, or a TurnRequest. ``on_event`` receives the
        stream's ``delta``, ``tool_call`` and ``tool_result`` events as they
        happen (the model then streams)."""
        turn = turn_request(session_id, message, params)
        if on_event is not None:
            result: TurnResult | None = None
            async for event in self.chat_stream(turn):
                if event["type"] == "done":
                    result = event["result"]
                else:
                    on_event(event)
            assert result is not None
            return result
        handler, text, arguments = await self._engine_turn(turn)
        return await handler.chat(text, **arguments)

    def chat_stream(
        self,
        session_id: str | TurnRequest,
        message: str | None = None,
        **params: Unpack[TurnParams],
    ) -> TurnStream:
        """The turn's events: ``delta``, ``tool_call``, ``tool_result``, then ``done``
        (whose ``result`` is the TurnResult). Arguments as for ``chat``. The turn
        runs in a task of its own from the first read (or ``start()``)."""
        from foliko_cli.engine.stream import TurnStream

        turn = turn_request(session_id, message, params)
        request = turn.request or self.request(turn.timeout)
        turn = turn._replace(request=request)
        return TurnStream(lambda events: self.run_turn(turn, events), request)

    async def run_turn(self, turn: TurnRequest, events: TurnEvents) -> TurnResult:
        """A streamed turn in the caller's own task, its events written to
        ``events``: what ``chat_stream``'s stream runs, for a caller that builds
        its own ``TurnStream`` around it."""
        handler, text, arguments = await self._engine_turn(turn)
        return await handler.run_turn(text, events=events, **arguments)

    async def _engine_turn(self, turn: TurnRequest) -> tuple[AgentChatHandler, str, dict[str, Any]]:
        """The handler that runs the turn, the message it sends, and the rest of
        what the handler is given."""
        handler = await self.handler(turn.model, turn.agent)
        text, setup = await self._prepare(turn)
        request = turn.request or self.request(turn.timeout)
        arguments = {"session_id": turn.session_id, "request": request, "setup": setup}
        return handler, text, {**arguments, "options": turn_options(turn)}

    async def _prepare(self, turn: TurnRequest) -> tuple[str, TurnSetup]:
        """Check the turn's input and build its setup; text attachments are appended
        to the message."""
        check_session_id(turn.session_id)
        if turn.regenerate:
            if turn.attachments:
                raise UsageError(
                    "regenerating a turn reuses its attachments", fix="attach nothing new"
                )
            return await self._regenerated(turn)
        message = turn.message
        if message is None:
            raise UsageError("no message to send", fix="give one")
        parts: list[dict[str, Any]] = []
        if turn.attachments:
            from foliko_cli.messages.attachments import compose, load_all

            loaded = await load_all(turn.attachments, self.timeout, self._read_resource)
            message, parts = compose(message, loaded)
        if message or not (parts or turn.messages):  # else it continues or attaches
            check_message_text(message)
        setup = await self._turn_setup(turn)
        return message, setup._replace(attachments=tuple(parts))

    async def _regenerated(self, turn: TurnRequest) -> tuple[str, TurnSetup]:
        """The setup that replaces the session's last turn by a new answer to its
        user message, sent again with its attachments; given a message, that
        message stands in for the user message (edit and resend)."""
        if turn.new or turn.fork_from is not None:
            raise UsageError(
                "regenerating a turn replaces the session's own last turn",
                fix="neither start over nor fork",
            )
        session_id, message = turn.session_id, turn.message
        setup = await self._turn_setup(turn)
        record = await self.get_session(session_id)
        kept = drop_turns(record.messages, 1, session_id=session_id)
        replaced = record.messages[kept]
        parts = tuple(replaced.get("attachments") or ())
        if message is None:
            message = str(replaced.get("content") or "")
        else:  # the text attachments were in the content just edited
            parts = tuple(part for part in parts if part.get("type") == "image")
        start_from = SessionRecord(
            session_id,
            messages=record.messages[:kept],
            variables=record.variables,
            metadata=record.metadata,
            compression_state=cut_compression(
                record.compression_state, kept, record.messages[kept:]
            ),
        )
        if message or not parts:
            check_message_text(message)
        return message, setup._replace(
            start_from=start_from, expected_revision=record.revision, attachments=parts
        )

    async def dry_run(
        self,
        session_id: str | TurnRequest,
        message: str | None = None,
        *,
        stream: bool = False,
        **params: Unpack[TurnParams],
    ) -> dict[str, Any]:
        """Exactly what the model would be sent for this turn (``stream``: as a
        streamed turn sends it); nothing is called or saved, though the server may
        be asked for its context window, as a turn asks it. ``request`` is the HTTP
        request itself, as the provider builds it (absent for a provider that sends
        none). Arguments as for ``chat``."""
        from foliko_cli.engine.plugins import no_code

        turn = turn_request(session_id, message, params)
        with no_code():  # tools from Python code are shown, never imported or run
            target, captured = await self._captured(turn, stream=stream)
        request = captured.request
        try:
            shown: dict[str, Any] = {
                "model": target.name,
                "system": request.system,
                "messages": request.messages,
                "tools": request.tools,
                "options": dict(request.options),
            }
            if request.schema is not None:
                shown["schema"] = request.schema
            if captured.wire is not None:
                shown["request"] = captured.wire
            return shown
        finally:
            await self._close_resolved(target, turn)

    async def count_tokens(
        self,
        session_id: str | TurnRequest,
        message: str | None = None,
        **params: Unpack[TurnParams],
    ) -> tuple[int, bool]:
        """The tokens of what this turn would send the model, and whether the
        model's server counted them (True) or foliko estimated them (False).
        Arguments as for ``chat``."""
        import orjson

        from foliko_cli.engine.compression import message_tokens
        from foliko_cli.messages.tokens import estimate_tokens

        turn = turn_request(session_id, message, params)
        target, captured = await self._captured(turn)
        request = captured.request
        try:
            counted = await target.count_tokens(request)
        finally:
            await self._close_resolved(target, turn)
        if counted is not None:
            return counted, True
        estimate = estimate_tokens(request.system or "")
        estimate += sum(message_tokens(m) for m in request.messages)
        if request.tools:
            estimate += estimate_tokens(orjson.dumps(list(request.tools)).decode())
        return estimate, False

    async def _captured(
        self, turn: TurnRequest, *, stream: bool = False
    ) -> tuple[ModelProvider, RequestCaptured]:
        """The provider a turn would call, and its call, captured (``RequestCaptured``)."""
        from foliko_cli.engine.dry_run import CaptureModel, RequestCaptured
        from foliko_cli.engine.plugins import code_stood_in
        from foliko_cli.models import resolve_model

        message, setup = await self._prepare(turn)
        if code_stood_in():
            setup = setup._replace(tools=(*self.stand_ins(), *setup.tools))
        target = resolve_model(self.model_name(turn.model, turn.agent), self.models)
        handler = await self._make_handler(CaptureModel(target), turn.agent)
        request = turn.request or self.request(turn.timeout)
        arguments: dict[str, Any] = {"session_id": turn.session_id, "request": request}
        # the history is compressed to fit, as a turn that may compress it sends it
        arguments.update(setup=setup, options=turn_options(turn._replace(compress=True)))
        try:
            if stream:
                async for _event in handler.chat_stream(message, **arguments):
                    pass
            else:
                await handler.chat(message, **arguments)
        except RequestCaptured as captured:
            return target, captured
        except BaseException:
            await self._close_resolved(target, turn)
            raise
        raise AssertionError("the capture model was not called")

    async def _close_resolved(self, target: ModelProvider, turn: TurnRequest) -> None:
        """Close a provider ``_captured`` made for the turn (not one it was given)."""
        if target is not self.model_name(turn.model, turn.agent):
            await target.aclose()

    async def call_tool(
        self, session_id: str, name: str, arguments: Any, *, agent: str | None = None
    ) -> ToolResult:
        """Run one tool inside the session, saving the variables it changed."""
        check_session_id(session_id)
        handler = await self.handler(self.model if self.model is not None else "echo", agent)
        return await handler.run_tool(
            name, arguments, session_id=session_id, request=self.request()
        )
