"""The model provider contract: one request in, one response out.

The value types are NamedTuples rather than dataclasses: they are created at
every start-up, and a NamedTuple class costs a fraction of a dataclass (P1).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any, NamedTuple

from foliko_cli.errors import UsageError

NO_USAGE: Mapping[str, int] = MappingProxyType({})

TOOL_CHOICE_MODES = frozenset({"auto", "none", "required"})
"""The ``tool_choice`` option: one of these or the name of a tool the model must
call. Each provider says it in its own terms; the engine sends it with a
turn's first model call only (after that the model is free), so a forced
call cannot repeat until the step limit."""


def forced_tool(choice: Any) -> str | None:
    """The tool a ``tool_choice`` option names, or None when it is a mode."""
    return choice if isinstance(choice, str) and choice not in TOOL_CHOICE_MODES else None


TOKENS_LIMIT = 2**31 - 1
"""The largest ``max_tokens``, ``top_k`` or context window foliko takes: more
than any model writes or reads, and what a server that keeps such counts in
32 bits (llama.cpp) accepts."""
_COUNT = f"a whole number from 1 to {TOKENS_LIMIT:,}"


def token_count(value: Any) -> bool:
    """Whether ``value`` is a count of tokens foliko takes (1 to TOKENS_LIMIT)."""
    return _whole(value) and 0 < value <= TOKENS_LIMIT


_OPTION_KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "temperature": ("a number of 0 or more", lambda v: _number(v) and v >= 0),
    "top_p": ("a number from 0 to 1", lambda v: _number(v) and 0 <= v <= 1),
    "presence_penalty": ("a number", lambda v: _number(v)),
    "frequency_penalty": ("a number", lambda v: _number(v)),
    "max_tokens": (_COUNT, token_count),
    "top_k": (_COUNT, token_count),
    "seed": ("a whole number of 64 bits", lambda v: _whole(v) and -(2**63) <= v < 2**63),
    "stop": ("a string or a list of strings", lambda v: _stop(v)),
}


def _stop(value: Any) -> bool:
    return isinstance(value, str) or (
        isinstance(value, list) and all(isinstance(s, str) for s in value)
    )


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_options(options: Mapping[str, Any]) -> None:
    """Refuse a sampling option every provider would refuse (a temperature of
    ``"hot"``) before anything is sent; options foliko does not know pass as
    they are."""
    for key, value in options.items():
        kind = _OPTION_KINDS.get(key)
        if kind is not None and not kind[1](value):
            raise UsageError(
                f"model option {key} must be {kind[0]}, not {value!r}", fix="give it such a value"
            )


class ToolCall(NamedTuple):
    """A call the reply asks for. ``typed``: the user wrote it (the echo model's
    ``/tool NAME {...}``), so it is the user's choice, not the model's: it runs
    without asking for approval, and its failure is the turn's."""

    id: str
    name: str
    arguments: Any
    typed: bool = False


class ModelRequest(NamedTuple):
    """``messages`` are canonical messages (see ``storage.record``), oldest first.

    ``deadline`` is a ``time.monotonic()`` instant; retries never go past it.
    ``options`` are the model's sampling options (``max_tokens``, ``temperature``,
    ``stop``, ...), passed through by each provider in its own terms;
    ``schema`` is a JSON Schema the reply must follow (structured output).
    """

    messages: list[dict[str, Any]]
    system: str | None = None
    tools: Sequence[dict[str, Any]] = ()
    deadline: float | None = None
    purpose: str = "turn"
    options: Mapping[str, Any] = MappingProxyType({})
    schema: Mapping[str, Any] | None = None

    def time_limit(self, default: float = 120.0) -> float:
        import time

        return self.deadline if self.deadline is not None else time.monotonic() + default


class ModelResponse(NamedTuple):
    text: str
    tool_calls: Sequence[ToolCall] = ()
    usage: Mapping[str, int] = NO_USAGE
    finish_reason: str = "stop"


class StreamEvent(NamedTuple):
    """``type`` is ``delta`` (``text``) or ``done`` (``response``)."""

    type: str
    text: str = ""
    response: ModelResponse | None = None


WIRE: ContextVar[list[dict[str, Any]] | None] = ContextVar("foliko_wire", default=None)
"""While set (``ModelProvider.wire_request``), ``models.http`` puts each request it
would send in this list and raises ``RequestWired`` in place of sending it."""


class RequestWired(Exception):
    """A request was captured where it would have been sent (see ``WIRE``)."""


class ModelProvider(ABC):
    """``context_window`` is the best known window; ``window_configured`` says it was
    set for this model in the config (and beats every other source).

    ``options`` (from the config) go with every request unless a turn overrides
    them; ``price`` is dollars per million ``input`` and ``output`` tokens.
    ``accepts_images``: the provider sends a user message's image attachments
    (see ``foliko_cli.messages.attachments``); a turn that attaches an image to a
    model without it is refused before anything is sent or saved.
    """

    name: str
    context_window: int = 8192
    window_configured: bool = False
    offline: bool = False
    accepts_images: bool = False
    options: Mapping[str, Any] = NO_USAGE
    price: Mapping[str, float] = NO_USAGE
    max_tokens: int | None = None
    sends_http: bool = False
    """Its requests go through ``models.http``, so ``wire_request`` can show them."""

    @abstractmethod
    async def generate(self, request: ModelRequest) -> ModelResponse: ...

    async def wire_request(
        self, request: ModelRequest, *, stream: bool = False
    ) -> dict[str, Any] | None:
        """The HTTP request ``generate`` (with ``stream``: ``stream``) would send for
        ``request``, caught by ``models.http`` where it would go out, so it is what
        the server receives: ``method``, ``url``, ``headers`` (secrets as ***) and
        ``body``. Nothing is sent. None for a provider that sends nothing through
        ``models.http`` (echo, a plugin with its own client)."""
        if not self.sends_http:
            return None
        sink: list[dict[str, Any]] = []
        token = WIRE.set(sink)
        try:
            if stream:
                async for _ in self.stream(request):
                    pass
            else:
                await self.generate(request)
        except RequestWired:
            pass
        finally:
            WIRE.reset(token)
        return sink[0] if sink else None

    async def discover_context_window(self, cache_dir: Any = None) -> int | None:
        """The window the server reports for this model, or None; never raises."""
        return None

    def remember_context_window(self, window: int, cache_dir: Any = None) -> None:
        """Keep a window the server named when it refused a prompt, for later processes."""
        return None

    async def count_tokens(self, request: ModelRequest) -> int | None:
        """The prompt's tokens by the server's own tokenizer, or None when the
        provider has none to ask (callers then estimate); never raises."""
        return None

    async def aclose(self) -> None:
        """Release connections; the provider may still be used afterwards."""
        return None

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Providers without native streaming answer in one delta."""
        response = await self.generate(request)
        if response.text:
            yield StreamEvent("delta", text=response.text)
        yield StreamEvent("done", response=response)
