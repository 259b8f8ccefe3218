"""What a turn is given and what it returns: TurnSetup (changes made inside
the turn), TurnOptions (what it asks of the model) and TurnResult."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from foliko_cli.context import SessionContext
from foliko_cli.engine.tools import Tool
from foliko_cli.errors import ConflictError, SessionExistsError
from foliko_cli.messages.record import SessionRecord, new_metadata


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

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


class TurnSetup(NamedTuple):
    """Changes made inside the turn, before the user message, saved with it.

    ``start_from`` replaces the stored session (an empty record starts it over,
    a copy of another session forks it); ``expected_revision`` is the stored
    revision it was derived from (0: the session must not exist yet; None:
    replace whatever is there), checked under the session's lock before the
    model is called. ``system_prompt`` is kept in the session's metadata for
    later turns. ``messages`` are added before the user message (an empty
    user message adds none: a turn may continue after tool results).
    ``instructions`` stand in for the session's own system prompt in this
    turn only (they are not kept). ``client_tools`` are tool specs the caller
    runs itself: when the model calls one, the turn ends there (finish reason
    ``tool_calls``). ``on_start`` gets the history position of the turn's
    first message, ``on_message`` each message the turn adds and its
    position, as it is added, ``on_finish`` the messages it wrote (before
    they are saved), ``on_done`` is awaited with the TurnResult once the turn
    is saved (in the turn's own task: a streamed turn runs it even when
    nobody reads its events). ``attachments`` are the user message's parts (see
    ``foliko_cli.messages.attachments``; text ones are already in the message).
    ``server_tools`` names the server's own tools the turn may offer (None:
    all of them); a client tool of the same name as a server tool wins.
    ``annotations`` are keys stored on the turn's first message, for the
    caller to find with the turn again (never sent to the model).
    ``trash`` is the reason (``storage.trash.REASONS``) under which a stored
    session that ``start_from`` replaces is first copied to the trash; None:
    it is not kept. ``tools`` are offered in this turn only, besides the
    server's own (over one of the same name).
    """

    start_from: SessionRecord | None = None
    variables: Mapping[str, Any] = MappingProxyType({})
    system_prompt: str | None = None
    expected_revision: int | None = None
    messages: tuple[dict[str, Any], ...] = ()
    instructions: str | None = None
    client_tools: tuple[dict[str, Any], ...] = ()
    on_start: Callable[[int], None] | None = None
    on_message: Callable[[int, dict[str, Any]], None] | None = None
    on_finish: Callable[[list[dict[str, Any]]], None] | None = None
    on_done: Callable[[TurnResult], Awaitable[None]] | None = None
    attachments: tuple[dict[str, Any], ...] = ()
    server_tools: frozenset[str] | None = None
    annotations: Mapping[str, Any] = MappingProxyType({})
    trash: str | None = None
    tools: tuple[Tool, ...] = ()

    def check(self, session: SessionContext) -> None:
        """Refuse to replace a session that moved since ``start_from`` was made."""
        expected = self.expected_revision
        if expected is None or session.revision == expected:
            return
        if expected == 0:
            raise SessionExistsError(session.session_id)
        raise ConflictError(session.session_id, expected, session.revision)

    def apply(self, session: SessionContext) -> bool:
        """Change ``session``; return True when it must be saved whole."""
        if self.start_from is not None:
            session.metadata = new_metadata()
            session.apply_record(self.start_from)
        session.variables.update(self.variables)
        if self.system_prompt is not None:
            session.metadata["system_prompt"] = self.system_prompt
        return self.start_from is not None


class TurnOptions(NamedTuple):
    """What one turn asks of the model beyond the messages: sampling ``options``
    (over the model's configured ones), a JSON ``schema`` for the reply, and
    whether the history may be ``compress``-ed to fit the window (without,
    a history that does not fit is a ContextOverflowError)."""

    options: Mapping[str, Any] = MappingProxyType({})
    schema: Mapping[str, Any] | None = None
    compress: bool = True
