"""The Anthropic Messages provider against a real HTTP server (SPEC F9, R6)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import orjson

from foliko_cli.models import build_model, model_spec
from foliko_cli.models.base import ModelRequest
from foliko_cli.service.facade import Foliko

from .fake_servers import (
    ANTHROPIC_KEY,
    ANTHROPIC_PATH,
    OPENAI_KEY,
    Reply,
    anthropic_message,
    anthropic_protocol_problems,
    anthropic_stream,
    openai_stream,
    sse,
    stored_bytes,
)

TOOL_USE = ("toolu_01A", "set_variable", {"key": "color", "value": "green"})


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def test_plain_reply_and_what_was_sent(run_foliko, fake_server, anthropic_env, show):
    fake_server.queue(anthropic_stream(["Hello", " from", " Claude"], usage=(25, 6)))

    result = run_foliko("chat", "-s", "a1", "--no-stream", "hi there", env=anthropic_env)

    assert result.returncode == 0, result.stderr
    assert result.stdout == b"Hello from Claude\n"
    assert result.stderr == b""
    (request,) = fake_server.requests
    assert request.path == ANTHROPIC_PATH
    assert request.headers["x-api-key"] == ANTHROPIC_KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    body = request.body
    assert body["model"] == "claude-x"
    assert body["max_tokens"] > 0
    assert body["messages"] == [{"role": "user", "content": [text("hi there")]}]
    assert "system" not in body
    assert {"get_session_info", "get_variable", "set_variable"} <= {
        t["name"] for t in body["tools"]
    }
    for tool in body["tools"]:
        assert set(tool) == {"name", "description", "input_schema"}
    reply = show("a1")["messages"][1]
    assert reply["content"] == "Hello from Claude"
    assert reply["model"] == "anthropic:claude-x"
    assert reply["usage"] == {"input_tokens": 25, "output_tokens": 6}


def test_streamed_reply_and_the_system_prompt(run_foliko, fake_server, anthropic_env):
    fake_server.queue(anthropic_stream(["Stre", "amed"]), anthropic_stream(["Again"]))

    first = run_foliko(
        "chat", "-s", "a", "--stream", "--system", "Be terse.", "go", env=anthropic_env
    )
    second = run_foliko("chat", "-s", "a", "--stream", "more", env=anthropic_env)

    assert first.returncode == 0, first.stderr
    assert first.stdout == b"Streamed\n"
    assert second.stdout == b"Again\n"
    for request in fake_server.requests:
        assert request.body["stream"] is True
        assert request.body["system"] == "Be terse."
        assert all(m["role"] in ("user", "assistant") for m in request.body["messages"])
        assert anthropic_problems(request) == []
    assert fake_server.requests[1].body["messages"] == [
        {"role": "user", "content": [text("go")]},
        {"role": "assistant", "content": [text("Streamed")]},
        {"role": "user", "content": [text("more")]},
    ]


def anthropic_problems(request) -> list[str]:
    return anthropic_protocol_problems(request.body["messages"])


def test_json_stream_events_with_a_tool_use(run_foliko, fake_server, anthropic_env):
    fake_server.queue(
        anthropic_stream(["Saving."], [TOOL_USE], usage=(30, 10)),
        anthropic_stream(["Saved", " green."], usage=(50, 4)),
    )

    result = run_foliko("chat", "-s", "a", "--json", "--stream", "I like green", env=anthropic_env)

    assert result.returncode == 0, result.stderr
    events = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert [e["type"] for e in events] == [
        "delta",
        "tool_call",
        "tool_result",
        "delta",
        "delta",
        "done",
    ]
    assert events[1] == {
        "type": "tool_call",
        "id": "toolu_01A",
        "name": "set_variable",
        "arguments": {"key": "color", "value": "green"},
    }
    assert events[2]["id"] == "toolu_01A"
    assert events[-1]["result"]["message"] == "Saved green."
    assert events[-1]["result"]["step_count"] == 2
    assert events[-1]["result"]["usage"] == {"input_tokens": 80, "output_tokens": 14}


def test_tool_use_round_trip(run_foliko, fake_server, anthropic_env, show):
    fake_server.queue(
        anthropic_stream(["Let me save that."], [TOOL_USE]),
        anthropic_stream(["Done."]),
    )

    result = run_foliko("chat", "-s", "t", "remember green", env=anthropic_env)

    assert result.returncode == 0, result.stderr
    assert result.stdout == b"Done.\n"
    sent = fake_server.requests[1].body["messages"]
    assert sent[0] == {"role": "user", "content": [text("remember green")]}
    assert sent[1] == {
        "role": "assistant",
        "content": [
            text("Let me save that."),
            {
                "type": "tool_use",
                "id": "toolu_01A",
                "name": "set_variable",
                "input": {"key": "color", "value": "green"},
            },
        ],
    }
    assert len(sent) == 3, "the tool result sits in the user message right after the tool use"
    assert sent[2]["role"] == "user"
    (result_block,) = sent[2]["content"]
    assert result_block["type"] == "tool_result"
    assert result_block["tool_use_id"] == "toolu_01A"
    assert orjson.loads(result_block["content"]) == {"key": "color", "value": "green", "ok": True}
    assert "is_error" not in result_block
    assert anthropic_protocol_problems(sent) == []
    shown = show("t")
    assert shown["variables"] == {"color": "green"}
    assert [m["role"] for m in shown["messages"]] == ["user", "assistant", "tool", "assistant"]

    fake_server.queue(anthropic_stream(["Green."]))
    again = run_foliko("chat", "-s", "t", "which colour?", env=anthropic_env)
    assert again.returncode == 0, again.stderr
    history = fake_server.requests[-1].body["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant", "user"]
    assert anthropic_protocol_problems(history) == []


def test_a_failing_tool_is_reported_as_an_error_result(run_foliko, fake_server, anthropic_env):
    fake_server.queue(
        anthropic_stream([], [("toolu_bad", "set_variable", {"value": 1})]),
        anthropic_stream(["Oops."]),
    )

    result = run_foliko("chat", "-s", "t", "break it", env=anthropic_env)

    assert result.returncode == 0, result.stderr
    (block,) = fake_server.requests[1].body["messages"][2]["content"]
    assert block["tool_use_id"] == "toolu_bad"
    assert block["is_error"] is True
    assert block["content"].startswith("error:")


def test_switching_from_echo_mid_session_sends_well_formed_history(
    run_foliko, fake_server, anthropic_env, show, seed
):
    seed("mix", "hello echo", '/tool set_variable {"key": "k", "value": 1}', "after the tool")
    echo_call_id = show("mix")["messages"][3]["tool_calls"][0]["id"]
    fake_server.queue(anthropic_stream(["claude here"]))

    result = run_foliko("chat", "-s", "mix", "now claude", env=anthropic_env)

    assert result.returncode == 0, result.stderr
    sent = fake_server.requests[0].body["messages"]
    assert anthropic_protocol_problems(sent) == []
    assert [m["role"] for m in sent] == ["user", "assistant"] * 4 + ["user"]
    assert sent[3]["content"][0]["id"] == echo_call_id
    assert sent[4]["content"][0]["tool_use_id"] == echo_call_id
    assert sent[-1] == {"role": "user", "content": [text("now claude")]}


def test_switching_from_openai_to_anthropic_keeps_tool_pairs(
    run_foliko, fake_server, openai_env, anthropic_env
):
    both = {**openai_env, **anthropic_env}
    call = ("call_xyz", "set_variable", {"key": "n", "value": 2})
    fake_server.queue(openai_stream([], [call]), openai_stream(["set"]), anthropic_stream(["ok"]))

    first = run_foliko("chat", "-s", "x", "-m", "openai:some-model", "set n", env=both)
    second = run_foliko("chat", "-s", "x", "-m", "anthropic:claude-x", "check n", env=both)

    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    sent = fake_server.requests[2].body["messages"]
    assert anthropic_protocol_problems(sent) == []
    assert sent[1]["content"] == [
        {"type": "tool_use", "id": "call_xyz", "name": "set_variable", "input": call[2]}
    ]
    assert sent[2]["content"][0]["tool_use_id"] == "call_xyz"


def test_an_error_event_mid_stream_fails_the_turn(
    run_foliko, fake_server, anthropic_env, seed, show
):
    seed("e", "first")
    events = anthropic_stream(["partial"]).events[:4]
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    fake_server.queue(Reply(events=[*events, sse(error, "error")]))

    result = run_foliko("chat", "-s", "e", "--stream", "second", env=anthropic_env)

    assert result.returncode == 1
    assert b"Overloaded" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert len(show("e")["messages"]) == 2, "the failed turn was not saved"


def test_the_key_is_never_stored_logged_or_printed(
    run_foliko, fake_server, anthropic_env, foliko_home: Path, monkeypatch, caplog
):
    fake_server.queue(anthropic_stream([], [TOOL_USE]), anthropic_stream(["fine"]))
    runs = [
        run_foliko("chat", "-s", "k", "--json", "--stream", "one", env=anthropic_env),
        run_foliko("sessions", "show", "k", "--json", env=anthropic_env),
        run_foliko("sessions", "export", "k", env=anthropic_env),
    ]
    for result in runs:
        assert result.returncode == 0, result.stderr
        assert ANTHROPIC_KEY.encode() not in result.stdout + result.stderr

    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    caplog.set_level(logging.DEBUG)
    fake_server.queue(anthropic_stream(["in process"]))
    with Foliko("sqlite", "anthropic:claude-x", home=foliko_home) as foliko:
        assert foliko.chat("k", "two").message == "in process"

    assert caplog.records, "logging was captured"
    assert ANTHROPIC_KEY not in caplog.text
    for log in caplog.records:
        assert ANTHROPIC_KEY not in log.getMessage() + repr(log.args)
    written = stored_bytes(foliko_home)
    assert b"in process" in written
    assert ANTHROPIC_KEY.encode() not in written
    assert OPENAI_KEY.encode() not in written


def test_provider_plain_json_answer_with_tool_use(fake_server):
    """``generate`` (no streaming): content blocks become text and tool calls."""
    env = {"ANTHROPIC_BASE_URL": fake_server.url, "ANTHROPIC_API_KEY": ANTHROPIC_KEY}
    model = build_model(model_spec("anthropic:claude-x", env=env), env)
    fake_server.queue(anthropic_message("Using a tool.", [TOOL_USE], usage=(70, 12)))
    history = [
        {"role": "user", "content": "first"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "t1", "name": "get_variable", "arguments": {"key": "a"}},
                {"id": "t2", "name": "get_variable", "arguments": {"key": "b"}},
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "name": "get_variable", "content": "A"},
        {"role": "tool", "tool_call_id": "t2", "name": "get_variable", "content": "B"},
        {"role": "user", "content": "then?"},
    ]

    response = asyncio.run(model.generate(ModelRequest(history, system="sys")))

    assert response.text == "Using a tool."
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [TOOL_USE]
    assert response.usage == {"input_tokens": 70, "output_tokens": 12}
    body = fake_server.requests[0].body
    assert "stream" not in body
    assert body["system"] == "sys"
    assert body["messages"][2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "A"},
            {"type": "tool_result", "tool_use_id": "t2", "content": "B"},
            text("then?"),
        ],
    }
    assert anthropic_protocol_problems(body["messages"]) == []
