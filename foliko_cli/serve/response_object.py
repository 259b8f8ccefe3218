"""The Response object, every field present as the API reference defines it.

Fields foliko has no use for carry the value OpenAI sends when they are
unused (``service_tier: "default"``, ``reasoning: {effort: null, summary:
null}``, ``top_logprobs: 0``, ...), so clients that validate the object,
or read a field without checking for it, work.
"""

from __future__ import annotations

import time
from typing import Any

from msgspec import to_builtins

from foliko_cli.serve import items as it
from foliko_cli.serve.openai_types import (
    ConversationRef,
    Failure,
    Incomplete,
    OutputItem,
    Response,
    ResponseCreate,
    TextConfig,
    TextFormat,
    Tool,
)

DEFAULT_FORMAT = {"type": "text"}


def _tool_echo(tool: Tool) -> dict[str, Any]:
    if tool.type == "namespace":
        members = [_tool_echo(member) for member in tool.tools or ()]
        return {
            "type": "namespace",
            "name": tool.name,
            "description": tool.description or "",
            "tools": members,
        }
    function = tool.function or tool
    return {
        "type": "function",
        "name": function.name,
        "description": function.description,
        "parameters": function.parameters,
        "strict": True if function.strict is None else function.strict,
    }


def echoed_options(body: ResponseCreate, text_format: TextFormat | None) -> dict[str, Any]:
    """What a request asked for that its response repeats (plain JSON values)."""
    return {
        "format": to_builtins(text_format) if text_format is not None else None,
        "instructions": body.instructions,
        "previous_response_id": body.previous_response_id,
        "metadata": body.metadata,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "max_output_tokens": body.max_output_tokens,
        "max_tool_calls": body.max_tool_calls,
        "tools": [
            _tool_echo(tool) for tool in body.tools or () if tool.type in ("function", "namespace")
        ],
        "tool_choice": to_builtins(body.tool_choice),
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "store": body.store,
        "truncation": body.truncation or "auto",
        "user": body.user,
        "safety_identifier": body.safety_identifier,
        "prompt_cache_key": body.prompt_cache_key,
        "background": body.background,
    }


_NOT_KEPT = ("store", "not_hosted", "background")


def kept_options(options: dict[str, Any]) -> dict[str, Any]:
    """What of a request's options is stored with its turn, for GET to echo."""
    return {
        key: value
        for key, value in options.items()
        if key not in _NOT_KEPT and value not in (None, [], {}, True, "auto")
    }


def response_object(
    *,
    response_id: str,
    session_id: str | None,
    output: list[OutputItem],
    outputs: list[dict[str, Any]],
    model: str | None,
    status: str | None = None,
    options: dict[str, Any] | None = None,
    created_at: int | None = None,
    completed_at: int | None = None,
    error: dict[str, Any] | None = None,
) -> Response:
    """The object for a response whose model wrote ``outputs`` (shown as ``output``).

    Without ``status`` it is ``incomplete`` when the model was cut short, else
    ``completed``."""
    options = options or {}
    reason = it.incomplete_reason(outputs)
    if status is None:
        status = "incomplete" if reason else "completed"
    now = int(time.time())
    finished = status in ("completed", "incomplete")
    if model is None:
        model = next((m.get("model") for m in reversed(outputs) if m.get("model")), "echo")
    temperature, top_p = options.get("temperature"), options.get("top_p")
    return Response(
        id=response_id,
        created_at=now if created_at is None else created_at,
        status=status,  # type: ignore[arg-type]
        background=options.get("background", False),
        completed_at=(completed_at or now) if finished else None,
        conversation=ConversationRef(session_id) if session_id else None,
        error=Failure(**error) if error else None,
        incomplete_details=Incomplete(reason=reason or "") if status == "incomplete" else None,
        instructions=options.get("instructions"),
        max_output_tokens=options.get("max_output_tokens"),
        max_tool_calls=options.get("max_tool_calls"),
        metadata=options.get("metadata") or {},
        model=model,
        output=output,
        parallel_tool_calls=options.get("parallel_tool_calls", True),
        previous_response_id=options.get("previous_response_id"),
        prompt_cache_key=options.get("prompt_cache_key"),
        safety_identifier=options.get("safety_identifier"),
        store=options.get("store", True),
        temperature=1.0 if temperature is None else float(temperature),
        text=TextConfig(format=options.get("format") or DEFAULT_FORMAT),
        tool_choice=options.get("tool_choice") or "auto",
        tools=options.get("tools") or [],
        top_p=1.0 if top_p is None else float(top_p),
        truncation=options.get("truncation", "auto"),
        usage=it.turn_usage(outputs) if finished else None,
        user=options.get("user"),
    )
