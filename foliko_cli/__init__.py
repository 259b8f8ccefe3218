"""foliko: language-model conversations in named, persistent sessions.

The public names below load on first use (PEP 562), so ``import foliko_cli``
costs almost nothing::

    from foliko_cli import Foliko, AsyncFoliko

    with Foliko(storage="memory", model="echo") as foliko:
        print(foliko.chat("s1", "hi").message)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Foliko": "foliko_cli.service.facade",
    "AsyncFoliko": "foliko_cli.service",
    "ImportReport": "foliko_cli.service",
    "Framework": "foliko_cli.engine.framework",
    "AgentChatHandler": "foliko_cli.engine.handler",
    "TurnResult": "foliko_cli.engine.turn",
    "TurnRequest": "foliko_cli.engine.turn",
    "TurnStream": "foliko_cli.engine.stream",
    "RequestContext": "foliko_cli.context.request",
    "SessionContext": "foliko_cli.context.session",
    "AgentContext": "foliko_cli.context.agent",
    "ContextManager": "foliko_cli.context.manager",
    "Tool": "foliko_cli.engine.tools",
    "ToolContext": "foliko_cli.engine.tools",
    "ToolOutput": "foliko_cli.engine.tools",
    "ToolResult": "foliko_cli.engine.tools",
    "ModelProvider": "foliko_cli.models.base",
    "ModelRequest": "foliko_cli.models.base",
    "ModelResponse": "foliko_cli.models.base",
    "SessionStorageAdapter": "foliko_cli.storage.base",
    "StoredProblem": "foliko_cli.storage.base",
    "ProblemKind": "foliko_cli.storage.base",
    "ConflictError": "foliko_cli.errors",
    "SessionExistsError": "foliko_cli.errors",
    "open_storage": "foliko_cli.storage",
    "SessionRecord": "foliko_cli.messages.record",
    "SessionState": "foliko_cli.messages.record",
    "SessionSummary": "foliko_cli.messages.record",
    "ExitCode": "foliko_cli.errors",
    "FolikoError": "foliko_cli.errors",
    "UsageError": "foliko_cli.errors",
    "SessionNotFoundError": "foliko_cli.errors",
    "SessionBusyError": "foliko_cli.errors",
    "StorageError": "foliko_cli.errors",
    "StorageConfigError": "foliko_cli.errors",
    "CorruptSessionError": "foliko_cli.errors",
    "ModelError": "foliko_cli.errors",
    "TurnTimeoutError": "foliko_cli.errors",
    "ToolError": "foliko_cli.errors",
    "Interrupted": "foliko_cli.errors",
}

__all__ = [
    "AgentChatHandler",
    "AgentContext",
    "AsyncFoliko",
    "ConflictError",
    "ContextManager",
    "CorruptSessionError",
    "ExitCode",
    "Foliko",
    "FolikoError",
    "Framework",
    "ImportReport",
    "Interrupted",
    "ModelError",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "ProblemKind",
    "RequestContext",
    "SessionBusyError",
    "SessionContext",
    "SessionExistsError",
    "SessionNotFoundError",
    "SessionRecord",
    "SessionState",
    "SessionStorageAdapter",
    "SessionSummary",
    "StorageConfigError",
    "StorageError",
    "StoredProblem",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolOutput",
    "ToolResult",
    "TurnRequest",
    "TurnResult",
    "TurnStream",
    "TurnTimeoutError",
    "UsageError",
    "__version__",
    "open_storage",
]

if TYPE_CHECKING:
    from foliko_cli.context.agent import AgentContext
    from foliko_cli.context.manager import ContextManager
    from foliko_cli.context.request import RequestContext
    from foliko_cli.context.session import SessionContext
    from foliko_cli.engine.framework import Framework
    from foliko_cli.engine.handler import AgentChatHandler
    from foliko_cli.engine.stream import TurnStream
    from foliko_cli.engine.tools import Tool, ToolContext, ToolOutput, ToolResult
    from foliko_cli.engine.turn import TurnRequest, TurnResult
    from foliko_cli.errors import (
        ConflictError,
        CorruptSessionError,
        ExitCode,
        FolikoError,
        Interrupted,
        ModelError,
        SessionBusyError,
        SessionExistsError,
        SessionNotFoundError,
        StorageConfigError,
        StorageError,
        ToolError,
        TurnTimeoutError,
        UsageError,
    )
    from foliko_cli.messages.record import SessionRecord, SessionState, SessionSummary
    from foliko_cli.models.base import ModelProvider, ModelRequest, ModelResponse
    from foliko_cli.service import AsyncFoliko, ImportReport
    from foliko_cli.service.facade import Foliko
    from foliko_cli.storage import open_storage
    from foliko_cli.storage.base import ProblemKind, SessionStorageAdapter, StoredProblem


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'foliko_cli' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
