"""``TurnRequest``: everything one turn is asked to do, as one value.

``chat``, ``chat_stream``, ``dry_run`` and ``count_tokens`` take it (or its
fields as keywords: ``TurnParams``), so the CLI, the server and a script
build a turn the same way, and can pass it on, change a field of it
(``_replace``) or run it again. Name the fields after the message: their
order is not part of the contract.
"""

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

# Evaluated annotations, not strings: typing.NamedTuple compiles every string
# annotation, which costs start-up time (P1). These modules are loaded by then.
from foliko_cli.context.request import RequestContext
from foliko_cli.engine.tools import Tool
from foliko_cli.messages.record import SessionRecord
from foliko_cli.models.base import ModelProvider

if TYPE_CHECKING:
    from typing import TypedDict

    from foliko_cli.engine.turn import TurnResult
    from foliko_cli.messages.attachments import Source


class TurnRequest(NamedTuple):
    """One turn in ``session_id`` with ``message`` (None: regenerate's own).

    ``new`` starts the session over (the old one goes to the trash), ``fork_from``
    copies another first (its first ``turns`` turns, or ``upto`` messages);
    ``regenerate`` replaces the last turn by a new answer to its user message
    (or to ``message``: that message edited). ``attachments`` are paths,
    http(s) URLs or ``Attachment`` bytes. ``options`` are model options over
    the model's configured ones, ``schema`` a JSON Schema the reply must
    follow; ``compress`` False refuses a history that does not fit the
    model's window instead of compressing it. ``request`` traces and cancels
    the turn (made with ``timeout`` when absent). The fields from ``messages``
    on are passed to the engine as they are (see ``TurnSetup``).
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
    attachments: "Sequence[Source]" = ()
    options: Mapping[str, Any] | None = None
    schema: Mapping[str, Any] | None = None
    compress: bool = True
    request: RequestContext | None = None
    messages: Sequence[dict[str, Any]] = ()
    instructions: str | None = None
    client_tools: Sequence[dict[str, Any]] = ()
    server_tools: frozenset[str] | None = None
    tools: Sequence[Tool] = ()
    annotations: Mapping[str, Any] | None = None
    start_from: SessionRecord | None = None
    expected_revision: int | None = None
    on_start: Callable[[int], None] | None = None
    on_message: Callable[[int, dict[str, Any]], None] | None = None
    on_finish: Callable[[list[dict[str, Any]]], None] | None = None
    on_done: "Callable[[TurnResult], Awaitable[None]] | None" = None


def turn_request(
    session_id: str | TurnRequest, message: str | None, params: Mapping[str, Any]
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
        attachments: Sequence[Source]
        options: Mapping[str, Any] | None
        schema: Mapping[str, Any] | None
        compress: bool
        request: RequestContext | None
        messages: Sequence[dict[str, Any]]
        instructions: str | None
        client_tools: Sequence[dict[str, Any]]
        server_tools: frozenset[str] | None
        tools: Sequence[Tool]
        annotations: Mapping[str, Any] | None
        start_from: SessionRecord | None
        expected_revision: int | None
        on_start: Callable[[int], None] | None
        on_message: Callable[[int, dict[str, Any]], None] | None
        on_finish: Callable[[list[dict[str, Any]]], None] | None
        on_done: Callable[[TurnResult], Awaitable[None]] | None
