"""The synchronous facade the CLI (and scripts) use.

Each call creates a RequestContext, loads the session from the configured
backend, does its work and saves; the asyncio core runs on one event loop
that lives as long as the facade.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from foliko_cli.chat import DEFAULT_MAX_STEPS, AgentChatHandler, TurnResult
from foliko_cli.context.request import DEFAULT_TIMEOUT
from foliko_cli.errors import SessionNotFoundError, UsageError
from foliko_cli.framework import Framework
from foliko_cli.models import announce_default_model, resolve_model
from foliko_cli.models.base import ModelProvider
from foliko_cli.storage.record import SessionRecord, SessionSummary, check_session_id

T = TypeVar("T")

MAX_MESSAGE_CHARS = 16 * 1024 * 1024


def check_message_text(message: str) -> str:
    if not message.strip():
        raise UsageError("the message is empty; pass MESSAGE or pipe text on stdin")
    if len(message) > MAX_MESSAGE_CHARS:
        raise UsageError(
            f"the message is {len(message):,} characters, over the limit of "
            f"{MAX_MESSAGE_CHARS:,}; shorten it"
        )
    return message


class Foliko:
    def __init__(
        self,
        storage: Any = None,
        model: str | ModelProvider | None = None,
        *,
        home: Path | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_steps: int = DEFAULT_MAX_STEPS,
    ):
        if home is None:
            from foliko_cli.config import foliko_home

            home = foliko_home()
        self.home = home
        self.framework = Framework(storage if storage is not None else "sqlite", home=home)
        self.model = model
        self.timeout = timeout
        self.max_steps = max_steps
        self._runner = asyncio.Runner()
        self._handlers: dict[str, AgentChatHandler] = {}

    def __enter__(self) -> Foliko:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._run(self.framework.session_storage.close())
        self._runner.close()

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self._runner.run(coroutine)

    def handler(self, model: str | ModelProvider | None = None) -> AgentChatHandler:
        chosen = model if model is not None else self.model
        key = chosen if isinstance(chosen, str) else repr(chosen)
        handler = self._handlers.get(key)
        if handler is None:
            if chosen is None:
                announce_default_model()
            handler = AgentChatHandler(
                self.framework, resolve_model(chosen), max_steps=self.max_steps
            )
            self._handlers[key] = handler
        return handler

    def chat(
        self,
        session_id: str,
        message: str,
        *,
        model: str | ModelProvider | None = None,
        timeout: float | None = None,
    ) -> TurnResult:
        check_session_id(session_id)
        check_message_text(message)
        handler = self.handler(model)
        manager = self.framework.context_manager
        request = manager.create_request_context(timeout=timeout or self.timeout)
        try:
            return self._run(handler.chat(message, session_id=session_id, request=request))
        finally:
            manager.release_request_context(request.request_id)

    def get_session(self, session_id: str) -> SessionRecord:
        check_session_id(session_id)
        record = self._run(self.framework.session_storage.load(session_id))
        if record is None:
            raise SessionNotFoundError(session_id)
        return record

    def list_sessions(self) -> list[SessionSummary]:
        return self._run(self.framework.session_storage.list_summaries())
