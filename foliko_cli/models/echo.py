"""An offline, deterministic model for tests, demos and scripting.

It answers with the last user message verbatim (with its fragments' texts). A
user message ``/tool NAME {json-args}`` makes it call tool NAME with those
arguments (never one with fragments: their text was not typed); once the
tool results are in, it answers with them.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from foliko_cli.common.clock import new_tool_call_id
from foliko_cli.messages.tokens import estimate_tokens
from foliko_cli.models.base import ModelProvider, ModelRequest, ModelResponse, ToolCall

_TOOL_COMMAND = re.compile(r"/tool\s+(?P<name>[A-Za-z0-9_.-]+)\s*(?P<args>.*)\Z", re.DOTALL)


def _parse_arguments(raw: str) -> Any:
    raw = raw.strip()
    if not raw:
        return {}
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw


class EchoModel(ModelProvider):
    name = "echo"
    context_window = 8192
    offline = True

    def __init__(self, context_window: int = 8192):
        self.context_window = context_window

    async def generate(self, request: ModelRequest) -> ModelResponse:
        messages = request.messages
        last = messages[-1] if messages else {"role": "user", "content": ""}
        if last["role"] == "tool":
            text = self._report_tool_results(messages)
            calls: list[ToolCall] = []
        elif last.get("fragments"):  # a fragment's text is no command the user typed
            text, calls = str(last.get("content", "")), []
        else:
            text, calls = self._answer(str(last.get("content", "")))
        prompt = sum(estimate_tokens(str(m.get("content", ""))) for m in messages)
        if request.system:
            prompt += estimate_tokens(request.system)
        return ModelResponse(
            text=text,
            tool_calls=calls,
            usage={"input_tokens": prompt, "output_tokens": estimate_tokens(text)},
            finish_reason="tool_calls" if calls else "stop",
        )

    @staticmethod
    def _answer(content: str) -> tuple[str, list[ToolCall]]:
        command = _TOOL_COMMAND.match(content.strip())
        if command is None:
            return content, []
        arguments = _parse_arguments(command["args"])
        call = ToolCall(new_tool_call_id(), command["name"], arguments, typed=True)
        return "", [call]

    @staticmethod
    def _report_tool_results(messages: list[dict[str, Any]]) -> str:
        results = []
        for message in reversed(messages):
            if message["role"] != "tool":
                break
            results.append(f"{message.get('name', 'tool')} returned: {message['content']}")
        return "\n".join(reversed(results))


def build(spec: Any, key: str | None = None, transport: Any = None) -> EchoModel:
    """The ``echo`` entry point."""
    model = EchoModel(spec.context_window)
    model.window_configured = spec.window_configured
    model.price = dict(spec.price)
    return model
