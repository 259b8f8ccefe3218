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

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from foliko_cli.common.clock import now_ms
from foliko_cli.common.loop import require_loop, run_to_completion, running_loop
from foliko_cli.context import AgentContext, RequestContext, SessionContext
from foliko_cli.context.session import SessionCheckpoint
from foliko_cli.engine.compression import Compressor
from foliko_cli.engine.framework import Framework
from foliko_cli.engine.prompts import turn_system_prompt
from foliko_cli.engine.tools import Tool, ToolResult
from foliko_cli.engine.turn import TurnRequest, TurnResult
from foliko_cli.errors import (
    ConflictError,
    ContextOverflowError,
    CorruptSessionError,
    SessionBusyError,
    StorageError,
    TrashFullError,
    TurnTimeoutError,
    UsageError,
)
from foliko_cli.messages.item_numbers import offset_of
from foliko_cli.messages.record import SessionRecord, SessionState, clear_record, new_metadata
from foliko_cli.models.base import (
    ModelProvider,
    ModelRequest,
    ModelResponse,
    check_options,
    forced_tool,
)

if TYPE_CHECKING:
    from foliko_cli.engine.stream import TurnEvents, TurnStream
    from foliko_cli.storage.trash import TrashEntry

T = TypeVar("T")

DEFAULT_MAX_STEPS = 10
MAX_REPLY_TOKENS = 4096
RESOLVE_S = 30.0
"""How long a turn whose write went unanswered keeps asking whether it was saved."""
_MODEL_KEYS = (
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "name",
    "is_error",
    "attachments",
    "fragments",
)


def _with_fragments(message: dict[str, Any], texts: Mapping[str, str]) -> dict[str, Any]:
    """The message as the model is sent it: its fragments' texts before its own,
    and which fragments they are (hash and source: the content is not all typed,
    and its size is the content's)."""
    if "fragments" not in message:
        return message
    from foliko_cli.messages.fragments import expanded, refs_of

    named = [{"sha256": r["sha256"], "source": r.get("source")} for r in refs_of(message)]
    return {**message, "content": expanded(message, texts), "fragments": named}


def default_max_tokens(window: int) -> int:
    """A reply may take a quarter of the window, at most MAX_REPLY_TOKENS."""
    return max(16, min(window // 4, MAX_REPLY_TOKENS))


def summed(first: Mapping[str, int], second: Mapping[str, int]) -> dict[str, int]:
    """Two usages' counters added key by key."""
    total = dict(first)
    for key, value in second.items():
        total[key] = total.get(key, 0) + value
    return total


def turn_cost(usage: Mapping[str, int], price: Mapping[str, float]) -> float | None:
    """Dollars for ``usage`` at ``price`` (per million input and output tokens)."""
    if not price:
        return None
    spent = usage.get("input_tokens", 0) * price.get("input", 0.0)
    spent += usage.get("output_tokens", 0) * price.get("output", 0.0)
    return round(spent / 1_000_000, 8)


class AgentChatHandler:
    """Runs turns with ``model`` over the framework's storage and sessions.

    ``context_window`` (FOLIKO_CONTEXT_WINDOW) yields only to a window configured
    for the model itself; without either, the server is asked once, then the
    model's known window is used. ``keeps_trash(session_id)`` says whether a
    session a turn starts over (``TurnRequest.new``) is first kept in the trash.
    """

    def __init__(
        self,
        framework: Framework,
        model: ModelProvider,
        *,
        agent: AgentContext | None = None,
        system_prompt: str | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        context_window: int | None = None,
        keeps_trash: Callable[[str], bool] | None = None,
    ):
        if max_steps < 1:
            raise ValueError("max_steps must be at least 1")
        self.framework = framework
        self.storage = framework.session_storage
        self.sessions = framework.context_manager
        self.keeps_trash = keeps_trash or _never
        self.model = model
        self.agent = agent
        self.system_prompt = system_prompt
        self.max_steps = max_steps
        explicit = context_window if not model.window_configured else None
        self.compressor = Compressor(explicit or model.context_window)
        self._window_settled = bool(model.window_configured or explicit or model.offline)

    # public

    async def chat(
        self,
        turn: TurnRequest | str,
        *,
        session_id: str | None = None,
        request: RequestContext | None = None,
    ) -> TurnResult:
        """One turn without streaming: the model is asked for whole replies.
        ``turn`` is a TurnRequest, or the message of one in ``session_id``."""
        return await self.run_turn(self._turn(turn, session_id, request))

    def chat_stream(
        self,
        turn: TurnRequest | str,
        *,
        session_id: str | None = None,
        request: RequestContext | None = None,
    ) -> TurnStream:
        """``delta``, ``tool_call`` and ``tool_result`` events, then ``done``: the
        model streams its replies and the deltas are passed on as they come."""
        from foliko_cli.engine.stream import TurnStream

        turn = self._turn(turn, session_id, request)
        assert turn.request is not None
        return TurnStream(lambda events: self.run_turn(turn, events), turn.request)

    async def run_turn(self, turn: TurnRequest, events: TurnEvents | None = None) -> TurnResult:
        """The turn itself, in the caller's task (the one primitive ``chat`` and
        ``chat_stream`` adapt): ``events`` receives a streamed turn's events
        (None: the model is asked for whole replies). Once the turn is saved,
        ``turn.on_done`` is awaited with its result (to its end: a cancellation
        that arrives meanwhile waits, and the saved turn stands).

        The turn runs in a task of its own, which ``turn.request.cancel()``
        cancels — or, with no event loop running, in the caller's (see
        common/loop.py: nothing can cancel it then).
        """
        request = turn.request or self._request()
        if running_loop() is None:
            return await self._run_turn(turn, request, events)
        import asyncio

        task = asyncio.ensure_future(self._run_turn(turn, request, events))
        request.on_cancel(task.cancel)
        try:
            return await task
        finally:
            request.remove_on_cancel(task.cancel)

    async def _run_turn(
        self, turn: TurnRequest, request: RequestContext, events: TurnEvents | None
    ) -> TurnResult:
        if not self.model.offline:
            require_loop(f"calling {self.model.name}")
        trash = "new" if turn.new and self.keeps_trash(turn.session_id) else None

        async def work(session: SessionContext) -> tuple[TurnResult, bool]:
            turn.check_start(session)
            replace = turn.apply_start(session)
            return await self._run_steps(turn, session, request, events), replace

        result = await self._in_session(
            turn.session_id,
            request,
            work,
            trash=trash,
            replacing=turn.start_from is not None,
            if_busy=turn.if_busy,
        )
        if turn.on_done is not None:  # the turn is saved: a cancellation waits for it
            await run_to_completion(turn.on_done(result))
        return result

    def _turn(
        self, turn: TurnRequest | str, session_id: str | None, request: RequestContext | None
    ) -> TurnRequest:
        if isinstance(turn, str):
            if session_id is None:
                raise TypeError("a message needs its session_id")
            turn = TurnRequest(session_id, turn)
        elif session_id is not None:
            raise TypeError("a TurnRequest names its own session")
        request = request or turn.request or self._request()
        return turn if request is turn.request else turn._replace(request=request)

    def _request(self) -> RequestContext:
        return self.framework.get_request_context() or RequestContext()

    async def clear_history(self, session_id: str, timeout: float = 30.0) -> None:
        """Drop the session's messages, keeping its variables."""
        storage = self.storage
        async with self.framework.hold_session(session_id, timeout):
            record = await storage.load(session_id)
            if record is None:
                return
            revision = await storage.save(clear_record(record))
            session = self.sessions.get_session_context(session_id)
            if session is not None:
                session.apply_record(record)
                session.revision = revision

    async def compact(
        self,
        session_id: str,
        *,
        request: RequestContext | None = None,
        keep: int | None = None,
    ) -> dict[str, Any]:
        """Compress the session's history now: all but its last ``keep`` turns, or
        (None) as a full window would. Save it and return the compaction (see
        compression.py), which waits in the compression state for the next
        turn's reply; NothingToCompactError, and nothing saved, when there is
        nothing to fold in."""
        request = request or self._request()

        async def work(session: SessionContext) -> tuple[dict[str, Any], bool]:
            await self.learn_context_window()
            await self.load_fragments(session)
            entry = await self.compressor.compact(
                session,
                self.build_system_prompt(session),
                self.model,
                time.monotonic() + request.remaining(),
                keep=keep,
            )
            cost = turn_cost(entry["usage"], self.model.price)
            if cost is not None:
                entry["cost"] = cost
            state = session.compression_state
            state["compactions"] = [*_pending(state), entry]
            return entry, False

        return await self._in_session(session_id, request, work)

    async def run_tool(
        self, name: str, arguments: Any, *, session_id: str, request: RequestContext | None = None
    ) -> ToolResult:
        """Run one tool inside the session (a workflow step), saving what it changed."""
        request = request or self._request()

        async def work(session: SessionContext) -> tuple[ToolResult, bool]:
            return await self.framework.execute_tool(name, arguments), False

        return await self._in_session(session_id, request, work)

    # the turn

    async def _in_session(
        self,
        session_id: str,
        request: RequestContext,
        work: Callable[[SessionContext], Awaitable[tuple[T, bool]]],
        *,
        trash: str | None = None,
        replacing: bool = False,
        if_busy: str = "wait",
    ) -> T:
        """Hold the session, run ``work`` on its fresh state, save whole or not at all.

        ``work`` returns its result and whether the session must be replaced
        (rather than appended to); with ``trash``, the reason the stored session
        is first kept in the trash when it is. ``replacing``: ``work`` replaces
        the session whole, so its history is not loaded. ``if_busy``: what to do
        when another turn holds the session (``Framework.hold_session``).
        """
        committed: list[T] = []
        sent: list[T] = []  # the result whose write was sent
        try:
            async with self.framework.hold_session(
                session_id, request.timeout, wait=request.remaining(), if_busy=if_busy
            ):
                session = self.framework.get_or_create_session_context(session_id)
                try:
                    transaction = self._transaction(
                        session, request, work, committed, trash, replacing, sent
                    )
                    if running_loop() is None:  # nothing here waits (common/loop.py)
                        return await transaction
                    import asyncio

                    async with asyncio.timeout(request.remaining()) as deadline:
                        with request.follow(deadline):
                            return await transaction
                except TimeoutError:
                    if committed:
                        return committed[0]
                    raise TurnTimeoutError(request.timeout) from None
                finally:
                    self.framework.release_session_context(session_id)
        except BaseException as exc:  # once saved, the turn stands: whatever comes after
            if committed:
                return committed[0]
            if sent and _unanswered(exc) and await self._saved(session_id, request):
                return sent[0]
            raise

    async def _saved(self, session_id: str, request: RequestContext) -> bool:
        """Whether this request's turn is stored, after its write went unanswered
        (the connection was lost, or the server did not answer in time: the write
        may have landed). Asked under the session's lock, which a write still in
        flight on a lost PostgreSQL connection holds until that write is over;
        again while the storage fails, for up to RESOLVE_S. False when it is not
        stored, or when that could not be found out."""
        import asyncio

        from foliko_cli.storage.capabilities import load_recent

        deadline = time.monotonic() + RESOLVE_S
        while True:
            try:
                async with self.storage.lock(session_id, max(deadline - time.monotonic(), 0.1)):
                    record = await load_recent(self.storage, session_id)
                return record is not None and any(
                    m.get("request_id") == request.request_id for m in record.messages
                )
            except (StorageError, SessionBusyError):
                if time.monotonic() > deadline:
                    return False
                await asyncio.sleep(0.5)

    async def _transaction(
        self,
        session: SessionContext,
        request: RequestContext,
        work: Callable[[SessionContext], Awaitable[tuple[T, bool]]],
        committed: list[T],
        trash_reason: str | None = None,
        replacing: bool = False,
        sent: list[T] | None = None,
    ) -> T:
        """Run ``work`` and write its outcome; once written, ``committed`` holds the
        result, and ``sent`` holds it once an append was sent."""
        await self._sync_history(session, replacing)
        checkpoint = session.checkpoint()
        try:
            with self.framework.bind(request=request, session=session, agent=self.agent):
                result, replace = await work(session)
            if replace:
                await self._keep_fragments(session, session.messages)
                record = session.to_record()
                record.saved_at = 0
                write = self._replaced(record, checkpoint.revision, trash_reason)
            else:
                await self._keep_fragments(session, session.messages[checkpoint.message_count :])
                write = self._appended(session, checkpoint)
                if sent is not None and running_loop() is not None:
                    sent.append(result)
            (session.revision, entry), _ = await run_to_completion(write)
        except BaseException:
            session.restore(checkpoint)
            raise
        if entry is not None:
            result = result._replace(trashed=entry.entry_id)  # type: ignore[attr-defined]
        committed.append(result)
        return result

    async def _keep_fragments(
        self, session: SessionContext, messages: list[dict[str, Any]]
    ) -> None:
        """Store the texts of the fragments ``messages`` and the system prompt carry
        (rule 10 of storage/base.py) and keep only their references, unless the
        backend keeps no texts: then they stay inline."""
        if "system_fragments" not in session.metadata and not any(
            "fragments" in m for m in messages
        ):
            return
        from foliko_cli.messages import fragments

        texts = fragments.carried_texts(messages, session.metadata)
        if not texts or not await self.storage.put_fragments(texts):
            return
        session.fragment_texts.update(texts)
        bare, session.metadata = fragments.outlined(messages, session.metadata)
        for message, kept in zip(messages, bare, strict=True):
            if kept is not message:
                message["fragments"] = kept["fragments"]

    async def load_fragments(self, session: SessionContext) -> None:
        """Read the texts of the fragments that are not loaded and that the system
        prompt or a message the model may still read refers to: those after the
        compression summary (``view``), never the whole history a long-lived
        session holds (P2)."""
        messages = self.compressor.view(session, None)[1]
        if "system_fragments" not in session.metadata and not any(
            "fragments" in m for m in messages
        ):
            return
        from foliko_cli.messages import fragments

        wanted = fragments.hashes_in(messages, session.metadata)
        missing = wanted - session.fragment_texts.keys()
        if missing:
            found = await self.storage.get_fragments(missing)
            session.fragment_texts.update(fragments.verified(found))

    async def _appended(
        self, session: SessionContext, checkpoint: SessionCheckpoint
    ) -> tuple[int, None]:
        revision = await self.storage.append(
            session.session_id,
            session.messages[checkpoint.message_count :],
            SessionState(session.variables, session.metadata, session.compression_state),
            expected_revision=checkpoint.revision,
        )
        return revision, None

    async def _replaced(
        self, record: SessionRecord, expected: int, trash_reason: str | None
    ) -> tuple[int, TrashEntry | None]:
        """Write ``record`` over the stored session (revision ``expected``); with
        ``trash_reason``, the stored one is copied to the trash first, and the copy
        is dropped again when the write fails."""
        from foliko_cli.storage import trash

        storage = self.storage
        entry = None
        if trash_reason is not None and expected:
            stored = await storage.load(record.session_id)
            if stored is not None and stored.revision == expected:
                entry = await trash.keep_copy(storage, stored, trash_reason)
        try:
            return await storage.save(record, expected_revision=expected), entry
        except BaseException:
            if entry is not None:
                await trash.discard(storage, entry)
            raise

    async def _sync_history(self, session: SessionContext, replacing: bool = False) -> None:
        """Load the history once, and again only when another writer moved it;
        ``replacing`` (the turn replaces it whole): only its revision."""
        stored_revision = await self.storage.revision(session.session_id)
        if session.history_loaded and stored_revision == session.revision:
            return
        if replacing:  # loaded again by the next turn that keeps it
            session.history_loaded = False
            session.revision = stored_revision or 0
        elif stored_revision is None:
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
        own = instructions or session.metadata.get("system_prompt")
        if not instructions and "system_fragments" in session.metadata:
            from foliko_cli.messages.fragments import system_prompt

            own = system_prompt(own, session.metadata, session.fragment_texts)
        return turn_system_prompt(self.agent, own, self.system_prompt)

    def model_request(
        self,
        session: SessionContext,
        system: str | None,
        tools: list[dict[str, Any]],
        request: RequestContext,
        options: Mapping[str, Any] | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> ModelRequest:
        """What the model is sent: the compressed view, reduced to the model's keys,
        with a bounded reply unless the config or the turn's ``options`` say how long."""
        system, messages = self.compressor.view(session, system)
        asked = {"max_tokens": self.reply_bound(), **self.model.options, **(options or {})}
        sent = [{k: m[k] for k in _MODEL_KEYS if k in m} for m in messages]
        if any("fragments" in m for m in messages):
            sent = [_with_fragments(m, session.fragment_texts) for m in sent]
        return ModelRequest(
            messages=sent,
            system=system,
            tools=tools,
            deadline=time.monotonic() + request.remaining(),
            options=asked,
            schema=schema,
        )

    def reply_bound(self, options: Mapping[str, Any] | None = None) -> int:
        """A reply's ``max_tokens``: the turn's option, the model's, else the alias's
        ``max_tokens``, else a share of the window (``default_max_tokens``)."""
        asked = {**self.model.options, **(options or {})}.get("max_tokens")
        return asked or self.model.max_tokens or default_max_tokens(self.compressor.budget)

    async def learn_context_window(self) -> None:
        """Ask the server for the model's window, once per handler (see __init__)."""
        if self._window_settled:
            return
        self._window_settled = True
        window = await self.model.discover_context_window(self.framework.home)
        if window:
            self.compressor.budget = window

    async def _compress(
        self,
        session: SessionContext,
        system: str | None,
        request: RequestContext,
        *,
        force: bool = False,
        above: int | None = None,
        spent: dict[str, int],
        made: list[dict[str, Any]],
        events: TurnEvents | None = None,
    ) -> bool:
        """Compress if needed; each compaction made is also a ``compaction`` event."""
        done = await self.compressor.compress_if_needed(
            session,
            system,
            self.model,
            time.monotonic() + request.remaining(),
            force=force,
            above=above,
            spent=spent,
            made=made,
        )
        if done:
            await _emit(events, {"type": "compaction", "summary": made[-1]["summary"]})
        return done

    async def _call_within_window(
        self,
        session: SessionContext,
        system: str | None,
        specs: list[dict[str, Any]],
        request: RequestContext,
        turn: TurnRequest,
        options: Mapping[str, Any],
        events: TurnEvents | None,
        spent: dict[str, int],
        made: list[dict[str, Any]],
    ) -> ModelResponse:
        """Call the model; when the prompt overflows its window, learn the window
        (from the error, or below the prompt's estimate), compress, and retry once.
        A compression's model call is added to ``spent``, the compaction to ``made``."""
        model_request = self.model_request(session, system, specs, request, options, turn.schema)
        try:
            return await self._call_model(model_request, events)
        except ContextOverflowError as exc:
            if not turn.compress:
                raise self._too_long(session, exc.window, compressed=False) from None
            sent = self.compressor.tokens(model_request.system, model_request.messages)
            window = exc.window or int(sent * 0.75)
            if exc.window:
                self.model.remember_context_window(exc.window, self.framework.home)
            self.compressor.budget = min(self.compressor.budget, window)
            await self._compress(
                session, system, request, force=True, spent=spent, made=made, events=events
            )
            model_request = self.model_request(
                session, system, specs, request, options, turn.schema
            )
            self._check_fits(model_request, session)
            try:
                return await self._call_model(model_request, events)
            except ContextOverflowError:
                raise self._too_long(session, exc.window) from None

    def _check_fits(
        self, model_request: ModelRequest, session: SessionContext, *, compressed: bool = True
    ) -> None:
        needed = self.compressor.tokens(model_request.system, model_request.messages)
        if needed > self.compressor.budget:
            raise self._too_long(session, self.compressor.budget, compressed=compressed)

    def _too_long(
        self, session: SessionContext, window: int | None, *, compressed: bool = True
    ) -> ContextOverflowError:
        window = window or self.compressor.budget
        if not compressed:
            return ContextOverflowError(
                f"the conversation does not fit the context window of {self.model.name} "
                f"({window:,} tokens) and may not be compressed; nothing was saved: "
                "let the history be compressed, or start a shorter conversation",
                window=window,
            )
        last = session.messages[-1] if session.messages else {"content": ""}
        size = self.compressor.count(str(last.get("content") or ""))
        return ContextOverflowError(
            f"the message (about {size:,} tokens) does not fit the context window of "
            f"{self.model.name} ({window:,} tokens, with the system prompt and tools) even "
            "after compressing the history; nothing was saved: shorten the message or "
            "use a model with a larger window",
            window=window,
        )

    def _user_message(
        self, text: str, attachments: Sequence[Any], fragments: Sequence[Any] = ()
    ) -> dict[str, Any]:
        """The turn's user message (with the references of its fragments); an image
        for a model that takes none is refused."""
        if fragments:
            message = self._user_message(text, attachments)
            return {**message, "fragments": [dict(ref) for ref in fragments]}
        if not attachments:
            return {"role": "user", "content": text}
        from foliko_cli.errors import AttachmentError
        from foliko_cli.messages.attachments import IMAGE_KINDS

        image = next((p for p in attachments if p.get("type") == "image"), None)
        if image is not None and not self.model.accepts_images:
            raise AttachmentError(
                f"cannot attach the image {image.get('name')}: {self.model.name} does not take "
                f"images ({IMAGE_KINDS}); nothing was sent or saved",
                fix="use a model that does (OpenAI, Anthropic, llama.cpp with a vision model)",
            )
        return {"role": "user", "content": text, "attachments": [dict(p) for p in attachments]}

    def _offered_tools(self, turn: TurnRequest) -> tuple[dict[str, Tool], set[str]]:
        """The tools this turn runs itself, by name, and the names of the client's
        (which end the turn when called); a client tool wins over a server one."""
        client_tools = {spec["name"] for spec in turn.client_tools}
        tools = {
            name: tool
            for name, tool in self.framework.resolve_tools().items()
            if name not in client_tools and (turn.server_tools is None or name in turn.server_tools)
        }
        tools.update((tool.name, tool) for tool in turn.tools if tool.name not in client_tools)
        return tools, client_tools

    def _reply(
        self,
        response: ModelResponse,
        called: float,
        spent: dict[str, int],
        made: list[dict[str, Any]],
    ) -> dict[str, Any]:
        """The assistant message of one model call; ``spent`` and ``made`` are the
        compression's usage and compactions since the last reply, carried on it."""
        reply: dict[str, Any] = {
            "role": "assistant",
            "content": response.text,
            "model": self.model.name,
            "usage": dict(response.usage),
            "duration_ms": round((time.monotonic() - called) * 1000),
        }
        if spent:
            reply["compression_usage"] = dict(spent)
        if made:
            reply["compactions"] = list(made)
        cost = turn_cost(summed(response.usage, spent), self.model.price)
        if cost is not None:
            reply["cost"] = cost
        if response.finish_reason not in ("stop", "tool_calls"):
            reply["finish_reason"] = response.finish_reason
        if response.tool_calls:
            reply["tool_calls"] = [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in response.tool_calls
            ]
        return reply

    async def _run_tool_calls(
        self,
        response: ModelResponse,
        tools: dict[str, Tool],
        client_tools: set[str],
        events: TurnEvents | None,
        add: Callable[[dict[str, Any]], None],
        failed: list[str],
    ) -> bool:
        """Run the calls the model asked for, adding each result; True when one
        was the client's (the turn hands it back). The error of each call the
        user typed that failed is added to ``failed``."""
        handed_back = False
        for call in response.tool_calls:
            if call.name in client_tools:
                handed_back = True
                continue
            require_loop("running a tool")  # a tool may wait on anything
            called = {"id": call.id, "name": call.name, "arguments": call.arguments}
            await _emit(events, {"type": "tool_call", **called})
            result = await self.framework.execute_tool(
                call.name, call.arguments, tools, typed=call.typed
            )
            if call.typed and result.is_error:
                failed.append(f"{call.name}: {result.content}")
            tool_message: dict[str, Any] = {
                "role": "tool",
                "content": result.content,
                "tool_call_id": call.id,
                "name": call.name,
            }
            if result.is_error:
                tool_message["is_error"] = True
            if result.attachments:
                tool_message["attachments"] = [dict(p) for p in result.attachments]
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
        return handed_back

    async def _run_steps(
        self,
        turn: TurnRequest,
        session: SessionContext,
        request: RequestContext,
        events: TurnEvents | None,
    ) -> TurnResult:
        started = time.monotonic()
        await self.learn_context_window()
        first = len(session.messages)
        compressed_before = session.compression_state.get("last_compressed_at")
        if turn.on_start is not None:
            position = session.message_offset + first
            turn.on_start(position, position + offset_of(session.metadata))
        if events is not None:
            events.start(session.message_offset + first)
        annotations = turn.annotations or {}

        def add(new: dict[str, Any]) -> None:
            if len(session.messages) == first:
                new.update(annotations)
            session.add_message(self._stamp(new, request))
            if turn.on_message is not None:
                turn.on_message(session.message_offset + len(session.messages) - 1, new)

        for extra in turn.messages:
            add(dict(extra))
        if turn.message or not turn.messages:
            add(self._user_message(turn.message or "", turn.attachments, turn.fragments))
        steps = await self._steps(turn, session, request, events, add)
        if turn.on_finish is not None:
            turn.on_finish(session.messages[first:])
        return self._result(steps, session, request, started, compressed_before)

    async def _steps(
        self,
        turn: TurnRequest,
        session: SessionContext,
        request: RequestContext,
        events: TurnEvents | None,
        add: Callable[[dict[str, Any]], None],
    ) -> _Steps:
        """Call the model and run the tools it asks for, at most ``max_steps``
        times, adding each reply and tool message with ``add``."""
        await self.load_fragments(session)
        tools, client_tools = self._offered_tools(turn)
        specs = [tool.spec() for tool in tools.values()] + list(turn.client_tools)
        self.compressor.count_tools(specs)
        options = dict(turn.options or {})
        asked = {**self.model.options, **options}
        check_options(asked)
        choice = _checked_tool_choice(asked, specs)
        system = self.build_system_prompt(session, turn.instructions)
        usage: dict[str, int] = {}
        compression: dict[str, int] = {}
        spent: dict[str, int] = {}  # by compression, not yet on a reply
        made: list[dict[str, Any]] = _pending(session.compression_state)  # compactions, likewise
        session.compression_state.pop("compactions", None)
        response = ModelResponse(text="")
        step = 0
        failed: list[str] = []
        handed_back = False
        while step < self.max_steps:
            step += 1
            if turn.compress:
                await self._compress(
                    session,
                    system,
                    request,
                    above=turn.compact_above,
                    spent=spent,
                    made=made,
                    events=events,
                )
            else:
                model_request = self.model_request(
                    session, system, specs, request, options, turn.schema
                )
                self._check_fits(model_request, session, compressed=False)
            called = time.monotonic()
            response = await self._call_within_window(
                session, system, specs, request, turn, options, events, spent, made
            )
            if choice not in (None, "auto"):
                options["tool_choice"] = choice = "auto"
            if turn.schema is not None and not response.tool_calls:
                from foliko_cli.messages.schema import check_reply

                check_reply(response.text, turn.schema, self.model.name)
            usage = summed(usage, response.usage)
            compression = summed(compression, spent)
            add(self._reply(response, called, spent, made))
            spent.clear()
            made.clear()
            if not response.tool_calls:
                break
            handed_back = await self._run_tool_calls(
                response, tools, client_tools, events, add, failed
            )
            if handed_back:
                break
        return _Steps(response, step, handed_back, usage, compression, options, tuple(failed))

    def _result(
        self,
        steps: _Steps,
        session: SessionContext,
        request: RequestContext,
        started: float,
        compressed_before: Any,
    ) -> TurnResult:
        response, usage, compression = steps.response, steps.usage, steps.compression
        if steps.handed_back:
            finish = "tool_calls"
        else:
            finish = "max_steps" if response.tool_calls else response.finish_reason
        state = session.compression_state
        compressed = None
        if state.get("last_compressed_at") != compressed_before:
            compressed = {
                "method": state.get("method"),
                "covered": state.get("covered"),
                "window": self.compressor.budget,
            }
        return TurnResult(
            success=True,
            message=response.text,
            step_count=steps.calls,
            request_id=request.request_id,
            trace_id=request.trace_id,
            session_id=session.session_id,
            usage={**usage, "compression": compression} if compression else usage,
            finish_reason=finish,
            model=self.model.name,
            duration_ms=round((time.monotonic() - started) * 1000),
            cost=turn_cost(summed(usage, compression), self.model.price),
            max_tokens=self.reply_bound(steps.options),
            compressed=compressed,
            typed_failures=steps.typed_failures,
        )

    async def _call_model(self, request: ModelRequest, events: TurnEvents | None) -> ModelResponse:
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


class _Steps(NamedTuple):
    """What a turn's model calls came to: the last ``response``, how many
    ``calls``, whether a client tool ``handed_back`` the turn, the replies'
    ``usage`` and the ``compression``'s, the options the last call had, and
    the errors of the calls the user typed that failed."""

    response: ModelResponse
    calls: int
    handed_back: bool
    usage: dict[str, int]
    compression: dict[str, int]
    options: Mapping[str, Any]
    typed_failures: tuple[str, ...] = ()


def _never(session_id: str) -> bool:
    return False


def _pending(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The compactions asked for since the last turn, waiting for its reply."""
    waiting = state.get("compactions")
    return [e for e in waiting if isinstance(e, dict)] if isinstance(waiting, list) else []


def _checked_tool_choice(options: Mapping[str, Any], specs: list[dict[str, Any]]) -> Any:
    """The turn's ``tool_choice`` option (None when unset), once it is known to be
    a mode or the name of one of the tools offered."""
    choice = options.get("tool_choice")
    if choice is None:
        return None
    names = [spec["name"] for spec in specs]
    if not isinstance(choice, str):
        raise UsageError(
            f"tool_choice {choice!r} is neither auto, none, required nor a tool's name; fix it"
        )
    name = forced_tool(choice)
    if name is not None and name not in names:
        offered = ", ".join(names) or "none"
        raise UsageError(
            f"tool_choice names {name!r}, which is not one of this turn's tools ({offered}); "
            "name one of them"
        )
    return choice


async def _emit(events: TurnEvents | None, event: dict[str, Any]) -> None:
    if events is not None:
        await events.put(event)


def _unanswered(exc: BaseException) -> bool:
    """A storage error that leaves a write's outcome unknown (not one that says
    it was refused)."""
    refused = (ConflictError, CorruptSessionError, TrashFullError)
    return isinstance(exc, StorageError) and not isinstance(exc, refused)
