"""Chat Completions' bodies (and the models list), as OpenAI's reference defines
them and as foliko takes them: each declared once (see schema.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, UnsetType, field

from foliko_cli.serve.openai_types import (
    INT64,
    JSON_SCHEMA,
    Answer,
    Body,
    MaxTokens,
    Metadata,
    Temperature,
    Tool,
    ToolChoice,
    TopP,
)

Penalty = Annotated[float, Meta(ge=-2, le=2)]
Finish = Literal["stop", "length", "tool_calls", "content_filter"]


# requests


class ImageURL(Body, kw_only=True):
    url: str
    detail: str | None = None


class ChatPart(Body, kw_only=True):
    """Text, or (from the user) an image as a base64 data: URL."""

    type: Literal["text", "image_url"]
    text: str | None = None
    image_url: ImageURL | str | None = None


class CalledFunction(Body, kw_only=True, omit_defaults=False):
    name: str
    arguments: Annotated[str | dict[str, Any], Meta(description="JSON (answers: a string)")] = "{}"


class ToolCall(Body, kw_only=True, omit_defaults=False):
    """A function call of the model's (in a request, in an answer)."""

    id: str
    type: Literal["function"] = "function"
    function: CalledFunction


class ChatMessage(Body, kw_only=True):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ChatPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


class JsonSchemaFormat(Body, kw_only=True):
    name: str | None = None
    description: str | None = None
    schema: Annotated[Any, Meta(extra_json_schema=JSON_SCHEMA)] = None
    strict: bool | None = None


class ResponseFormat(Body, kw_only=True):
    """``text``, ``json_object`` (any JSON object), or ``json_schema``: the
    reply follows ``json_schema.schema``, checked before the turn is saved."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StreamOptions(Body, kw_only=True):
    include_usage: bool = False


class ChatCompletionCreate(Body, kw_only=True):
    """A chat completion: stateless, or a turn of the session ``X-Session-Id`` names."""

    messages: Annotated[list[ChatMessage], Meta(min_length=1)]
    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    max_tokens: MaxTokens | None = None
    max_completion_tokens: MaxTokens | None = None
    seed: Annotated[int, Meta(ge=-INT64 - 1, le=INT64)] | None = None
    stop: str | list[str] | None = None
    n: Annotated[int, Meta(ge=1, le=1, description="1: a turn has one answer")] = 1
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    tools: list[Tool] | None = None
    tool_choice: str | ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    store: bool = False
    metadata: Metadata | None = None
    user: str | None = None


class CompletionUpdate(Body, forbid_unknown_fields=True, kw_only=True):
    """Only a stored completion's metadata can change; it replaces the old."""

    metadata: Metadata | None


class CompletionsQuery(Body, kw_only=True):
    model: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    after: str | None = None
    limit: Annotated[int, Meta(ge=1, le=100)] = 20
    order: Literal["asc", "desc"] = "asc"


class MessagesQuery(Body, kw_only=True):
    after: str | None = None
    limit: Annotated[int, Meta(ge=1, le=100)] = 20
    order: Literal["asc", "desc"] = "asc"


# answers


class AssistantMessage(Answer, kw_only=True):
    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: str | None = None
    tool_calls: list[ToolCall] | UnsetType = UNSET


class Choice(Answer, kw_only=True):
    index: int = 0
    message: AssistantMessage
    finish_reason: Finish
    logprobs: None = None


class ChatUsage(Answer, kw_only=True):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class Completed(Answer, kw_only=True):
    """What a completion and each chunk of a streamed one begin with."""

    id: str
    created: int
    model: str


class ChatCompletion(Completed, kw_only=True):
    object: Literal["chat.completion"] = "chat.completion"
    choices: list[Choice]
    usage: ChatUsage


class StoredCompletion(ChatCompletion, kw_only=True):
    """A stored completion: the answer, its metadata and the request's parameters."""

    metadata: dict[str, str]
    request_id: str | None
    tools: list[Any] | None
    tool_choice: Any
    response_format: Any
    temperature: float | None
    top_p: float | None
    seed: int | None
    presence_penalty: float | None
    frequency_penalty: float | None


class CallChunk(ToolCall, kw_only=True):
    index: int


class Delta(Answer, omit_defaults=True, kw_only=True):
    role: Literal["assistant"] | None = None
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[CallChunk] | None = None


class ChunkChoice(Answer, kw_only=True):
    index: int = 0
    delta: Delta
    finish_reason: Finish | None = None
    logprobs: None = None


class Chunk(Completed, kw_only=True):
    """One event of a streamed completion."""

    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    choices: list[ChunkChoice]
    usage: ChatUsage | UnsetType = UNSET


class StoreMessage(Answer, kw_only=True):
    """A message of a stored completion's request (``ChatCompletionStoreMessage``)."""

    id: str
    role: str
    content: str | None
    refusal: str | None = None
    name: str | None
    content_parts: list[ChatPart] | None
    tool_calls: list[ToolCall] | UnsetType = UNSET
    tool_call_id: str | UnsetType = UNSET


class Model(Answer, kw_only=True):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "foliko"


class ModelList(Answer, kw_only=True):
    object: Literal["list"] = "list"
    data: list[Model]
