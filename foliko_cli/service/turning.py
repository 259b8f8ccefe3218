"""Running turns: chat, chat_stream, dry runs and single tool calls."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

from foliko_cli.context.request import RequestContext
from foliko_cli.engine.tools import ToolResult
from foliko_cli.errors import SessionExistsError, UsageError
from foliko_cli.messages.ids import check_session_id
from foliko_cli.messages.record import SessionRecord, new_metadata
from foliko_cli.messages.turns import cut_compression, drop_turns
from foliko_cli.models.base import ModelProvider

if TYPE_CHECKING:
    from foliko_cli.engine.dry_run import RequestCaptured
    from foliko_cli.engine.handler import TurnResult, TurnSetup
    from foliko_cli.messages.attachments import Source
from foliko_cli.service.base import ServiceBase
from foliko_cli.service.common import (
    TURN_FIELDS,
    check_message_text,
    forked,
)


class TurnsMixin(ServiceBase):
    """Turns as coroutines and event streams."""

    # turns

    async def _turn_setup(
        self,
        session_id: str,
        *,
        new: bool,
        fork_from: str | None,
        variables: dict[str, Any] | None,
        system: str | None,
        turns: int | None = None,
        upto: int | None = None,
        **extra: Any,
    ) -> TurnSetup:
        from foliko_cli.engine.handler import TurnSetup

        start_from = extra.pop("start_from", None)
        expected = extra.pop("expected_revision", None)
        if fork_from is not None:
            check_session_id(fork_from)
            if fork_from == session_id:
                raise UsageError(
                    f"cannot fork session {session_id!r} into itself", fix="name a new session"
                )
            if not new and await self.storage.revision(session_id) is not None:
                raise SessionExistsError(session_id)
            start_from = forked(await self.get_session(fork_from), session_id, turns, upto)
            expected = None if new else 0
        elif turns is not None or upto is not None:
            raise UsageError("a number of turns to keep needs a session to fork from")
        elif new:
            start_from = SessionRecord(session_id, metadata=new_metadata())
        return TurnSetup(
            start_from=start_from,
            variables=variables or {},
            system_prompt=system,
            expected_revision=expected,
            trash="new" if new and self._keeps_trash(session_id) else None,
            **extra,
        )

    async def latest_session_id(self) -> str:
        """The most recently active session (what ``chat --continue`` continues)."""
        latest = await self.list_sessions(sort="updated", limit=1)
        if not latest:
            raise UsageError("there is no session to continue yet", fix="name one to start it")
        return latest[0].session_id

    async def chat(
        self,
        session_id: str,
        message: str | None,
        *,
        model: str | ModelProvider | None = None,
        agent: str | None = None,
        timeout: float | None = None,
        new: bool = False,
        fork_from: str | None = None,
        variables: dict[str, Any] | None = None,
        system: str | None = None,
        turns: int | None = None,
        upto: int | None = None,
        regenerate: bool = False,
        attachments: Sequence[Source] = (),
        options: dict[str, Any] | None = None,
        schema: dict[str, Any] | None = None,
        compress: bool = True,
        request: RequestContext | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        **turn: Any,
    ) -> TurnResult:
        """One turn; ``new`` starts the session over (the old one goes to the trash:
        ``TurnResult.trashed``), ``fork_from`` copies another
        first (its first ``turns`` turns, or its first ``upto`` messages, when
        given); ``regenerate`` replaces the session's last turn by a new answer
        to its user message (``message`` None) or to ``message`` (that message
        edited), in one write. ``attachments`` are paths, http(s) URLs or
        ``Attachment`` bytes (see ``foliko_cli.messages.attachments``).

        ``options`` are model options (``temperature``, ``max_tokens``, ...)
        over the model's configured ones; ``schema`` is a JSON Schema the
        reply must follow; ``compress`` False refuses a history that does not
        fit the model's window (ContextOverflowError) instead of compressing it.
        ``on_event`` receives the stream's ``delta``, ``tool_call`` and
        ``tool_result`` events as they happen (the model then streams).
        ``turn`` holds the further TurnSetup fields (``messages``,
        ``instructions``, ``client_tools``, ``on_start``, ``on_message``,
        ``on_finish``; see chat.TurnSetup).
        """
        setup_options: dict[str, Any] = {"new": new, "fork_from": fork_from, "variables": variables}
        setup_options.update(system=system, turns=turns, upto=upto, regenerate=regenerate)
        setup_options["attachments"] = attachments
        if on_event is None:
            from foliko_cli.engine.handler import TurnOptions

            handler = await self.handler(model, agent)
            message, setup = await self._prepare(session_id, message, turn=turn, **setup_options)
            return await handler.chat(
                message,
                session_id=session_id,
                request=request or self.request(timeout),
                setup=setup,
                options=TurnOptions(options or {}, schema, compress),
            )
        result: TurnResult | None = None
        async for event in self.chat_stream(
            session_id,
            message,
            model=model,
            agent=agent,
            timeout=timeout,
            request=request,
            options=options,
            schema=schema,
            compress=compress,
            **setup_options,
            **turn,
        ):
            if event["type"] == "done":
                result = event["result"]
            else:
                on_event(event)
        assert result is not None
        return result

    async def chat_stream(
        self,
        session_id: str,
        message: str | None,
        *,
        model: str | ModelProvider | None = None,
        agent: str | None = None,
        timeout: float | None = None,
        new: bool = False,
        fork_from: str | None = None,
        variables: dict[str, Any] | None = None,
        system: str | None = None,
        turns: int | None = None,
        upto: int | None = None,
        regenerate: bool = False,
        attachments: Sequence[Source] = (),
        options: dict[str, Any] | None = None,
        schema: dict[str, Any] | None = None,
        compress: bool = True,
        request: RequestContext | None = None,
        **turn: Any,
    ) -> AsyncIterator[dict[str, Any]]:
        """The turn's events: ``delta``, ``tool_call``, ``tool_result``, then ``done``
        (whose ``result`` is the TurnResult). Options as for ``chat``."""
        from foliko_cli.engine.handler import TurnOptions

        handler = await self.handler(model, agent)
        message, setup = await self._prepare(
            session_id,
            message,
            new=new,
            fork_from=fork_from,
            variables=variables,
            system=system,
            turns=turns,
            upto=upto,
            regenerate=regenerate,
            attachments=attachments,
            turn=turn,
        )
        async for event in handler.chat_stream(
            message,
            session_id=session_id,
            request=request or self.request(timeout),
            setup=setup,
            options=TurnOptions(options or {}, schema, compress),
        ):
            yield event

    async def _prepare(
        self,
        session_id: str,
        message: str | None,
        *,
        regenerate: bool,
        attachments: Sequence[Source] = (),
        turn: dict[str, Any] | None = None,
        **options: Any,
    ) -> tuple[str, TurnSetup]:
        """Check the turn's input and build its setup; text attachments are appended
        to the message. ``turn`` holds the further TurnSetup fields (``messages``,
        ``instructions``, ...)."""
        check_session_id(session_id)
        turn = turn or {}
        unknown = set(turn) - TURN_FIELDS
        if unknown:
            raise TypeError(f"unexpected turn option {sorted(unknown)[0]!r}")
        if regenerate:
            if attachments:
                raise UsageError(
                    "regenerating a turn reuses its attachments", fix="attach nothing new"
                )
            return await self._regenerated(session_id, message, turn, options)
        if message is None:
            raise UsageError("no message to send", fix="give one")
        parts: list[dict[str, Any]] = []
        if attachments:
            from foliko_cli.messages.attachments import compose, load_all

            loaded = await load_all(attachments, self.timeout, self._read_resource)
            message, parts = compose(message, loaded)
        if message or not (parts or turn.get("messages")):  # else it continues or attaches
            check_message_text(message)
        setup = await self._turn_setup(session_id, **options, **turn)
        return message, setup._replace(attachments=tuple(parts))

    async def _regenerated(
        self, session_id: str, message: str | None, turn: dict[str, Any], options: dict[str, Any]
    ) -> tuple[str, TurnSetup]:
        """The setup that replaces the session's last turn by a new answer to its
        user message, sent again with its attachments; given ``message``, that
        message stands in for the user message (edit and resend)."""
        if options["new"] or options["fork_from"] is not None:
            raise UsageError(
                "regenerating a turn replaces the session's own last turn",
                fix="neither start over nor fork",
            )
        setup = await self._turn_setup(session_id, **options, **turn)
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
        session_id: str,
        message: str | None,
        *,
        model: str | ModelProvider | None = None,
        agent: str | None = None,
        options: dict[str, Any] | None = None,
        schema: dict[str, Any] | None = None,
        stream: bool = False,
        **setup: Any,
    ) -> dict[str, Any]:
        """Exactly what the model would be sent for this turn (``stream``: as a
        streamed turn sends it); nothing is called or saved, though the server may
        be asked for its context window, as a turn asks it. ``request`` is the HTTP
        request itself, as the provider builds it (absent for a provider that sends
        none). ``setup`` as for ``chat`` (``new``, ``fork_from``, ``messages``, ...)."""
        target, captured = await self._captured(
            session_id, message, model, agent, options, schema, setup, stream=stream
        )
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
            if target is not self.model_name(model, agent):
                await target.aclose()

    async def count_tokens(
        self,
        session_id: str,
        message: str,
        *,
        model: str | ModelProvider | None = None,
        agent: str | None = None,
        **setup: Any,
    ) -> tuple[int, bool]:
        """The tokens of what this turn would send the model, and whether the
        model's server counted them (True) or foliko estimated them (False)."""
        import orjson

        from foliko_cli.engine.compression import message_tokens
        from foliko_cli.messages.tokens import estimate_tokens

        target, captured = await self._captured(
            session_id, message, model, agent, None, None, setup
        )
        request = captured.request
        try:
            counted = await target.count_tokens(request)
        finally:
            if target is not self.model_name(model, agent):
                await target.aclose()
        if counted is not None:
            return counted, True
        estimate = estimate_tokens(request.system or "")
        estimate += sum(message_tokens(m) for m in request.messages)
        if request.tools:
            estimate += estimate_tokens(orjson.dumps(list(request.tools)).decode())
        return estimate, False

    async def _captured(
        self,
        session_id: str,
        message: str | None,
        model: str | ModelProvider | None,
        agent: str | None,
        options: dict[str, Any] | None,
        schema: dict[str, Any] | None,
        setup: dict[str, Any],
        *,
        stream: bool = False,
    ) -> tuple[ModelProvider, RequestCaptured]:
        """The provider a turn would call, and its call, captured (``RequestCaptured``)."""
        from foliko_cli.engine.dry_run import CaptureModel, RequestCaptured
        from foliko_cli.engine.handler import TurnOptions
        from foliko_cli.models import resolve_model

        turn = {key: setup.pop(key) for key in list(setup) if key in TURN_FIELDS}
        defaults = {"new": False, "fork_from": None, "variables": None, "system": None}
        message, prepared = await self._prepare(
            session_id,
            message,
            regenerate=setup.pop("regenerate", False),
            turn=turn,
            **{**defaults, **setup},
        )
        target = resolve_model(self.model_name(model, agent), self.models)
        handler = await self._make_handler(CaptureModel(target), agent)
        request, turn_options = self.request(), TurnOptions(options or {}, schema)
        try:
            if stream:
                async for _event in handler.chat_stream(
                    message,
                    session_id=session_id,
                    request=request,
                    setup=prepared,
                    options=turn_options,
                ):
                    pass
            else:
                await handler.chat(
                    message,
                    session_id=session_id,
                    request=request,
                    setup=prepared,
                    options=turn_options,
                )
        except RequestCaptured as captured:
            return target, captured
        except BaseException:
            if target is not self.model_name(model, agent):
                await target.aclose()
            raise
        raise AssertionError("the capture model was not called")

    async def call_tool(
        self, session_id: str, name: str, arguments: Any, *, agent: str | None = None
    ) -> ToolResult:
        """Run one tool inside the session, saving the variables it changed."""
        check_session_id(session_id)
        handler = await self.handler(self.model if self.model is not None else "echo", agent)
        return await handler.run_tool(
            name, arguments, session_id=session_id, request=self.request()
        )
