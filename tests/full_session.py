"""A session holding everything a session can: the export tests' subject.

Every role; tool calls and their results (one an error); an image attached
with its bytes and a text file fenced into its message; usage, cost,
duration, model and finish reason on the answers; request and trace ids and
times on every message; variables of every JSON type; metadata with a title,
a fork origin and keys foliko does not know; a compression summary. Plus what
ChatGPT's and OpenAI's formats can carry of it.
"""

from __future__ import annotations

from typing import Any

from models.images import png

from foliko_cli.messages.attachments import classify, fenced
from foliko_cli.messages.record import SessionRecord

T0 = 1_700_000_000_000
IMAGE = classify("map.png", png(2, 2), label="map.png").part
NOTES = {
    "type": "text",
    "name": "notes.md",
    "media_type": "text/markdown",
    "size": 11,
    "sha256": "0" * 64,
}


def _turn(at: int, request: str) -> dict[str, Any]:
    return {"created_at": at, "request_id": request, "trace_id": request * 4}


def _answer(at: int, request: str, **extra: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        **_turn(at, request),
        "model": "openai:gpt-4o",
        "usage": {"input_tokens": 40, "output_tokens": 7, "cached_tokens": 8},
        "duration_ms": 812,
        "cost": 0.00042,
        "finish_reason": "stop",
        **extra,
    }


def full_record(session_id: str = "trip ✓ 1") -> SessionRecord:
    messages = [
        {"role": "system", "content": "Be terse.", **_turn(T0, "r1")},
        {
            "role": "user",
            "content": "Plan a trip, see " + fenced("notes.md", "day 1: Asakusa"),
            **_turn(T0 + 1, "r1"),
            "attachments": [IMAGE, NOTES],
        },
        _answer(
            T0 + 2,
            "r1",
            content="",
            finish_reason="tool_calls",
            tool_calls=[
                {"id": "call_a", "name": "search", "arguments": {"q": "Tokyo", "n": 3}},
                {"id": "call_b", "name": "weather", "arguments": {"city": "Tokyo"}},
            ],
        ),
        {
            "role": "tool",
            "content": "3 hotels",
            **_turn(T0 + 3, "r1"),
            "tool_call_id": "call_a",
            "name": "search",
            "is_error": False,
        },
        {
            "role": "tool",
            "content": "error: no forecast",
            **_turn(T0 + 4, "r1"),
            "tool_call_id": "call_b",
            "name": "weather",
            "is_error": True,
        },
        _answer(T0 + 5, "r1", content="Here is a plan:\n\n1. Asakusa\n"),
        {"role": "user", "content": "  Größer? ✓ 東京  ", **_turn(T0 + 6, "r2")},
        _answer(T0 + 7, "r2", content="Ja.", model="anthropic:claude-sonnet-4"),
    ]
    return SessionRecord(
        session_id,
        messages=messages,
        variables={
            "colour": "blue",
            "version": "1.10",
            "retries": 3,
            "big": 2**63 - 1,
            "ratio": 0.1,
            "on": True,
            "none": None,
            "nested": [1, {"a": [None, "ü"]}],
        },
        metadata={
            "created_at": T0,
            "last_active": T0 + 7,
            "message_count": len(messages),
            "compression_count": 1,
            "title": "Tokyo trip",
            "forked_from": "trip 0",
            "fork": {"from": "trip 0", "turns": 1},
            "unknown_to_foliko": {"kept": [1, 2.5, "x"]},
        },
        compression_state={
            "summary": "The user plans a trip.",
            "covered": 2,
            "last_compressed_at": T0 + 3,
            "last_token_count": 1234,
            "pending_compression": False,
        },
        saved_at=T0 + 9,
    )


def chatgpt_view(record: SessionRecord) -> list[dict[str, Any]]:
    """The messages of ``record`` as they come back from its ChatGPT export: the
    user's and the answers' text (answers with their model), their times and
    the files attached by name, type and size; system prompts, tool calls and
    tool results stay in the export for its other readers."""
    kept = []
    for message in record.messages:
        files = [
            {
                "type": "image" if part["type"] == "image" else "file",
                "name": part["name"],
                "media_type": part["media_type"],
                "size": part["size"],
            }
            for part in message.get("attachments") or ()
        ]
        if message["role"] not in ("user", "assistant") or not (
            message["content"].strip() or files
        ):
            continue
        view = {k: message[k] for k in ("role", "content", "created_at")}
        if files:
            view["attachments"] = files
        if message["role"] == "assistant":
            view["model"] = message["model"]
        kept.append(view)
    return kept
