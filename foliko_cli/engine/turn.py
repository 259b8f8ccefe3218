"""One turn as one value: ``TurnRequest`` (what it is asked to do) and
``TurnResult`` (what it returns).

The CLI, every HTTP route and a script build a TurnRequest; the service
resolves what needs the store or the network (a fork's copy, attachments,
the regenerated turn) into the same value (``_replace``), and the engine
runs it as it is. Name the fields after the message: their order is not
part of the contract.
"""

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

# Evaluated annotations, not strings: typing.NamedTuple compiles every string
# annotation, which costs start-up time (P1). These modules are loaded by then.
from foliko_cli.context.request import RequestContext
from foliko_cli.context.session import SessionContext
from foliko_cli.engine.tools import Tool
from foliko_cli.errors import ConflictError, SessionExistsError, UsageError
from foliko_cli.messages.record import SessionRecord, new_metadata
from foliko_cli.models.base import ModelProvider

if TYPE_CHECKING:
    from typing import TypedDict

    from foliko_cli.messages.attachments import Source


class TurnResult(NamedTuple):
    """What a finished turn returns (SPEC F3). ``success`` is always True: a turn
    that fails raises instead (the seed's shape keeps the field)."""

    success: bool
    message: str
    step_count: int
    request_id: str
    trace_id: str
    session_id: str
    usage: dict[str, Any]
    """The replies' counters; ``compression`` beside them holds those of the
    calls that summarised the history for this turn, when there were any."""
    finish_reason: str = "stop"
    model: str = ""
    duration_ms: int = 0
    cost: float | None = None
    trashed: str | None = None
    """The trash entry that keeps the session this turn started over."""
    max_tokens: int | None = None
    """The bound the last model call was given for its reply."""
    compressed: Mapping[str, Any] | None = None
    """When the turn compressed the history: its ``method`` (``summary`` or
    ``truncation``), the messages it ``covered`` and the ``window`` it fit."""
    typed_failures: tuple[str, ...] = ()
    """``NAME: error`` for each call the user typed (``/tool``) that failed or
    was refused: the turn is saved, but what it was asked did not happen."""

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


class TurnRequest(NamedTuple):
    """One turn in ``session_id`` with ``message`` (None: regenerate's own).

    What the service resolves: ``model`` and ``agent`` pick the handler;
    ``new`` starts the session over (the old one goes to the trash),
    ``fork_from`` copies another first (its first ``turns`` turns, or ``upto``
    messages); ``regenerate`` replaces the last turn by a new answer to its
    user message (or to ``message``: that message edited); ``attachments`` are
    paths, http(s) URLs or ``Attachment`` bytes, read into the message (text)
    and its parts (dicts, which is what the engine is given); ``fragments``
    and ``system_fragments`` are paths, http(s) URLs, saved fragments' names or
    hashes, or ``Fragment`` texts, read into references that carry their text
    (messages/fragments.py: what the engine is given, and stores once);
    ``timeout`` makes the ``request`` when there is none.

    What the engine reads: ``request`` traces and cancels the turn.
    ``variables`` are set and ``system`` (the session's system prompt, kept
    for later turns) recorded before the user message; ``system_fragments``
    go before it in that prompt, and giving either sets the two anew (None:
    no fragments, or no text of its own). ``fragments`` go before the user
    message's text. ``start_from``
    replaces the stored session (an empty record starts it over, a copy of
    another forks it); ``expected_revision`` is the stored revision it was
    made from (0: the session must not exist yet; None: replace whatever is
    there), checked under the session's lock before the model is called.
    ``messages`` are added before the user message (an empty message adds
    none: a turn may continue after tool results). ``instructions`` stand in
    for the session's system prompt in this turn only. ``options`` are model
    options over the model's configured ones, ``schema`` a JSON Schema the
    reply must follow; ``compress`` False refuses a history that does not fit
    the model's window instead of compressing it. ``client_tools`` are tool
    specs the caller runs itself: when the model calls one, the turn ends
    there (finish reason ``tool_calls``). ``server_tools`` names the server's
    own tools the turn may offer (None: all), ``tools`` are offered in this
    turn only (a client tool of the same name wins over either).
    ``annotations`` are keys stored on the turn's first message, for the
    caller to find the turn again (never sent to the model). ``on_start`` gets
    the history position of the turn's first message and its item number
    (messages/item_numbers.py; the turn's messages follow it), ``on_message`` each
    message the turn adds and its position, ``on_finish`` the messages it
    wrote (before they are saved); ``on_done`` is awaited with the result once
    the turn is saved, in the turn's own task (a streamed turn runs it even
    when nobody reads its events). ``if_busy`` is what the turn does when
    another turn holds its session (here, in another process or on another
    machine): ``wait`` for it (the default), ``reject`` it at once
    (BusyRejectedError, nothing sent), or ``interrupt`` it (that turn stops
    unsaved with TurnInterruptedError, and this one runs).
    """

    session_id: str
    message: str | None = None
    model: str | ModelProvider | None = None
    agent: str | None = None
    timeout: float | None = None
    new: bool = False
    fork_from: str | None = None
    variables: Mapping[str, Any] | None = None
    system: str | None = None
    turns: int | None = None
    upto: int | None = None
    regenerate: bool = False
    attachments: "Sequence[Source | dict[str, Any]]" = ()
    fragments: Sequence[Any] = ()
    system_fragments: Sequence[Any] | None = None
    options: Mapping[str, Any] | None = None
    schema: Mapping[str, Any] | None = None
    compress: bool = True
    compact_above: int | None = None
    request: RequestContext | None = None
    messages: Sequence[dict[str, Any]] = ()
    instructions: str | None = None
    client_tools: Sequence[dict[str, Any]] = ()
    server_tools: frozenset[str] | None = None
    tools: Sequence[Tool] = ()
    annotations: Mapping[str, Any] | None = None
    start_from: SessionRecord | None = None
    expected_revision: int | None = None
    on_start: Callable[[int, int], None] | None = None
    on_message: Callable[[int, dict[str, Any]], None] | None = None
    on_finish: Callable[[list[dict[str, Any]]], None] | None = None
    on_done: "Callable[[TurnResult], Awaitable[None]] | None" = None
    if_busy: str = "wait"

    def check_start(self, session: SessionContext) -> None:
        """Refuse to replace a session that moved since ``start_from`` was made."""
        expected = self.expected_revision
        if expected is None or session.revision == expected:
            return
        if expected == 0:
            raise SessionExistsError(session.session_id)
        raise ConflictError(session.session_id, expected, session.revision)

    def apply_start(self, session: SessionContext) -> bool:
        """Set up ``session`` for the turn; True when it must be saved whole."""
        if self.start_from is not None:
            session.metadata = new_metadata()
            session.apply_record(self.start_from)
        if self.variables:
            session.variables.update(self.variables)
        if self.system is not None or self.system_fragments is not None:
            kept = list(self.system_fragments or ()) or None
            for key, value in (("system_prompt", self.system), ("system_fragments", kept)):
                if value is None:
                    session.metadata.pop(key, None)
                else:
                    session.metadata[key] = value
        return self.start_from is not None


IF_BUSY = ("wait", "reject", "interrupt")
"""The values of ``TurnRequest.if_busy``."""


def check_if_busy(value: str) -> str:
    """``value`` when it is one of IF_BUSY, else a UsageError naming them."""
    if value not in IF_BUSY:
        raise UsageError(
            f"if_busy must be wait, reject or interrupt, not {value!r}", fix="pick one of them"
        )
    return value


def turn_request(
    session_id: "str | TurnRequest", message: str | None, params: Mapping[str, Any]
) -> TurnRequest:
    """The turn a method was called with: a TurnRequest as it is, or one made of
    the session, the message and the keywords."""
    if not isinstance(session_id, TurnRequest):
        return TurnRequest(session_id, message, **params)
    if message is not None or params:
        raise TypeError("a TurnRequest is the whole turn: pass no message or options with it")
    return session_id


if TYPE_CHECKING:
    # For type checkers only (``**params: Unpack[TurnParams]``): a TypedDict
    # costs start-up time. tests/test_turn_request.py keeps it TurnRequest's twin.
    class TurnParams(TypedDict, total=False):
        """``TurnRequest``'s fields after the session and the message, as keywords
        (``chat("s1", "hi", model="echo")``); see ``TurnRequest``."""

        model: str | ModelProvider | None
        agent: str | None
        timeout: float | None
        new: bool
        fork_from: str | None
        variables: Mapping[str, Any] | None
        system: str | None
        turns: int | None
        upto: int | None
        regenerate: bool
        attachments: Sequence[Source | dict[str, Any]]
        fragments: Sequence[Any]
        system_fragments: Sequence[Any] | None
        options: Mapping[str, Any] | None
        schema: Mapping[str, Any] | None
        compress: bool
        compact_above: int | None
        request: RequestContext | None
        messages: Sequence[dict[str, Any]]
        instructions: str | None
        client_tools: Sequence[dict[str, Any]]
        server_tools: frozenset[str] | None
        tools: Sequence[Tool]
        annotations: Mapping[str, Any] | None
        start_from: SessionRecord | None
        expected_revision: int | None
        on_start: Callable[[int, int], None] | None
        on_message: Callable[[int, dict[str, Any]], None] | None
        on_finish: Callable[[list[dict[str, Any]]], None] | None
        on_done: Callable[[TurnResult], Awaitable[None]] | None
        if_busy: str
