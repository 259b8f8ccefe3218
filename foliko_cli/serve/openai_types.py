"""The Responses and Conversations APIs' bodies, as OpenAI's reference defines
them and as foliko takes them: each request body and answer declared once
(schema.py reads requests with them and describes them in ``/openapi.json``).

Request types ignore fields they do not declare (clients send more than a
server needs: an item's ``status``, a part's ``annotations``); what foliko
refuses is refused by a type (an enum, a bound) or by the code that turns
the body into a turn, with a message naming where.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Generic, Literal, TypeVar, cast

from msgspec import UNSET, Meta, Struct, UnsetType, field

from foliko_cli.serve.errors import ApiError
from foliko_cli.service.library import TOKENS_LIMIT

T = TypeVar("T")

INT64 = 2**63 - 1
Count = Annotated[int, Meta(ge=0, le=INT64)]
Tokens = Annotated[int, Meta(ge=1, le=INT64)]
MaxTokens = Annotated[int, Meta(ge=1, le=TOKENS_LIMIT)]  # what a model option takes
Temperature = Annotated[float, Meta(ge=0, le=2)]
TopP = Annotated[float, Meta(ge=0, le=1)]
Key = Annotated[str, Meta(max_length=64)]
Metadata = Annotated[
    dict[Key, Annotated[str, Meta(max_length=512)]],
    Meta(max_length=16, description="At most 16 pairs; keys up to 64, values up to 512 characters"),
]
NonEmpty = Annotated[str, Meta(min_length=1)]
Status = Literal["in_progress", "completed", "incomplete"]
LANE, LANE_TEXT = r"\A[A-Za-z0-9_.-]{1,256}\Z", "1 to 256 letters, digits, '_', '.' or '-'"
JSON_SCHEMA = {"anyOf": [{"type": "object"}, {"type": "null"}], "description": "A JSON Schema"}
"""A JSON Schema in a request: checked as one where it is used (messages/schema.py)."""


class Body(Struct, kw_only=True, omit_defaults=True):
    """A request body (fields it does not declare are ignored; echoed, those
    it left at their default are left out)."""


class Answer(Struct, kw_only=True):
    """An answer: every field is sent, null when it has no value, unless its
    default is UNSET (then it is left out)."""


# requests


class ContentPart(Body, kw_only=True):
    """A part of a message's content: ``input_text``, ``output_text`` (and
    ``text``, ``refusal``) as text, ``input_image`` as a base64 data: URL,
    ``input_file`` as a UTF-8 text file in ``file_data``."""

    type: Literal["input_text", "output_text", "text", "refusal", "input_image", "input_file"]
    text: str | None = None
    refusal: str | None = None
    image_url: str | None = None
    detail: str | None = None
    file_data: str | None = None
    file_id: str | None = None
    file_url: str | None = None
    filename: str | None = None


Content = str | list[ContentPart]


class InputItem(Body, kw_only=True):
    """An input item: a ``message`` (the default; ``role`` and ``content``), a
    ``function_call`` (``call_id``, ``name``, ``arguments``), a
    ``function_call_output`` (``call_id``, ``output``), an ``item_reference``
    (``id``) to a stored item, a ``compaction`` item first (its
    ``encrypted_content``), or ``reasoning`` (dropped)."""

    type: Literal[
        "message",
        "function_call",
        "function_call_output",
        "item_reference",
        "compaction",
        "reasoning",
    ] = "message"
    role: Literal["user", "assistant", "system", "developer"] | None = None
    content: Content | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | dict[str, Any] | None = None
    output: Content | None = None
    id: str | None = None
    encrypted_content: str | None = None


Input = str | list[InputItem]


class FunctionDefinition(Body, kw_only=True):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(Body, kw_only=True):
    """A tool the client offers: ``function`` (``name``, ``parameters``; or as
    Chat Completions writes it, under ``function``), ``namespace`` (a named
    group of function ``tools``, whose ``type`` may be left out), or a hosted
    tool foliko does not run."""

    type: str | None = None
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    function: FunctionDefinition | None = None
    tools: list[Tool] | None = None


class ToolChoice(Body, kw_only=True):
    """``{"type": "function", "name"}`` (or ``"function": {"name"}``), or
    ``{"type": "allowed_tools", "mode"}``."""

    type: str
    name: str | None = None
    function: FunctionDefinition | None = None
    mode: str | None = None


class TextFormat(Body, kw_only=True):
    """``text``, ``json_object`` (any JSON object), or ``json_schema``: the
    reply follows ``schema``, checked before the turn is saved."""

    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    description: str | None = None
    schema: Annotated[Any, Meta(extra_json_schema=JSON_SCHEMA)] = None
    strict: bool | None = None


class TextParam(Body, kw_only=True):
    format: TextFormat | None = None
    verbosity: str | None = None


class ConversationRef(Struct):
    id: str


class ContextManagement(Body, kw_only=True):
    """``compaction``: compact the history once what a model call would be sent
    passes ``compact_threshold`` tokens (as well as when the window fills)."""

    type: Literal["compaction"]
    compact_threshold: Tokens | None = None


class ResponseCreate(Body, kw_only=True):
    """One turn (``POST /v1/responses``; a WebSocket's ``response.create``)."""

    input: Input
    model: str | None = None
    instructions: str | None = None
    conversation: NonEmpty | ConversationRef | None = None
    previous_response_id: str | None = None
    stream: bool = False
    store: bool = True
    background: bool = False
    temperature: Temperature | None = None
    top_p: TopP | None = None
    max_output_tokens: MaxTokens | None = None
    max_tool_calls: Count | None = None
    tools: list[Tool] | None = None
    tool_choice: str | ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    metadata: Metadata | None = None
    text: TextParam | None = None
    truncation: Literal["auto", "disabled"] | None = None
    context_management: Annotated[list[ContextManagement], Meta(max_length=1)] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None


class SocketMessage(Body, kw_only=True):
    """A message on a WebSocket to ``/v1/responses``: ``response.create`` with the
    body of ``POST /v1/responses`` (less ``stream`` and ``background``), in the
    lane ``stream_id`` names; ``response.steer`` is refused."""

    type: Literal["response.create", "response.steer"]
    stream_id: Annotated[str, Meta(pattern=LANE, description=LANE_TEXT)] | None = None


class CompactRequest(Body, kw_only=True):
    """The history to compact: ``previous_response_id``'s, then ``input``."""

    model: str
    input: Input | None = None
    previous_response_id: str | None = None
    instructions: str | None = None


class ConversationCreate(Body, kw_only=True):
    items: Annotated[list[InputItem], Meta(max_length=20)] | None = None
    metadata: Metadata | None = None


class ConversationUpdate(Body, kw_only=True):
    metadata: Metadata


class ItemsAdd(Body, kw_only=True):
    items: Annotated[list[InputItem], Meta(min_length=1, max_length=20)]


class ItemsQuery(Body, kw_only=True):
    limit: Annotated[int, Meta(ge=1, le=100)] = 20
    after: str | None = None
    order: Literal["asc", "desc"] = "desc"


class ResponseQuery(Body, kw_only=True):
    stream: bool = False
    starting_after: Annotated[int, Meta(ge=-1, le=2**53)] = -1


# answers


class InputText(Answer, tag_field="type", tag="input_text", kw_only=True):
    text: str


class OutputText(Answer, tag_field="type", tag="output_text", kw_only=True):
    text: str
    annotations: list[Any] = []
    logprobs: list[Any] = []


class InputImage(Answer, tag_field="type", tag="input_image", kw_only=True):
    image_url: str
    detail: str = "auto"


Part = InputText | OutputText | InputImage


class MessageItem(Answer, tag_field="type", tag="message", kw_only=True):
    id: str
    status: Status = "completed"
    role: str
    content: list[Part]


class FunctionCallItem(Answer, tag_field="type", tag="function_call", kw_only=True):
    id: str
    call_id: str
    name: str
    arguments: str
    status: Status = "completed"
    namespace: str | UnsetType = UNSET


class FunctionCallOutputItem(Answer, tag_field="type", tag="function_call_output", kw_only=True):
    id: str
    call_id: str
    output: str
    status: Status = "completed"


class CompactionItem(Answer, tag_field="type", tag="compaction", kw_only=True):
    id: str
    encrypted_content: str


Item = MessageItem | FunctionCallItem | FunctionCallOutputItem
OutputItem = Item | CompactionItem


def _id(row: Any) -> str:
    return cast(str, row.id)


class Page(Answer, Generic[T], kw_only=True):
    """One page of a list, oldest or newest first."""

    object: Literal["list"] = "list"
    data: list[T]
    first_id: str | None
    last_id: str | None
    has_more: bool


def page(data: list[Any], has_more: bool, id_of: Callable[[Any], str] = _id) -> Page[Any]:
    first, last = (id_of(data[0]), id_of(data[-1])) if data else (None, None)
    return Page(data=data, first_id=first, last_id=last, has_more=has_more)


def start_after(ids: list[str], after: str | None, what: str) -> int:
    """Where the page after ``after`` starts in ``ids`` (a 400 when it is not there)."""
    if after is None:
        return 0
    if after not in ids:
        raise ApiError(400, f"after: no {what} {after[:200]!r} in this list", param="after")
    return ids.index(after) + 1


def page_of(rows: list[Any], query: Any, what: str, id_of: Callable[[Any], str] = _id) -> Page[Any]:
    """The page of ``rows`` (oldest first) the query asks for: its ``order``,
    if it has one, ``after`` and ``limit``."""
    ordered = rows[::-1] if getattr(query, "order", "asc") == "desc" else rows
    rest = ordered[start_after([id_of(row) for row in ordered], query.after, what) :]
    return page(rest[: query.limit], len(rest) > query.limit, id_of)


class TokensDetails(Answer, kw_only=True):
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputDetails(Answer, kw_only=True):
    reasoning_tokens: int = 0


class Usage(Answer, kw_only=True):
    input_tokens: int
    input_tokens_details: TokensDetails = field(default_factory=TokensDetails)
    output_tokens: int
    output_tokens_details: OutputDetails = field(default_factory=OutputDetails)
    total_tokens: int


class Reasoning(Answer, kw_only=True):
    effort: str | None = None
    summary: str | None = None


class Failure(Answer, kw_only=True):
    code: str
    message: str


class Incomplete(Answer, kw_only=True):
    reason: str


class TextConfig(Answer, kw_only=True):
    format: dict[str, Any]
    verbosity: str = "medium"


class Response(Answer, kw_only=True):
    """The Response object, every field the reference defines present; those
    foliko has no use for carry OpenAI's value for them unused."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: Literal["completed", "failed", "in_progress", "cancelled", "queued", "incomplete"]
    background: bool
    completed_at: int | None
    conversation: ConversationRef | None
    error: Failure | None
    incomplete_details: Incomplete | None
    instructions: str | None
    max_output_tokens: int | None
    max_tool_calls: int | None
    metadata: dict[str, str]
    model: str
    output: list[OutputItem]
    parallel_tool_calls: bool
    previous_response_id: str | None
    prompt: None = None
    prompt_cache_key: str | None
    reasoning: Reasoning = field(default_factory=Reasoning)
    safety_identifier: str | None
    service_tier: str = "default"
    store: bool
    temperature: float
    text: TextConfig
    tool_choice: Any
    tools: list[dict[str, Any]]
    top_logprobs: int = 0
    top_p: float
    truncation: str
    usage: Usage | None
    user: str | None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0


class Deleted(Answer, kw_only=True):
    id: str
    object: str
    deleted: bool = True


class InputTokens(Answer, kw_only=True):
    object: Literal["response.input_tokens"] = "response.input_tokens"
    input_tokens: int
    counted_by: Literal["tokenizer", "estimate"]


class Compacted(Answer, kw_only=True):
    """The compacted window: a compaction item (the summary), then the items kept."""

    id: str
    object: Literal["response.compaction"] = "response.compaction"
    created_at: int
    output: list[OutputItem]
    usage: Usage


class Conversation(Answer, kw_only=True):
    id: str
    object: Literal["conversation"] = "conversation"
    created_at: int
    metadata: dict[str, str]
