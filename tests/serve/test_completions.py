"""Chat Completions (stateless, or a session's turn with X-Session-Id) and /v1/models."""

from __future__ import annotations

import json

import openai
import pytest

from .servers import run_cli


def sessions(http) -> list[str]:
    return [row["session_id"] for row in http.get("/v1/sessions").json()["data"]]


def test_stateless_completion_stores_nothing(client, http):
    before = sessions(http)
    reply = client.chat.completions.create(
        model="echo",
        messages=[
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": "earlier"},
            {"role": "assistant", "content": "earlier"},
            {"role": "user", "content": "now"},
        ],
    )
    assert reply.choices[0].message.content == "now"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage.total_tokens > 0
    assert sessions(http) == before


def test_with_a_session_header_the_history_is_stored(client, server):
    for text in ("first", "second"):
        reply = client.chat.completions.create(
            model="echo",
            messages=[{"role": "user", "content": text}],
            extra_headers={"X-Session-Id": "chat-sess"},
        )
        assert reply.choices[0].message.content == text
    shown = run_cli(server.home, "sessions", "show", "chat-sess", "--json")
    stored = json.loads(shown.stdout)
    assert [m["content"] for m in stored["messages"]] == ["first", "first", "second", "second"]


def test_the_stored_history_is_what_the_model_sees(client, server):
    """With X-Session-Id only the last user message is taken: earlier ones in the
    request are not stored twice."""
    client.chat.completions.create(
        model="echo",
        messages=[{"role": "user", "content": "a"}],
        extra_headers={"X-Session-Id": "only-last"},
    )
    client.chat.completions.create(
        model="echo",
        messages=[{"role": "user", "content": "ignored"}, {"role": "user", "content": "b"}],
        extra_headers={"X-Session-Id": "only-last"},
    )
    stored = json.loads(run_cli(server.home, "sessions", "show", "only-last", "--json").stdout)
    assert [m["content"] for m in stored["messages"] if m["role"] == "user"] == ["a", "b"]


def test_streamed_chunks_end_with_done(http):
    with http.stream(
        "POST",
        "/v1/chat/completions",
        json={
            "model": "echo",
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "stream me"}],
        },
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"]["total_tokens"] > 0


def test_sdk_stream_with_a_session(client, server):
    pieces = [
        chunk.choices[0].delta.content or ""
        for chunk in client.chat.completions.create(
            model="echo",
            messages=[{"role": "user", "content": "streamed and kept"}],
            stream=True,
            extra_headers={"X-Session-Id": "streamed-chat"},
        )
        if chunk.choices
    ]
    assert "".join(pieces) == "streamed and kept"
    stored = json.loads(run_cli(server.home, "sessions", "show", "streamed-chat", "--json").stdout)
    assert stored["messages"][-1]["content"] == "streamed and kept"


def test_client_tool_calls_and_their_results(client):
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    asked = client.chat.completions.create(
        model="echo", messages=[{"role": "user", "content": '/tool lookup {"q": 1}'}], tools=tools
    )
    choice = asked.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("lookup", {"q": 1})
    answered = client.chat.completions.create(
        model="echo",
        tools=tools,
        messages=[
            {"role": "user", "content": '/tool lookup {"q": 1}'},
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "found"},
        ],
    )
    assert answered.choices[0].message.content == "lookup returned: found"


def test_models_lists_echo(client):
    assert "echo" in [model.id for model in client.models.list().data]


def test_models_lists_the_configured_aliases(start_server, tmp_path):
    import httpx2 as httpx

    config = tmp_path / "config.toml"
    config.write_text('[models.fast]\nmodel = "openai:gpt-4o-mini"\n')
    server = start_server(env={"FOLIKO_CONFIG": str(config)})
    listed = httpx.get(server.url + "/v1/models").json()
    assert [m["id"] for m in listed["data"]] == ["echo", "fast"]
    assert httpx.get(server.url + "/v1/models/fast").json()["id"] == "fast"


def test_a_model_is_retrieved_by_name_and_an_unknown_one_is_a_404(client):
    assert client.models.retrieve("echo").id == "echo"
    assert client.models.retrieve("openai:gpt-4o-mini").id == "openai:gpt-4o-mini"
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("nosuch:model")
    assert caught.value.body["code"] == "model_not_found"
    assert "unknown model 'nosuch:model'" in caught.value.body["message"]


@pytest.mark.parametrize("asked", [{"logprobs": True}, {"logprobs": False, "top_logprobs": 3}])
def test_logprobs_are_refused_rather_than_left_out(client, asked):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="echo", messages=[{"role": "user", "content": "hi"}], **asked
        )
    assert caught.value.body["param"] == "logprobs"
    plain = client.chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "hi"}], logprobs=False
    )
    assert plain.choices[0].message.content == "hi"
