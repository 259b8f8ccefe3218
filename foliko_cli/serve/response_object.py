"""The Response object, every field present as the API reference defines it.

Fields foliko has no use for carry the value OpenAI sends when they are
unused (``service_tier: "default"``, ``reasoning: {effort: null, summary:
null}``, ``top_logprobs: 0``, ...), so clients that validate the object,
or read a field without checking for it, work.
"""

from __future__ import annotations

import time
from typing import Any

from foliko_cli.serve import items as it
from foliko_cli.serve.common import field

DEFAULT_FORMAT = {"type": "text"}


def _tool_echo(tool: Any) -> Any:
    if tool.get("type") != "function":
        return tool
    return {
        "type": "function",
        "name": tool.get("name"),
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
        "strict": tool.get("strict", True),
    }


def echoed_options(data: dict[str, Any], text_format: dict[str, Any] | None) -> dict[str, Any]:
    """What a request asked for that its response repeats."""
    tools = field(data, "tools", list) or []
    return {
        "format": text_format,
        "instructions": field(data, "instructions", str),
        "previous_response_id": field(data, "previous_response_id", str),
        "metadata": field(data, "metadata", dict),
        "temperature": field(data, "temperature", (int, float)),
        "top_p": field(data, "top_p", (int, float)),
        "max_output_tokens": field(data, "max_output_tokens", int),
        "max_tool_calls": field(data, "max_tool_calls", int),
        "tools": [
            _tool_echo(tool) for tool in tools if tool.get("type") in ("function", "namespace")
        ],
        "tool_choice": data.get("tool_choice"),
        "parallel_tool_calls": field(data, "parallel_tool_calls", bool, True),
        "store": field(data, "store", bool, True),
        "truncation": data.get("truncation") or "auto",
        "user": field(data, "user", str),
        "safety_identifier": field(data, "safety_identifier", str),
        "prompt_cache_key": field(data, "prompt_cache_key", str),
        "background": field(data, "background", bool, False),
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
    output: list[dict[str, Any]],
    outputs: list[dict[str, Any]],
    model: str | None,
    status: str | None = None,
    options: dict[str, Any] | None = None,
    created_at: int | None = None,
    completed_at: int | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
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
    return {
        "id": response_id,
        "object": "response",
        "created_at": now if created_at is None else created_at,
        "status": status,
        "background": options.get("background", False),
        "completed_at": (completed_at or now) if finished else None,
        "conversation": {"id": session_id} if session_id else None,
        "error": error,
        "incomplete_details": {"reason": reason} if status == "incomplete" else None,
        "instructions": options.get("instructions"),
        "max_output_tokens": options.get("max_output_tokens"),
        "max_tool_calls": options.get("max_tool_calls"),
        "metadata": options.get("metadata") or {},
        "model": model,
        "output": output,
        "parallel_tool_calls": options.get("parallel_tool_calls", True),
        "previous_response_id": options.get("previous_response_id"),
        "prompt": None,
        "prompt_cache_key": options.get("prompt_cache_key"),
        "reasoning": {"effort": None, "summary": None},
        "safety_identifier": options.get("safety_identifier"),
        "service_tier": "default",
        "store": options.get("store", True),
        "temperature": 1.0 if options.get("temperature") is None else float(options["temperature"]),
        "text": {"format": options.get("format") or DEFAULT_FORMAT, "verbosity": "medium"},
        "tool_choice": options.get("tool_choice") or "auto",
        "tools": options.get("tools") or [],
        "top_logprobs": 0,
        "top_p": 1.0 if options.get("top_p") is None else float(options["top_p"]),
        "truncation": options.get("truncation", "auto"),
        "usage": it.turn_usage(outputs) if finished else None,
        "user": options.get("user"),
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
    }
