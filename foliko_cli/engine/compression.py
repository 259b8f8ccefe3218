"""Keeping long sessions inside the model's context budget (F4).

The stored history is never touched. The session's ``compression_state``
holds a ``summary`` and ``covered``, the number of stored messages that the
summary stands for; the model is sent the system prompt with the summary,
then the messages after ``covered``. Above ``THRESHOLD`` of the budget, the
oldest uncovered messages (up to a user message, so a tool call is never
separated from its result) are summarised by the model, folding in the
previous summary; when summarising fails, they are simply dropped
(truncation). Both count as a compression.

Each compression is also written down, as a *compaction*: its ``number``
(the session's ``compression_count`` after it), ``at`` (ms), ``trigger``
(``auto``: a turn needed it; ``manual``: asked for, ``sessions compact``),
``method``, ``model``, ``from`` (the first message it folded in; those
before were in the previous summary), ``covered``, ``summary``, the
summarising call's ``usage`` and, with prices, ``cost``. A turn keeps the
compactions it made on its reply (``compactions``, beside
``compression_usage``); one asked for between turns waits in
``compression_state["compactions"]`` until the next turn's first reply takes
it. So the state stays small however often a session is compressed, and a
turn writes each summary once.
"""

from __future__ import annotations

from typing import Any, cast

import orjson

from foliko_cli.common.clock import now_ms
from foliko_cli.context.session import SessionContext
from foliko_cli.errors import FolikoError, NothingToCompactError
from foliko_cli.messages.tokens import TokenCounter, estimate_tokens
from foliko_cli.models.base import ModelProvider, ModelRequest

IMAGE_TOKENS = 1000
THRESHOLD = 0.7
KEEP_SHARE = 0.3
SUMMARY_SHARE = 0.15
MESSAGE_OVERHEAD = 4
SUMMARY_HEADING = "Summary of the earlier conversation:"
SUMMARY_SYSTEM = (
    "You compress conversations. Summarise the conversation below for your own later "
    "reference: keep facts, names, numbers, decisions, tool results that matter and open "
    "questions. Reply with the summary only."
)


def message_tokens(message: dict[str, Any], count: TokenCounter = estimate_tokens) -> int:
    tokens = count(message.get("content") or "") + MESSAGE_OVERHEAD
    if "tool_calls" not in message and "attachments" not in message and "fragments" not in message:
        return tokens  # most messages
    if message.get("tool_calls"):
        tokens += count(orjson.dumps(message["tool_calls"]).decode())
    if message.get("attachments"):
        tokens += IMAGE_TOKENS * sum(p.get("type") == "image" for p in message["attachments"])
    if "fragments" in message:  # their texts go before the content (about 4 bytes a token)
        tokens += sum(r.get("size", 0) for r in message["fragments"] if type(r) is dict) // 4
    return tokens


def system_with_summary(system: str | None, summary: str | None) -> str | None:
    if not summary:
        return system
    block = f"{SUMMARY_HEADING}\n{summary}"
    return f"{system}\n\n{block}" if system else block


def transcript(messages: list[dict[str, Any]], texts: dict[str, str] | None = None) -> str:
    """The messages as a summary's model reads them (a user message's fragments,
    whose ``texts`` are given, before its text)."""
    lines = []
    for message in messages:
        role = message["role"]
        if role == "tool":
            role = f"tool {message.get('name', '')}".strip()
        text = message.get("content") or ""
        if "fragments" in message:
            from foliko_cli.messages.fragments import expanded

            text = expanded(message, texts or {})
        if message.get("tool_calls"):
            calls = ", ".join(
                f"{c['name']}({orjson.dumps(c['arguments']).decode()})"
                for c in message["tool_calls"]
            )
            text = f"{text} [calls {calls}]".strip()
        lines.append(f"{role}: {text}")
    return "\n".join(lines)


class Compressor:
    """``budget`` is the model's context window in tokens; ``tools`` are counted too."""

    def __init__(self, budget: int, count: TokenCounter = estimate_tokens):
        self.budget = budget
        self.count = count
        self.fixed = 0

    def count_tools(self, tools: list[dict[str, Any]]) -> None:
        self.fixed = self.count(orjson.dumps(tools).decode()) if tools else 0

    def tokens(self, system: str | None, messages: list[dict[str, Any]]) -> int:
        return (
            self.fixed
            + self.count(system or "")
            + sum(message_tokens(m, self.count) for m in messages)
        )

    def view(
        self, session: SessionContext, system: str | None
    ) -> tuple[str | None, list[dict[str, Any]]]:
        """The system prompt and messages the model is sent now.

        A state that no longer fits the history (``covered`` past its end, as
        after the history was cleared by an older version) is ignored.
        """
        state = session.compression_state
        start = state.get("covered", 0) - session.message_offset
        if not 0 <= start <= len(session.messages):
            return system, session.messages
        return system_with_summary(system, state.get("summary")), session.messages[start:]

    def room(self, system: str | None) -> int:
        """Tokens left for the summary and the messages once the prompt and tools are in."""
        return max(0, self.budget - self.fixed - self.count(system or ""))

    def _cut(self, messages: list[dict[str, Any]], start: int, room: int) -> int:
        """Where the verbatim tail begins: at a user message, within the keep share."""
        keep = room * KEEP_SHARE
        kept = 0
        cut = len(messages)
        for index in range(len(messages) - 1, start - 1, -1):
            kept += message_tokens(messages[index], self.count)
            if messages[index]["role"] == "user":
                if kept > keep and cut < len(messages):
                    break
                cut = index
        return cut

    async def compress_if_needed(
        self,
        session: SessionContext,
        system: str | None,
        model: ModelProvider,
        deadline: float | None = None,
        *,
        force: bool = False,
        above: int | None = None,
        spent: dict[str, int] | None = None,
        made: list[dict[str, Any]] | None = None,
    ) -> bool:
        """Compress when the request would pass THRESHOLD of the budget or ``above``
        tokens (or ``force``: the server said the request does not fit). The
        summarising call's usage is added to ``spent``, the compaction appended
        to ``made``.

        The verbatim tail takes at most KEEP_SHARE and the summary SUMMARY_SHARE
        of the room the system prompt and tools leave, so a compressed request
        sits well below the threshold and the next turns need none.
        """
        prompt, messages = self.view(session, system)
        total = self.tokens(prompt, messages)
        session.compression_state["last_token_count"] = total
        limit = self.budget * THRESHOLD if above is None else min(above, self.budget * THRESHOLD)
        if total <= limit and not force:
            return False
        covered = self._start(session)
        room = self.room(system) if above is None else min(above, self.room(system))
        cut = self._cut(session.messages, covered, room)
        entry = await self._fold(session, system, model, covered, cut, deadline, "auto")
        if entry is None:
            return False
        if spent is not None:
            for key, value in entry["usage"].items():
                spent[key] = spent.get(key, 0) + value
        if made is not None:
            made.append(entry)
        return True

    async def compact(
        self,
        session: SessionContext,
        system: str | None,
        model: ModelProvider,
        deadline: float | None = None,
        *,
        keep: int | None = None,
    ) -> dict[str, Any]:
        """Compress now (a manual compaction): everything before the last ``keep``
        turns, or (None) what a full window would. Return the compaction;
        NothingToCompactError when no message is left to fold in."""
        covered = self._start(session)
        messages = session.messages
        starts = [i for i in range(covered, len(messages)) if messages[i]["role"] == "user"]
        if keep is None:
            cut = self._cut(messages, covered, self.room(system))
        elif keep == 0:
            cut = len(messages)
            if messages and messages[-1].get("tool_calls"):  # its results are still to come
                cut = starts[-1] if starts else covered
        else:
            cut = starts[len(starts) - keep] if keep <= len(starts) else covered
        entry = await self._fold(session, system, model, covered, cut, deadline, "manual")
        if entry is not None:
            return entry
        since = " since its last compaction" if session.compression_state.get("summary") else ""
        if covered == len(messages):
            why = "it has no messages" if not since else "it has no message" + since
        elif keep is not None:
            why = f"it has {len(starts)} turn(s){since}, and keeping the last {keep} keeps them all"
        else:
            why = f"its {len(starts)} turn(s){since} fit in the part of the window kept verbatim"
        raise NothingToCompactError(session.session_id, why)

    def _start(self, session: SessionContext) -> int:
        """Where the messages after the summary begin in ``session.messages``; a
        state that no longer fits the history is dropped."""
        state = session.compression_state
        covered = state.get("covered", 0) - session.message_offset
        if not 0 <= covered <= len(session.messages):
            covered = 0
            state.pop("summary", None)
        return cast(int, covered)

    async def _fold(
        self,
        session: SessionContext,
        system: str | None,
        model: ModelProvider,
        covered: int,
        cut: int,
        deadline: float | None,
        trigger: str,
    ) -> dict[str, Any] | None:
        """Fold the messages from ``covered`` to ``cut`` into the summary; return the
        compaction, or None when there are none."""
        if cut <= covered:
            return None
        state = session.compression_state
        usage: dict[str, int] = {}
        limit = int(self.room(system) * SUMMARY_SHARE)
        older = session.messages[covered:cut]
        summary, method = await self._summarise(
            state.get("summary"), older, model, limit, deadline, usage, session.fragment_texts
        )
        now = now_ms()
        offset = session.message_offset
        state.update(
            summary=summary,
            covered=offset + cut,
            method=method,
            last_compressed_at=now,
            pending_compression=False,
        )
        number = session.metadata.get("compression_count", 0) + 1
        session.metadata["compression_count"] = number
        state["last_token_count"] = self.tokens(*self.view(session, system))
        entry = {
            "number": number,
            "at": now,
            "trigger": trigger,
            "method": method,
            "model": model.name,
            "from": offset + covered,
            "covered": offset + cut,
            "summary": summary,
            "usage": usage,
        }
        return entry

    async def _summarise(
        self,
        previous: str | None,
        older: list[dict[str, Any]],
        model: ModelProvider,
        limit: int,
        deadline: float | None,
        spent: dict[str, int],
        texts: dict[str, str] | None = None,
    ) -> tuple[str | None, str]:
        parts = []
        if previous:
            parts.append(f"[Earlier summary]\n{previous}")
        parts.append(f"[Conversation]\n{transcript(older, texts)}")
        request = ModelRequest(
            messages=[{"role": "user", "content": "\n\n".join(parts)}],
            system=SUMMARY_SYSTEM,
            deadline=deadline,
            purpose="summary",
            options={"max_tokens": max(32, limit)},
        )
        try:
            response = await model.generate(request)
        except (FolikoError, OSError, ValueError, RuntimeError):
            return previous, "truncation"
        for key, value in response.usage.items():
            spent[key] = spent.get(key, 0) + value
        summary = response.text.strip()
        if not summary:
            return previous, "truncation"
        return self._clip(summary, limit), "summary"

    def _clip(self, summary: str, limit: int) -> str:
        """A summary may take at most ``limit`` tokens; keep its newest part."""
        if self.count(summary) <= limit:
            return summary
        return "[…] " + summary[-max(0, limit * 4 - 4) :]
