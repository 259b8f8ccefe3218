"""Running turns: chat, chat_stream, dry runs and single tool calls."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from foliko_cli.common.loop import require_loop
from foliko_cli.errors import SessionExistsError, UsageError
from foliko_cli.messages.ids import check_session_id
from foliko_cli.messages.item_numbers import offset_after, pinned
from foliko_cli.messages.record import SessionRecord, new_metadata
from foliko_cli.messages.turns import cut_compression, drop_turns
from foliko_cli.service.base import ServiceBase
from foliko_cli.service.common import check_message_text, forked
from foliko_cli.storage.base import answers_at_once

if TYPE_CHECKING:
    from typing import Unpack

    from foliko_cli.engine.dry_run import RequestCaptured
    from foliko_cli.engine.stream import TurnEvents, TurnStream
    from foliko_cli.engine.tools import ToolResult
    from foliko_cli.engine.turn import TurnParams, TurnRequest, TurnResult
    from foliko_cli.messages.fragments import Fragment
    from foliko_cli.models.base import ModelProvider
    from foliko_cli.service.fragments import SavedFragment


def turn_request(
    session_id: str | TurnRequest, message: str | None, params: Mapping[str, Any]
) -> TurnRequest:
    """The TurnRequest a method was called with (imported when a turn is asked
    for: the other commands do without it)."""
    from foliko_cli.engine import turn

    return turn.turn_request(session_id, message, params)


class TurnsMixin(ServiceBase):
    """Turns as coroutines and event streams, all run by one primitive:
    ``run_turn`` (the engine's, over the turn the service resolved)."""

    # turns

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
        if on_event is None:
            return await self.run_turn(turn)
        from foliko_cli.engine.stream import CallbackEvents

        return await self.run_turn(turn, CallbackEvents(on_event))

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

    async def run_turn(self, turn: TurnRequest, events: TurnEvents | None = None) -> TurnResult:
        """The one primitive every turn runs through, in the caller's task:
        ``events`` receives a streamed turn's events (None: the model is asked
        for whole replies). ``chat`` and ``chat_stream`` adapt it; a caller that
        needs its own ``TurnStream`` (foliko serve) builds one around it."""
        if not answers_at_once(self.storage):
            require_loop(f"a turn over {self.storage.name} storage")
        if turn.on_start or turn.on_message or turn.on_finish or turn.on_done:
            # seen while it runs: it must not need running again (common/loop.py)
            require_loop("a turn with callbacks")
        handler = await self.handler(turn.model, turn.agent)
        return await handler.run_turn(await self._prepare(turn), events)

    async def _prepare(self, turn: TurnRequest) -> TurnRequest:
        """The turn as the engine runs it: its input checked, its request made, a
        fork's copy or a new start as ``start_from``, its attachments read (text
        appended to the message, the parts in their place)."""
        check_session_id(turn.session_id)
        if turn.if_busy != "wait":
            from foliko_cli.engine.turn import check_if_busy

            check_if_busy(turn.if_busy)
        turn = turn._replace(request=turn.request or self.request(turn.timeout))
        if turn.regenerate:
            if turn.attachments or turn.fragments:
                raise UsageError(
                    "regenerating a turn reuses its attachments and fragments",
                    fix="add nothing new",
                )
            if turn.system_fragments:
                turn = await self._with_fragments(turn)
            return await self._regenerated(turn)
        message = turn.message
        if message is None:
            raise UsageError("no message to send", fix="give one")
        if turn.fragments or turn.system_fragments:
            turn = await self._with_fragments(turn)
        parts: list[dict[str, Any]] = []
        if turn.attachments:
            from foliko_cli.messages.attachments import compose, load_all

            loaded = await load_all(turn.attachments, self.timeout, self._read_resource)
            message, parts = compose(message, loaded)
        if message or not (parts or turn.messages or turn.fragments):  # it continues or adds
            check_message_text(message)
        turn = await self._started(turn)
        return turn._replace(message=message, attachments=tuple(parts))

    async def _with_fragments(self, turn: TurnRequest) -> TurnRequest:
        """The turn with its fragments and system fragments read (service/fragments.py)."""
        from foliko_cli.service.fragments import SavedFragments, resolved

        saved = SavedFragments(self.home)
        found = await resolved(turn.fragments, saved, self.storage, self.timeout)
        system = turn.system_fragments
        if system is not None:
            system = await resolved(system, saved, self.storage, self.timeout)
        return turn._replace(fragments=tuple(found), system_fragments=system)

    # saved fragments

    async def save_fragment(self, name: str, source: str | Fragment) -> SavedFragment:
        """Save the fragment ``source`` names (a path, an http(s) URL, another saved
        fragment's name or hash) or is (a ``Fragment``) as ``name``, replacing the
        one of that name."""
        from foliko_cli.messages.fragments import Fragment
        from foliko_cli.service.fragments import SavedFragments, check_name, find

        check_name(name)
        saved = SavedFragments(self.home)
        if not isinstance(source, Fragment):
            source = await find(source, saved, self.storage, self.timeout)
        return saved.save(name, source)

    async def saved_fragments(self) -> list[SavedFragment]:
        """The saved fragments, by name."""
        from foliko_cli.service.fragments import SavedFragments

        return SavedFragments(self.home).all()

    async def fragment(self, name: str) -> Fragment:
        """The fragment saved as ``name``, or whose SHA-256 ``name`` is (saved, or
        kept by the storage); FragmentError when there is none."""
        from foliko_cli.errors import FragmentError, Hint
        from foliko_cli.service.fragments import HASH, SavedFragments, find

        saved = SavedFragments(self.home)
        if saved.get(name) is not None or HASH.fullmatch(name):
            try:
                return await find(name, saved, self.storage, self.timeout)
            except FragmentError:
                if not HASH.fullmatch(name):
                    raise
        raise FragmentError(
            f"no fragment is saved as {name!r} or has that hash",
            fix="check the name",
            hint=Hint.FRAGMENTS,
        )

    async def remove_fragment(self, name: str) -> bool:
        """Forget the saved fragment ``name`` (messages that used it keep their copy);
        False when there was none."""
        from foliko_cli.service.fragments import SavedFragments

        return SavedFragments(self.home).remove(name)

    async def _started(self, turn: TurnRequest) -> TurnRequest:
        """A fork's copy or a new start as the turn's ``start_from``."""
        session_id, fork_from = turn.session_id, turn.fork_from
        if fork_from is not None:
            check_session_id(fork_from)
            if fork_from == session_id:
                raise UsageError(
                    f"cannot fork session {session_id!r} into itself", fix="name a new session"
                )
            if not turn.new and await self.storage.revision(session_id) is not None:
                raise SessionExistsError(session_id)
            source = await self.get_session(fork_from)
            copy = forked(source, session_id, turn.turns, turn.upto)
            return turn._replace(start_from=copy, expected_revision=None if turn.new else 0)
        if turn.turns is not None or turn.upto is not None:
            raise UsageError("a number of turns to keep needs a session to fork from")
        if turn.new:
            return turn._replace(start_from=SessionRecord(session_id, metadata=new_metadata()))
        return turn

    async def _regenerated(self, turn: TurnRequest) -> TurnRequest:
        """The turn that replaces the session's last turn by a new answer to its
        user message, sent again with its attachments; given a message, that
        message stands in for the user message (edit and resend)."""
        if turn.new or turn.fork_from is not None:
            raise UsageError(
                "regenerating a turn replaces the session's own last turn",
                fix="neither start over nor fork",
            )
        if turn.turns is not None or turn.upto is not None:
            raise UsageError("a number of turns to keep needs a session to fork from")
        session_id, message = turn.session_id, turn.message
        record = await self.get_session(session_id)
        kept = drop_turns(record.messages, 1, session_id=session_id)
        replaced = record.messages[kept]
        parts = tuple(replaced.get("attachments") or ())
        fragments = tuple(replaced.get("fragments") or ())
        if message is None:
            message = str(replaced.get("content") or "")
        else:  # the text attachments were in the content just edited
            parts = tuple(part for part in parts if part.get("type") == "image")
        messages, next_number = pinned(record.messages, record.metadata)
        start_from = SessionRecord(
            session_id,
            messages=messages[:kept],
            variables=record.variables,
            metadata={**record.metadata, **offset_after(next_number, kept)},
            compression_state=cut_compression(
                record.compression_state, kept, record.messages[kept:]
            ),
        )
        if message or not (parts or fragments):
            check_message_text(message)
        return turn._replace(
            message=message,
            start_from=start_from,
            expected_revision=record.revision,
            attachments=parts,
            fragments=fragments,
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
        from foliko_cli.engine.tools import no_code

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
        from foliko_cli.engine.stream import CallbackEvents
        from foliko_cli.engine.tools import code_stood_in

        # the history is compressed to fit, as a turn that may compress it sends it
        prepared = (await self._prepare(turn))._replace(compress=True)
        if code_stood_in():
            prepared = prepared._replace(tools=(*self._stand_ins(), *prepared.tools))
        target = self._resolve_model(self.model_name(turn.model, turn.agent))
        handler = await self._make_handler(CaptureModel(target), turn.agent)
        try:
            await handler.run_turn(prepared, CallbackEvents(_ignore) if stream else None)
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


def _ignore(event: dict[str, Any]) -> None:
    """A dry run's stream events: none reach anyone."""
