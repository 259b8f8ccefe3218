"""Anthropic Messages API: tool_use / tool_result mapped to canonical messages."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from foliko_cli.errors import ModelError
from foliko_cli.messages.attachments import image_data, images, unavailable
from foliko_cli.models.base import (
    ModelProvider,
    ModelRequest,
    ModelResponse,
    StreamEvent,
    ToolCall,
    forced_tool,
)
from foliko_cli.models.openai import parse_arguments

if TYPE_CHECKING:
    from foliko_cli.models.http import HttpModelClient

API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096


def to_anthropic_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Canonical messages as Anthropic content blocks; same-role neighbours merge.

    Tool results travel in a user message, which is why a run of tool messages
    and the user message after it become one message.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        role, blocks = _blocks(message)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def _blocks(message: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """The role a message travels in, and its content blocks."""
    if message["role"] == "assistant":
        text = [{"type": "text", "text": message["content"]}] if message["content"] else []
        return "assistant", text + [_tool_use(call) for call in message.get("tool_calls") or []]
    if message["role"] == "tool":
        return "user", [_tool_result(message)]
    blocks = _image_blocks(message)
    if message["content"] or not blocks:
        blocks.append({"type": "text", "text": message["content"]})
    return "user", blocks


def _tool_use(call: dict[str, Any]) -> dict[str, Any]:
    arguments = call["arguments"]
    return {
        "type": "tool_use",
        "id": call["id"],
        "name": call["name"],
        "input": arguments if isinstance(arguments, dict) else {},
    }


def _tool_result(message: dict[str, Any]) -> dict[str, Any]:
    pictures = _image_blocks(message)
    content = message["content"]
    block = {
        "type": "tool_result",
        "tool_use_id": message["tool_call_id"],
        "content": [{"type": "text", "text": content}, *pictures] if pictures else content,
    }
    if message.get("is_error"):
        block["is_error"] = True
    return block


def _image_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A message's images as Anthropic image blocks (in a user message they go
    before the text; in a tool result, after it)."""
    blocks: list[dict[str, Any]] = []
    for image in images(message):
        data = image_data(image)
        if data is None:
            blocks.append({"type": "text", "text": unavailable(image)})
        else:
            source = {"type": "base64", "media_type": image["media_type"], "data": data}
            blocks.append({"type": "image", "source": source})
    return blocks


def _usage(data: dict[str, Any] | None) -> dict[str, int]:
    if not data:
        return {}
    usage: dict[str, int] = {
        key: int(data[key]) for key in ("input_tokens", "output_tokens") if key in data
    }
    if data.get("cache_read_input_tokens"):
        usage["cached_tokens"] = int(data["cache_read_input_tokens"])
    return usage


REPLY_TOOL = "reply"
_RENAMED_OPTIONS = {"stop": "stop_sequences"}


def _tool_choice(choice: str) -> dict[str, Any]:
    name = forced_tool(choice)
    if name is not None:
        return {"type": "tool", "name": name}
    return {"type": {"auto": "auto", "none": "none", "required": "any"}[choice]}


def schema_tool(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Structured output as a tool the model is made to call; its input is the reply.

    A tool's input must be an object: any other schema is wrapped in ``value``.
    """
    input_schema = dict(schema)
    if input_schema.get("type") != "object":
        input_schema = {
            "type": "object",
            "properties": {"value": input_schema},
            "required": ["value"],
        }
    return {
        "name": REPLY_TOOL,
        "description": "Give your reply through this tool, following its schema exactly.",
        "input_schema": input_schema,
    }


class AnthropicModel(ModelProvider):
    accepts_images = True
    sends_http = True

    def __init__(
        self,
        model: str,
        *,
        client: HttpModelClient,
        context_window: int = 200_000,
        max_tokens: int | None = None,
        window_configured: bool = False,
        options: Mapping[str, Any] | None = None,
        price: Mapping[str, float] | None = None,
    ):
        self.model = model
        self.name = f"anthropic:{model}"
        self.client = client
        self.context_window = context_window
        self.max_tokens = max_tokens
        self.window_configured = window_configured
        self.options = dict(options or {})
        self.price = dict(price or {})

    async def aclose(self) -> None:
        await self.client.aclose()

    def _body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens or DEFAULT_MAX_TOKENS,
            "messages": to_anthropic_messages(request.messages),
        }
        options = dict(request.options)
        choice = options.pop("tool_choice", None)
        parallel = options.pop("parallel_tool_calls", None)
        for key, value in options.items():
            if key == "stop" and isinstance(value, str):
                value = [value]
            body[_RENAMED_OPTIONS.get(key, key)] = value
        if request.system:
            body["system"] = request.system
        tools = [
            {
                "name": t["name"],
                "description": t["description"],
                "input_schema": t["input_schema"],
            }
            for t in request.tools
        ]
        if request.schema is not None:
            tools.append(schema_tool(request.schema))
            body["tool_choice"] = {"type": "tool", "name": REPLY_TOOL}
        elif choice is not None and tools:
            body["tool_choice"] = _tool_choice(choice)
        if parallel is False and tools and request.schema is None:
            body["tool_choice"] = {**body.get("tool_choice", {"type": "auto"})}
            body["tool_choice"]["disable_parallel_tool_use"] = True
        if tools:
            body["tools"] = tools
        if stream:
            body["stream"] = True
        return body

    def _structured(self, request: ModelRequest, response: ModelResponse) -> ModelResponse:
        """The forced reply tool's input becomes the reply text (JSON)."""
        if request.schema is None:
            return response
        for call in response.tool_calls:
            if call.name == REPLY_TOOL:
                value = call.arguments
                if request.schema.get("type") != "object" and isinstance(value, dict):
                    value = value.get("value")
                text = value if isinstance(value, str) else orjson.dumps(value).decode()
                return response._replace(text=text, tool_calls=[], finish_reason="stop")
        return response

    async def generate(self, request: ModelRequest) -> ModelResponse:
        data = await self.client.post_json(
            "/v1/messages", self._body(request, stream=False), request.time_limit()
        )
        if not isinstance(data, dict) or "content" not in data:
            raise self.client.cut_off()
        text = "".join(b.get("text", "") for b in data["content"] if b.get("type") == "text")
        calls = [
            ToolCall(b["id"], b["name"], b.get("input") or {})
            for b in data["content"]
            if b.get("type") == "tool_use"
        ]
        response = ModelResponse(
            text=text,
            tool_calls=calls,
            usage=_usage(data.get("usage")),
            finish_reason=data.get("stop_reason") or "stop",
        )
        return self._structured(request, response)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        blocks: dict[int, dict[str, Any]] = {}
        usage: dict[str, int] = {}
        finish = "stop"
        complete = False
        async for event, data in self.client.events(
            "/v1/messages", self._body(request, stream=True), request.time_limit()
        ):
            kind = (data or {}).get("type", event)
            if kind == "message_start":
                usage.update(_usage(data["message"].get("usage")))
            elif kind == "content_block_start":
                blocks[data["index"]] = {"text": "", **data["content_block"], "partial_json": ""}
            elif kind == "content_block_delta":
                text = _add_delta(blocks, data)
                if text is not None:
                    yield StreamEvent("delta", text=text)
            elif kind == "message_delta":
                finish = (data.get("delta") or {}).get("stop_reason") or finish
                usage.update(_usage(data.get("usage")))
            elif kind == "message_stop":
                complete = True
                break
            elif kind == "error":
                detail = (data.get("error") or {}).get("message", "unknown error")
                raise ModelError(f"{self.client.label} failed mid-stream ({detail}); try again")
        if not complete:
            raise self.client.cut_off()
        response = _streamed_response(blocks, usage, finish)
        yield StreamEvent("done", response=self._structured(request, response))


def _add_delta(blocks: dict[int, dict[str, Any]], data: dict[str, Any]) -> str | None:
    """Add a ``content_block_delta`` to its block; the text it adds, if any."""
    block = blocks.setdefault(data["index"], {"type": "text", "text": "", "partial_json": ""})
    delta = data["delta"]
    if delta.get("type") == "text_delta":
        block["text"] += delta["text"]
        return str(delta["text"])
    if delta.get("type") == "input_json_delta":
        block["partial_json"] += delta.get("partial_json", "")
    return None


def _streamed_response(
    blocks: dict[int, dict[str, Any]], usage: dict[str, int], finish: str
) -> ModelResponse:
    """The reply the streamed content blocks make, in their order."""
    ordered = [blocks[i] for i in sorted(blocks)]
    calls = [
        ToolCall(b["id"], b["name"], _streamed_input(b)) for b in ordered if b["type"] == "tool_use"
    ]
    return ModelResponse(
        text="".join(b["text"] for b in ordered if b["type"] == "text"),
        tool_calls=calls,
        usage=usage,
        finish_reason=finish,
    )


def _streamed_input(block: dict[str, Any]) -> Any:
    if block["partial_json"]:
        return parse_arguments(block["partial_json"])
    return block.get("input") or {}


def anthropic_headers(api_key: str | None) -> dict[str, str]:
    headers = {"anthropic-version": API_VERSION, "content-type": "application/json"}
    if api_key:
        headers["x-api-key"] = api_key
    return headers


def build(spec: Any, key: str | None, transport: Any = None) -> AnthropicModel:
    """The ``anthropic`` entry point."""
    from foliko_cli.models.http import HttpModelClient

    client = HttpModelClient.for_spec(spec, anthropic_headers(key), key, transport)
    return AnthropicModel(spec.model, client=client, **spec.settings())
