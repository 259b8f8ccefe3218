"""The MCP server: the tools, resources and prompts of this package in the
SDK's low-level ``Server``, for any transport.

A ``Backend`` gives each request its service and runs the ``chat`` tool's
turn. Whatever goes wrong in a tool call (an unknown session, a bad
argument, a failed turn) is the call's error result, one line; only an
unknown tool, resource or prompt is a protocol error, as the MCP
specification has it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

from foliko_cli import __version__
from foliko_cli.errors import CorruptSessionError, FolikoError, Hint
from foliko_cli.mcp_server.arguments import Arguments, ToolFailure
from foliko_cli.mcp_server.prompts import PromptError, agent_prompt, agent_prompts
from foliko_cli.mcp_server.resources import (
    MIME_TYPE,
    TEMPLATE,
    resource_page,
    session_id_of,
)
from foliko_cli.mcp_server.tools import TOOLS, Call, ToolSpec
from foliko_cli.service.audit import touching

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from mcp.server.context import ServerRequestContext

    from foliko_cli.service import AsyncFoliko
    from foliko_cli.service.audit import AuditRecorder
    from foliko_cli.service.values import TurnResult

    Context = ServerRequestContext[Any]

NAME = "foliko"
INSTRUCTIONS = (
    "foliko keeps conversations with language models in named sessions. "
    "list_sessions and search_sessions find them, read_session gives one as Markdown "
    "(also the resource foliko://sessions/{session_id}); chat, when this server may change "
    "sessions, continues one or starts it. "
    "Each prompt is the instructions of one of foliko's agents."
)

_log = logging.getLogger("foliko.mcp_server")


class Backend(Protocol):
    def service(self, request: Any) -> AbstractAsyncContextManager[AsyncFoliko]:
        """The service that answers ``request`` (the HTTP request, or None on stdio),
        held to the client's scope (``AsyncFoliko(scope=...)``)."""
        ...

    async def turn(
        self, request: Any, service: AsyncFoliko, session_id: str, message: str, if_busy: str
    ) -> TurnResult:
        """One turn of the ``chat`` tool (``if_busy``: TurnRequest's)."""
        ...

    def audit(self, request: Any) -> tuple[AuditRecorder, str | None]:
        """Where calls are recorded, and the client as the transport knows it (an
        API key's name); None: the host's own name (its ``clientInfo``) is used."""
        ...


def _writes(service: AsyncFoliko) -> bool:
    return service.scope is None or service.scope.write


def _offered(service: AsyncFoliko) -> dict[str, ToolSpec]:
    """The tools for this service's scope: those that write only when it may write."""
    writes = _writes(service)
    return {name: spec for name, spec in TOOLS.items() if writes or not spec.writes}


def failure_text(exc: BaseException) -> str:
    """What went wrong, in one line, the fix in the words of this server."""
    if isinstance(exc, FolikoError) and exc.hint == Hint.SESSIONS:
        text = f"{exc.problem}; call list_sessions to see the sessions that exist"
    else:
        text = str(exc)
    return " ".join(text.split())


def _error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _tool(spec: ToolSpec) -> types.Tool:
    return types.Tool(
        name=spec.name,
        title=spec.title,
        description=spec.description,
        input_schema=spec.input_schema,
        output_schema=spec.output,
        annotations=types.ToolAnnotations(title=spec.title, **spec.hints),
    )


def _audited(backend: Backend, handler: Callable[[Any, Any], Awaitable[Any]]) -> Any:
    """The handler, each call recorded in the audit log: the client, the
    method (and tool), the sessions it read or wrote, the result's SHA-256."""

    async def recorded(ctx: Any, params: Any) -> Any:
        recorder, client = backend.audit(ctx.request)
        if client is None:
            given = ctx.session.client_params
            client = "mcp:" + (given.client_info.name if given is not None else "unknown")
        call = ctx.method
        if isinstance(params, types.CallToolRequestParams | types.GetPromptRequestParams):
            call = f"{call} {params.name}"
        elif isinstance(params, types.ReadResourceRequestParams):
            call = f"{call} {params.uri}"
        with touching() as session_ids:
            try:
                result = await handler(ctx, params)
            except MCPError as exc:
                recorder.record(client, call, session_ids, str(exc), "error")
                raise
        outcome = "error" if getattr(result, "is_error", False) else "ok"
        recorder.record(client, call, session_ids, result.model_dump_json(), outcome)
        return result

    return recorded


class _Handlers:
    """The server's answer to each request, from the backend's service."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    async def list_tools(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        async with self.backend.service(ctx.request) as service:
            offered = _offered(service)
        return types.ListToolsResult(tools=[_tool(spec) for spec in offered.values()])

    async def call_tool(
        self, ctx: Context, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        async with self.backend.service(ctx.request) as service:
            offered = _offered(service)
        spec = offered.get(params.name)
        if spec is None:
            raise MCPError(
                INVALID_PARAMS, f"unknown tool {params.name!r}; the tools are {', '.join(offered)}"
            )
        try:
            arguments = Arguments(params.arguments, spec.properties)
            async with self.backend.service(ctx.request) as service:

                def turn(session_id: str, message: str, if_busy: str) -> Awaitable[TurnResult]:
                    return self.backend.turn(ctx.request, service, session_id, message, if_busy)

                reply = await spec.run(Call(service, arguments, turn))
        except (ToolFailure, FolikoError) as exc:
            return _error_result(failure_text(exc))
        except Exception as exc:
            _log.error("the MCP tool %s failed: %r", spec.name, exc)
            return _error_result(f"{spec.name} failed: internal error")
        content: list[types.ContentBlock] = [types.TextContent(type="text", text=reply.text)]
        return types.CallToolResult(content=content, structured_content=reply.data)

    async def list_resources(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        cursor = params.cursor if params is not None else None
        async with self.backend.service(ctx.request) as service:
            entries, next_cursor = await resource_page(service, cursor)
        return types.ListResourcesResult(
            resources=[types.Resource.model_validate(entry) for entry in entries],
            next_cursor=next_cursor,
        )

    async def list_templates(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        template = types.ResourceTemplate(
            uri_template=TEMPLATE,
            name="session",
            title="A session",
            description="A session's transcript as Markdown",
            mime_type=MIME_TYPE,
        )
        return types.ListResourceTemplatesResult(resource_templates=[template])

    async def read_resource(
        self, ctx: Context, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        session_id = session_id_of(uri)
        if session_id is None:
            raise MCPError(
                INVALID_PARAMS, f"unknown resource {uri!r}; write {TEMPLATE}", {"uri": uri}
            )
        try:
            async with self.backend.service(ctx.request) as service:
                text = await service.transcript(session_id)
        except CorruptSessionError as exc:
            raise MCPError(INTERNAL_ERROR, failure_text(exc), {"uri": uri}) from None
        except FolikoError as exc:
            raise MCPError(INVALID_PARAMS, failure_text(exc), {"uri": uri}) from None
        contents: list[types.TextResourceContents | types.BlobResourceContents] = [
            types.TextResourceContents(uri=uri, mime_type=MIME_TYPE, text=text)
        ]
        return types.ReadResourceResult(contents=contents)

    async def list_prompts(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        async with self.backend.service(ctx.request) as service:
            try:
                listed = agent_prompts(service)
            except FolikoError as exc:
                raise MCPError(INTERNAL_ERROR, failure_text(exc)) from None
        prompts = [types.Prompt.model_validate(entry) for entry in listed]
        return types.ListPromptsResult(prompts=prompts)

    async def get_prompt(
        self, ctx: Context, params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        async with self.backend.service(ctx.request) as service:
            try:
                description, texts = agent_prompt(service, params.name, params.arguments)
            except PromptError as exc:
                raise MCPError(INVALID_PARAMS, str(exc)) from None
        messages = [
            types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))
            for text in texts
        ]
        return types.GetPromptResult(description=description, messages=messages)


def build_server(backend: Backend) -> Server:
    handlers = _Handlers(backend)
    return Server(
        NAME,
        version=__version__,
        title="foliko sessions",
        instructions=INSTRUCTIONS,
        on_list_tools=_audited(backend, handlers.list_tools),
        on_call_tool=_audited(backend, handlers.call_tool),
        on_list_resources=_audited(backend, handlers.list_resources),
        on_list_resource_templates=_audited(backend, handlers.list_templates),
        on_read_resource=_audited(backend, handlers.read_resource),
        on_list_prompts=_audited(backend, handlers.list_prompts),
        on_get_prompt=_audited(backend, handlers.get_prompt),
    )
