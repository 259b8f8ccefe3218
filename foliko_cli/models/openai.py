"""OpenAI chat completions, and every server that speaks it (Ollama, vLLM, ...)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from foliko_cli.messages.attachments import image_data, images, unavailable
from foliko_cli.models.base import (
    ModelProvider,
    ModelRequest,
    ModelResponse,
    StreamEvent,
    ToolCall,
    forced_tool,
)

if TYPE_CHECKING:
    from foliko_cli.models.http import HttpModelClient


def parse_arguments(raw: Any) -> Any:
    """Tool arguments arrive as a JSON string; keep the text when it is not JSON."""
    if not isinstance(raw, str):
        return raw
    try:
        return orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError:
        return raw


def _arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()


def to_openai_messages(request: ModelRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    for message in request.messages:
        role = message["role"]
        if role == "assistant":
            converted: dict[str, Any] = {"role": "assistant", "content": message["content"]}
            if message.get("tool_calls"):
                converted["content"] = message["content"] or None
                converted["tool_calls"] = [
                    {
                        "id": call["id"],
                        "type": "function",
                        "function": {
                            "name": call["name"],
                            "arguments": _arguments_text(call["arguments"]),
                        },
                    }
                    for call in message["tool_calls"]
                ]
            out.append(converted)
        elif role == "tool":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": message["tool_call_id"],
                    "content": message["content"],
                }
            )
        elif role == "user" and images(message):
            out.append({"role": "user", "content": _user_parts(message)})
        else:
            out.append({"role": role, "content": message["content"]})
    return out


def _user_parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A user message with images as OpenAI content parts (text first)."""
    parts: list[dict[str, Any]] = []
    if message["content"]:
        parts.append({"type": "text", "text": message["content"]})
    for image in images(message):
        data = image_data(image)
        if data is None:
            parts.append({"type": "text", "text": unavailable(image)})
        else:
            url = f"data:{image['media_type']};base64,{data}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def to_openai_tools(tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Function tools; a spec's ``strict`` (as a client sent it) goes along."""
    converted = []
    for tool in tools:
        function = {
            "name": tool["name"],
            "description": tool["description"],
            "parameters": tool["input_schema"],
        }
        if "strict" in tool:
            function["strict"] = tool["strict"]
        converted.append({"type": "function", "function": function})
    return converted


def _usage(data: dict[str, Any] | None) -> dict[str, int]:
    """Token counts in foliko's terms; cached and reasoning tokens when reported."""
    if not data:
        return {}
    usage = {
        "input_tokens": int(data.get("prompt_tokens") or 0),
        "output_tokens": int(data.get("completion_tokens") or 0),
    }
    cached = (data.get("prompt_tokens_details") or {}).get("cached_tokens")
    if cached:
        usage["cached_tokens"] = int(cached)
    reasoning = (data.get("completion_tokens_details") or {}).get("reasoning_tokens")
    if reasoning:
        usage["reasoning_tokens"] = int(reasoning)
    return usage


def response_format(schema: Any) -> dict[str, Any]:
    """Structured output as OpenAI (and llama.cpp, vLLM, Ollama) take it."""
    return {"type": "json_schema", "json_schema": {"name": "reply", "schema": dict(schema)}}


class OpenAIChatModel(ModelProvider):
    """``hosted`` is OpenAI's own service: it takes ``max_completion_tokens``."""

    accepts_images = True
    sends_http = True

    def __init__(
        self,
        model: str,
        *,
        client: HttpModelClient,
        provider: str = "openai",
        context_window: int = 8192,
        max_tokens: int | None = None,
        window_configured: bool = False,
        options: Mapping[str, Any] | None = None,
        price: Mapping[str, float] | None = None,
        hosted: bool = False,
    ):
        self.model = model
        self.provider = provider
        self.name = f"{provider}:{model}"
        self.client = client
        self.context_window = context_window
        self.max_tokens = max_tokens
        self.window_configured = window_configured
        self.options = dict(options or {})
        self.price = dict(price or {})
        self.hosted = hosted

    async def discover_context_window(self, cache_dir: Any = None) -> int | None:
        if self.hosted:
            return None
        from foliko_cli.models.discovery import discover_window

        return await discover_window(self.client, self.model, self.provider, cache_dir)

    def remember_context_window(self, window: int, cache_dir: Any = None) -> None:
        if not self.hosted:
            from foliko_cli.models.discovery import remember_window

            remember_window(self.client, self.model, window, cache_dir)

    async def count_tokens(self, request: ModelRequest) -> int | None:
        """llama.cpp's count: the prompt its chat template makes (``/apply-template``),
        tokenized (``/tokenize``); None from any other server."""
        if self.hosted:
            return None
        from foliko_cli.models.discovery import DISCOVERY_TIMEOUT, server_root

        root = server_root(self.client.base_url)
        body = self._body(request, stream=False)
        ask = self.client.get_json
        try:
            prompt = (await ask(root + "/apply-template", DISCOVERY_TIMEOUT, body=body))["prompt"]
            tokenize = {"content": prompt, "add_special": True, "parse_special": True}
            tokens = (await ask(root + "/tokenize", DISCOVERY_TIMEOUT, body=tokenize))["tokens"]
        except Exception:  # no such endpoint, a transport error: no count, never a failure
            return None
        return len(tokens) if isinstance(tokens, list) else None

    async def aclose(self) -> None:
        await self.client.aclose()

    def _body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": to_openai_messages(request)}
        if request.tools:
            body["tools"] = to_openai_tools(request.tools)
        options = dict(request.options)
        if "max_tokens" not in options and self.max_tokens:
            options["max_tokens"] = self.max_tokens
        if self.hosted and "max_tokens" in options:
            options["max_completion_tokens"] = options.pop("max_tokens")
        body.update(options)
        if not request.tools:
            body.pop("parallel_tool_calls", None)  # the API refuses it without tools
        if "tool_choice" in body:
            name = forced_tool(body["tool_choice"])
            if not request.tools:
                del body["tool_choice"]  # the API refuses a choice without tools
            elif name is not None:
                body["tool_choice"] = {"type": "function", "function": {"name": name}}
        if request.schema is not None:
            body["response_format"] = response_format(request.schema)
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    async def generate(self, request: ModelRequest) -> ModelResponse:
        data = await self.client.post_json(
            "/chat/completions", self._body(request, stream=False), request.time_limit()
        )
        try:
            choice = data["choices"][0]
            message = choice["message"]
        except (KeyError, IndexError, TypeError):
            raise self.client.cut_off() from None
        calls = [
            ToolCall(c["id"], c["function"]["name"], parse_arguments(c["function"]["arguments"]))
            for c in message.get("tool_calls") or []
        ]
        return ModelResponse(
            text=message.get("content") or "",
            tool_calls=calls,
            usage=_usage(data.get("usage")),
            finish_reason=choice.get("finish_reason") or "stop",
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        usage: dict[str, int] = {}
        finish = None
        done = False
        async for _event, data in self.client.events(
            "/chat/completions", self._body(request, stream=True), request.time_limit()
        ):
            if data is None:
                done = True
                break
            usage = _usage(data.get("usage")) or usage
            for choice in data.get("choices") or []:
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    text.append(delta["content"])
                    yield StreamEvent("delta", text=delta["content"])
                for piece in delta.get("tool_calls") or []:
                    call = calls.setdefault(
                        piece.get("index", 0), {"id": "", "name": "", "arguments": ""}
                    )
                    function = piece.get("function") or {}
                    call["id"] = piece.get("id") or call["id"]
                    call["name"] += function.get("name") or ""
                    call["arguments"] += function.get("arguments") or ""
                finish = choice.get("finish_reason") or finish
        if not done and finish is None:
            raise self.client.cut_off()
        response = ModelResponse(
            text="".join(text),
            tool_calls=[
                ToolCall(c["id"], c["name"], parse_arguments(c["arguments"]))
                for _, c in sorted(calls.items())
            ],
            usage=usage,
            finish_reason=finish or "stop",
        )
        yield StreamEvent("done", response=response)


def build(spec: Any, key: str | None, transport: Any = None) -> OpenAIChatModel:
    """The ``openai`` and ``ollama`` entry points: any OpenAI-compatible server."""
    from foliko_cli.models.http import HttpModelClient

    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    return OpenAIChatModel(
        spec.model,
        client=HttpModelClient.for_spec(spec, headers, key, transport),
        provider=spec.provider,
        hosted=spec.provider == "openai" and "api.openai.com" in (spec.base_url or ""),
        **spec.settings(),
    )
