"""The OpenAI chat-completions provider against a real HTTP server (SPEC F9, R6).

Most tests run the installed CLI as a real process pointed at the fake
server; a few run in-process to see log records and provider-level answers.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import orjson
import pytest
from trusting import trust

from foliko_cli.engine.compression import SUMMARY_HEADING, SUMMARY_SYSTEM
from foliko_cli.errors import ModelError
from foliko_cli.models import build_model, model_spec
from foliko_cli.models.base import ModelRequest
from foliko_cli.service.facade import Foliko

from .fake_servers import (
    OPENAI_KEY,
    OPENAI_PATH,
    Recorded,
    Reply,
    error_reply,
    openai_message,
    openai_protocol_problems,
    openai_stream,
    run_in,
    stored_bytes,
)

TOOL_CALL = ("call_abc123", "set_variable", {"key": "color", "value": "blue"})


def tool_names(body: dict) -> list[str]:
    return sorted(tool["function"]["name"] for tool in body["tools"])


def test_plain_reply_and_what_was_sent(run_foliko, fake_server, openai_env, show):
    fake_server.queue(openai_stream(["Hello", " from", " the fake server"], usage=(12, 7)))

    result = run_foliko("chat", "-s", "s1", "--no-stream", "hi there", env=openai_env)

    assert result.returncode == 0, result.stderr
    assert result.stdout == b"Hello from the fake server\n"
    assert result.stderr == b"", "no echo announcement, nothing else on stderr"
    (request,) = fake_server.requests
    assert request.path == OPENAI_PATH
    assert request.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert request.headers["content-type"] == "application/json"
    assert request.body["model"] == "some-model"
    assert request.body["messages"] == [{"role": "user", "content": "hi there"}]
    assert {"get_session_info", "get_variable", "set_variable"} <= set(tool_names(request.body))
    for tool in request.body["tools"]:
        assert tool["type"] == "function"
        assert tool["function"]["parameters"]["type"] == "object"
        assert tool["function"]["description"]
    shown = show("s1")
    assert [m["role"] for m in shown["messages"]] == ["user", "assistant"]
    reply = shown["messages"][1]
    assert reply["content"] == "Hello from the fake server"
    assert reply["model"] == "openai:some-model"
    assert reply["usage"] == {"input_tokens": 12, "output_tokens": 7}


def test_streamed_reply_is_written_as_it_arrives(run_foliko, fake_server, openai_env, show):
    fake_server.queue(openai_stream(["Str", "eam", "ed!"], usage=(3, 4)))

    result = run_foliko("chat", "-s", "s1", "--stream", "go", env=openai_env)

    assert result.returncode == 0, result.stderr
    assert result.stdout == b"Streamed!\n"
    (request,) = fake_server.requests
    assert request.body["stream"] is True
    assert request.body["stream_options"] == {"include_usage": True}
    assert show("s1")["messages"][1]["usage"] == {"input_tokens": 3, "output_tokens": 4}


def test_json_output_carries_the_usage(run_foliko, fake_server, openai_env):
    fake_server.queue(openai_stream(["fine"], usage=(21, 2)))

    result = run_foliko("chat", "-s", "s1", "--json", "how are you", env=openai_env)

    assert result.returncode == 0, result.stderr
    data = orjson.loads(result.stdout)
    assert data["success"] is True
    assert data["message"] == "fine"
    assert data["step_count"] == 1
    assert data["usage"] == {"input_tokens": 21, "output_tokens": 2}
    assert data["model"] == "openai:some-model"


def test_json_stream_writes_ndjson_events_ending_with_done(run_foliko, fake_server, openai_env):
    fake_server.queue(
        openai_stream([], [TOOL_CALL], usage=(10, 3)),
        openai_stream(["Saved ", "it."], usage=(20, 4)),
    )

    result = run_foliko("chat", "-s", "s1", "--json", "--stream", "remember blue", env=openai_env)

    assert result.returncode == 0, result.stderr
    events = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert [e["type"] for e in events] == ["tool_call", "tool_result", "delta", "delta", "done"]
    call, outcome, *deltas, done = events
    assert call == {
        "type": "tool_call",
        "id": "call_abc123",
        "name": "set_variable",
        "arguments": {"key": "color", "value": "blue"},
    }
    assert outcome["id"] == "call_abc123"
    assert outcome["is_error"] is False
    assert orjson.loads(outcome["content"]) == {"key": "color", "value": "blue", "ok": True}
    assert "".join(d["text"] for d in deltas) == "Saved it."
    assert done["result"]["message"] == "Saved it."
    assert done["result"]["step_count"] == 2
    assert done["result"]["usage"] == {"input_tokens": 30, "output_tokens": 7}


def test_tool_call_round_trip(run_foliko, fake_server, openai_env, show):
    fake_server.queue(openai_stream([], [TOOL_CALL]), openai_stream(["Stored."]))

    result = run_foliko("chat", "-s", "t", "remember that I like blue", env=openai_env)

    assert result.returncode == 0, result.stderr
    assert result.stdout == b"Stored.\n"
    first, second = fake_server.requests
    assert first.body["messages"] == [{"role": "user", "content": "remember that I like blue"}]
    sent = second.body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[0] == first.body["messages"][0]
    (call,) = sent[1]["tool_calls"]
    assert sent[1]["content"] is None
    assert call["id"] == "call_abc123"
    assert call["type"] == "function"
    assert call["function"]["name"] == "set_variable"
    assert orjson.loads(call["function"]["arguments"]) == {"key": "color", "value": "blue"}
    assert sent[2]["tool_call_id"] == "call_abc123"
    assert orjson.loads(sent[2]["content"]) == {"key": "color", "value": "blue", "ok": True}
    assert openai_protocol_problems(sent) == []

    shown = show("t")
    assert shown["variables"] == {"color": "blue"}
    stored = shown["messages"]
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[1]["tool_calls"] == [
        {
            "id": "call_abc123",
            "name": "set_variable",
            "arguments": {"key": "color", "value": "blue"},
        }
    ]
    assert stored[2]["tool_call_id"] == "call_abc123"
    assert stored[3]["content"] == "Stored."

    fake_server.queue(openai_stream(["Blue."]))
    again = run_foliko("chat", "-s", "t", "what colour?", env=openai_env)
    assert again.returncode == 0, again.stderr
    history = fake_server.requests[-1].body["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant", "user"]
    assert openai_protocol_problems(history) == []


def test_two_tool_calls_in_one_reply_each_get_their_result(run_foliko, fake_server, openai_env):
    calls = [
        ("call_1", "set_variable", {"key": "a", "value": 1}),
        ("call_2", "get_variable", {"key": "a"}),
    ]
    fake_server.queue(openai_stream([], calls), openai_stream(["done"]))

    result = run_foliko("chat", "-s", "t", "two at once", env=openai_env)

    assert result.returncode == 0, result.stderr
    sent = fake_server.requests[1].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool"]
    assert [c["id"] for c in sent[1]["tool_calls"]] == ["call_1", "call_2"]
    assert [m["tool_call_id"] for m in sent[2:]] == ["call_1", "call_2"]
    assert orjson.loads(sent[3]["content"]) == {"key": "a", "value": 1, "exists": True}
    assert openai_protocol_problems(sent) == []


def test_a_failing_tool_goes_back_to_the_model_as_a_result(run_foliko, fake_server, openai_env):
    bad = ("call_bad", "set_variable", {"key": ""})
    fake_server.queue(openai_stream([], [bad]), openai_stream(["I see an error."]))

    result = run_foliko("chat", "-s", "t", "break it", env=openai_env)

    assert result.returncode == 0, result.stderr
    tool_message = fake_server.requests[1].body["messages"][2]
    assert tool_message["tool_call_id"] == "call_bad"
    assert tool_message["content"].startswith("error:")


def test_switching_from_echo_mid_session_sends_well_formed_history(
    run_foliko, fake_server, openai_env, show
):
    assert (
        run_foliko("chat", "-s", "mix", "-m", "echo", "hello echo", env=openai_env).returncode == 0
    )
    tool = '/tool set_variable {"key": "k", "value": 1}'
    assert run_foliko("chat", "-s", "mix", "-m", "echo", tool, env=openai_env).returncode == 0
    echo_call_id = show("mix")["messages"][3]["tool_calls"][0]["id"]
    fake_server.queue(openai_stream(["now it is me"]))

    result = run_foliko("chat", "-s", "mix", "and now openai", env=openai_env)

    assert result.returncode == 0, result.stderr
    (request,) = fake_server.requests
    sent = request.body["messages"]
    assert [m["role"] for m in sent] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert openai_protocol_problems(sent) == []
    assert sent[3]["tool_calls"][0]["id"] == echo_call_id
    assert sent[4]["tool_call_id"] == echo_call_id
    assert sent[0] == {"role": "user", "content": "hello echo"}
    assert sent[-1] == {"role": "user", "content": "and now openai"}
    models = [m.get("model") for m in show("mix")["messages"] if m["role"] == "assistant"]
    assert models == ["echo", "echo", "echo", "openai:some-model"]


def test_system_prompt_goes_first(run_foliko, fake_server, openai_env):
    fake_server.queue(openai_stream(["ok"]), openai_stream(["ok again"]))

    first = run_foliko("chat", "-s", "sys", "--system", "Be terse.", "hi", env=openai_env)
    second = run_foliko("chat", "-s", "sys", "more", env=openai_env)

    assert first.returncode == 0 and second.returncode == 0
    for request in fake_server.requests:
        assert request.body["messages"][0] == {"role": "system", "content": "Be terse."}
        assert openai_protocol_problems(request.body["messages"]) == []
    assert [m["role"] for m in fake_server.requests[1].body["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
    ]


def test_a_local_server_needs_no_key(run_foliko, fake_server):
    fake_server.queue(openai_stream(["local"]))
    env = {"OPENAI_BASE_URL": f"{fake_server.url}/v1", "FOLIKO_MODEL": "openai:local-model"}

    result = run_foliko("chat", "-s", "l", "hi", env=env)

    assert result.returncode == 0, result.stderr
    assert result.stdout == b"local\n"
    assert "authorization" not in fake_server.requests[0].headers


def test_ollama_uses_its_host_and_the_openai_protocol(run_foliko, fake_server):
    fake_server.queue(openai_stream(["llama says hi"]))
    env = {"OLLAMA_HOST": f"127.0.0.1:{fake_server.port}", "FOLIKO_MODEL": "ollama:llama3.2"}

    result = run_foliko("chat", "-s", "o", "hi", env=env)

    assert result.returncode == 0, result.stderr
    (request,) = fake_server.requests
    assert request.path == OPENAI_PATH
    assert request.body["model"] == "llama3.2"
    assert "authorization" not in request.headers


def test_a_config_alias_brings_its_base_url_and_key(fake_server, tmp_path: Path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "foliko.toml").write_text(
        "[models.fast]\n"
        'model = "openai:gpt-4o-mini"\n'
        f'base_url = "{fake_server.url}/v1"\n'
        'api_key_env = "MY_KEY"\n'
        "context_window = 1000\n"
    )
    trust(project / "foliko.toml")
    fake_server.queue(openai_stream(["fast answer"]))

    result = run_in(project, "chat", "-s", "a", "-m", "fast", "hi", env={"MY_KEY": "alias-key-9"})

    assert result.returncode == 0, result.stderr
    assert result.stdout == b"fast answer\n"
    (request,) = fake_server.requests
    assert request.headers["authorization"] == "Bearer alias-key-9"
    assert request.body["model"] == "gpt-4o-mini"


def test_an_untrusted_project_alias_never_gets_the_key(fake_server, tmp_path: Path):
    """A cloned repository's foliko.toml names a server of its own and the user's
    key: nothing is sent there until the user trusts the file."""
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "foliko.toml").write_text(
        'model = "fast"\n[models.fast]\nmodel = "openai:gpt-4o-mini"\n'
        f'base_url = "{fake_server.url}/v1"\napi_key_env = "OPENAI_API_KEY"\n'
    )
    env = {"OPENAI_API_KEY": "sk-user-secret", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}

    for words in (["chat", "-s", "a", "hi"], ["chat", "-s", "a", "-m", "fast", "hi"]):
        result = run_in(project, *words, env=env)
        assert result.returncode == 2, result.stderr
        assert b"foliko config trust" in result.stderr
        assert b"unknown model 'fast'" in result.stderr
    listed = run_in(project, "models", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert fake_server.requests == [] and fake_server.probes == []

    trust(project / "foliko.toml")
    fake_server.queue(openai_stream(["trusted now"]))
    result = run_in(project, "chat", "-s", "a", "hi", env=env)
    assert result.stdout == b"trusted now\n", result.stderr
    (request,) = fake_server.requests
    assert request.headers["authorization"] == "Bearer sk-user-secret"


def test_the_key_is_never_stored_or_printed(run_foliko, fake_server, openai_env, foliko_home):
    fake_server.queue(
        openai_stream([], [TOOL_CALL]),
        openai_stream(["first"]),
        openai_stream(["second"]),
    )
    runs = [
        run_foliko("chat", "-s", "k", "--json", "--stream", "one", env=openai_env),
        run_foliko("chat", "-s", "k", "two", env=openai_env),
        run_foliko("sessions", "show", "k", env=openai_env),
        run_foliko("sessions", "show", "k", "--json", env=openai_env),
        run_foliko("sessions", "export", "k", env=openai_env),
        run_foliko("models", "list", "--json", env=openai_env),
    ]

    for result in runs:
        assert result.returncode == 0, result.stderr
        assert OPENAI_KEY.encode() not in result.stdout
        assert OPENAI_KEY.encode() not in result.stderr
    assert all(r.headers["authorization"] == f"Bearer {OPENAI_KEY}" for r in fake_server.requests)
    written = stored_bytes(foliko_home)
    assert b"first" in written or b"second" in written, "the session is stored under FOLIKO_HOME"
    assert OPENAI_KEY.encode() not in written


def test_in_process_logs_never_contain_the_key(fake_server, monkeypatch, caplog, foliko_home: Path):
    monkeypatch.setenv("OPENAI_BASE_URL", f"{fake_server.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    fake_server.queue(
        openai_stream([], [TOOL_CALL]),
        openai_stream(["done"]),
        error_reply(401, f"Incorrect API key provided: {OPENAI_KEY}"),
    )
    caplog.set_level(logging.DEBUG)
    events: list[dict] = []

    with Foliko("sqlite", "openai:some-model", home=foliko_home) as foliko:
        result = foliko.chat("s", "set it", on_event=events.append)
        with pytest.raises(ModelError) as failure:
            foliko.chat("s", "again")
        record = foliko.get_session("s")

    assert result.message == "done"
    assert [e["type"] for e in events] == ["tool_call", "tool_result", "delta"]
    assert record.variables == {"color": "blue"}
    assert len(record.messages) == 4, "the failed turn was not saved"
    assert OPENAI_KEY not in str(failure.value)
    assert "OPENAI_API_KEY" in str(failure.value)
    assert any(fake_server.url in r.getMessage() for r in caplog.records), "logging was captured"
    for log in caplog.records:
        assert OPENAI_KEY not in log.getMessage()
        assert OPENAI_KEY not in repr(log.args)
        assert OPENAI_KEY not in (log.exc_text or "")
    assert OPENAI_KEY not in caplog.text


def test_a_long_session_is_summarised_with_a_plain_json_request(
    fake_server, monkeypatch, foliko_home: Path
):
    """Compression against a real provider: the summary is a non-streamed request."""
    monkeypatch.setenv("OPENAI_BASE_URL", f"{fake_server.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)

    def is_summary(request: Recorded) -> bool:
        return request.body["messages"][0] == {"role": "system", "content": SUMMARY_SYSTEM}

    def answer(request: Recorded) -> Reply:
        if is_summary(request):
            return openai_message("SUMMARY-OF-EARLIER-TURNS", usage=(100, 5))
        return openai_stream([f"reply number {len(fake_server.requests)} " + "x" * 60])(request)

    fake_server.default = answer

    with Foliko("sqlite", "openai:some-model", home=foliko_home, context_window=500) as foliko:
        for turn in range(12):
            foliko.chat(
                "long", f"turn {turn}: " + "lorem ipsum dolor sit amet " * 3, on_event=print
            )
        record = foliko.get_session("long")

    assert any(r.body.get("stream") for r in fake_server.requests), "turns stream"
    summaries = [r for r in fake_server.requests if is_summary(r)]
    assert summaries, "the session outgrew 70% of 500 tokens and was summarised"
    first = summaries[0].body
    assert "stream" not in first
    assert first["messages"][0] == {"role": "system", "content": SUMMARY_SYSTEM}
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert "turn 0: lorem ipsum" in first["messages"][1]["content"]
    assert "tools" not in first
    assert len(record.messages) == 24, "the stored history is whole"
    assert record.metadata["compression_count"] == len(summaries)
    assert record.compression_state["method"] == "summary"
    assert record.compression_state["summary"] == "SUMMARY-OF-EARLIER-TURNS"
    last = fake_server.requests[-1].body["messages"]
    assert last[0]["role"] == "system"
    assert f"{SUMMARY_HEADING}\nSUMMARY-OF-EARLIER-TURNS" in last[0]["content"]
    covered = record.compression_state["covered"]
    assert last[1:] == [
        {"role": m["role"], "content": m["content"]} for m in record.messages[covered:-1]
    ]
    assert openai_protocol_problems(last) == []


def test_provider_plain_json_answer_with_tool_calls(fake_server):
    """``generate`` (no streaming) maps the JSON reply to the canonical response."""
    env = {"OPENAI_BASE_URL": f"{fake_server.url}/v1", "OPENAI_API_KEY": OPENAI_KEY}
    model = build_model(model_spec("openai:some-model", env=env), env)
    fake_server.queue(openai_message("thinking", [TOOL_CALL], usage=(40, 9)))
    history = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c0", "name": "get_variable", "arguments": {"key": "x"}}],
        },
        {"role": "tool", "tool_call_id": "c0", "name": "get_variable", "content": "{}"},
        {"role": "assistant", "content": "nothing"},
        {"role": "user", "content": "set it"},
    ]
    tools = [{"name": "set_variable", "description": "d", "input_schema": {"type": "object"}}]

    response = asyncio.run(model.generate(ModelRequest(history, system="sys", tools=tools)))

    assert response.text == "thinking"
    ((call_id, name, arguments),) = [(c.id, c.name, c.arguments) for c in response.tool_calls]
    assert (call_id, name, arguments) == TOOL_CALL
    assert response.usage == {"input_tokens": 40, "output_tokens": 9}
    assert response.finish_reason == "tool_calls"
    body = fake_server.requests[0].body
    assert "stream" not in body
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "set_variable",
                "description": "d",
                "parameters": {"type": "object"},
            },
        }
    ]
    assert body["messages"][0] == {"role": "system", "content": "sys"}
    assert openai_protocol_problems(body["messages"]) == []


def test_dry_run_uses_the_alias_context_window_and_calls_nothing(
    fake_server, tmp_path: Path, seed, foliko_home: Path
):
    project = tmp_path / "project"
    project.mkdir()
    (project / "foliko.toml").write_text(
        "[models.small]\n"
        'model = "openai:gpt-4o-mini"\n'
        f'base_url = "{fake_server.url}/v1"\n'
        "context_window = 1000\n"
    )
    trust(project / "foliko.toml")
    seed("d", *(f"message {n}: " + "words " * 20 for n in range(20)))

    result = run_in(project, "chat", "-s", "d", "-m", "small", "--dry-run", "next?")

    assert result.returncode == 0, result.stderr
    view = orjson.loads(result.stdout)
    assert view["model"] == "openai:gpt-4o-mini"
    assert view["system"].startswith(SUMMARY_HEADING)
    assert view["messages"][0]["role"] == "user"
    assert view["messages"][-1] == {"role": "user", "content": "next?"}
    assert len(view["messages"]) < 41
    assert fake_server.requests == [], "a dry run calls no model, not even to summarise"


def test_no_stream_works_with_a_server_that_only_answers_plain_json(
    run_foliko, fake_server, openai_env
):
    fake_server.default = lambda request: (
        error_reply(400, "Cannot use tools with stream")
        if request.body.get("stream")
        else openai_message("plain answer")
    )

    result = run_foliko("chat", "-s", "p", "--no-stream", "hi", env=openai_env)

    assert result.returncode == 0, result.stderr
    assert result.stdout == b"plain answer\n"


def test_credentials_in_the_base_url_are_never_printed_or_logged(
    run_foliko, fake_server, monkeypatch, caplog, foliko_home: Path
):
    secret = "hunter2-url-password"
    base_url = f"http://bob:{secret}@127.0.0.1:{fake_server.port}/v1"
    env = {"OPENAI_BASE_URL": base_url, "FOLIKO_MODEL": "openai:some-model"}
    fake_server.queue(error_reply(401, "who are you"), openai_stream(["in process"]))

    failed = run_foliko("chat", "-s", "u", "hi", env=env)
    listed = run_foliko("models", "list", "--json", env=env)
    monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    caplog.set_level(logging.DEBUG)
    with Foliko("memory", "openai:some-model", home=foliko_home) as foliko:
        assert foliko.chat("u", "hi").message == "in process"

    assert fake_server.requests[0].headers["authorization"].startswith("Basic ")
    assert failed.returncode == 1
    assert secret.encode() not in failed.stderr
    assert secret.encode() not in listed.stdout
    assert secret not in caplog.text
