"""Bounded replies, model options, structured output, and what a turn cost."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from foliko_cli.engine.framework import Framework
from foliko_cli.engine.handler import AgentChatHandler, default_max_tokens
from foliko_cli.errors import InvalidReplyError, UsageError
from foliko_cli.messages.schema import load_schema
from foliko_cli.models import build_model, model_spec
from foliko_cli.models.anthropic import REPLY_TOOL
from foliko_cli.models.base import ModelRequest
from foliko_cli.service.facade import Foliko

from .fake_servers import openai_message, openai_stream
from .mock_transport import Script, chat_reply, json_response

ENV = {"OPENAI_BASE_URL": "http://llm.test/v1", "OPENAI_API_KEY": "k"}
CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


def provider(script: Script, name="openai:local-model", configured=None, env=ENV):
    return build_model(model_spec(name, configured, env), env, transport=script.transport)


def turn(model, home: Path, message="hi", **options):
    with Foliko("sqlite", model, home=home) as foliko:
        result = foliko.chat("s", message, **options)
        return result, foliko.get_session("s")


# bounded replies


@pytest.mark.parametrize(("window", "bound"), [(1024, 256), (8192, 2048), (200_000, 4096)])
def test_the_default_bound_is_a_quarter_of_the_window_at_most_4096(window, bound):
    assert default_max_tokens(window) == bound


def test_every_request_is_bounded_by_default(foliko_home: Path):
    script = Script()
    script.on(CHAT, chat_reply())
    configured = {"local": {"model": "openai:local-model", "context_window": 2000}}

    turn(provider(script, "local", configured), foliko_home)

    assert script.bodies(CHAT)[0]["max_tokens"] == 500


def test_the_bound_comes_from_the_alias_then_from_the_turn(foliko_home: Path):
    script = Script()
    script.on(CHAT, chat_reply())
    configured = {"local": {"model": "openai:local-model", "max_tokens": 77}}
    model = provider(script, "local", configured)

    turn(model, foliko_home)
    turn(model, foliko_home, options={"max_tokens": 5})

    assert [b["max_tokens"] for b in script.bodies(CHAT)] == [77, 5]


def test_hosted_openai_gets_max_completion_tokens(foliko_home: Path):
    script = Script()
    script.on(CHAT, chat_reply())
    env = {"OPENAI_API_KEY": "k"}

    turn(provider(script, "openai:gpt-4o", env=env), foliko_home)

    body = script.bodies(CHAT)[0]
    assert body["max_completion_tokens"] == 4096
    assert "max_tokens" not in body


def test_summaries_are_bounded_too(foliko_home: Path):
    script = Script()
    script.on(CHAT, chat_reply("fine"))
    model = provider(script)
    with Foliko("sqlite", model, home=foliko_home, context_window=400) as foliko:
        for index in range(3):
            foliko.chat("s", f"{index} " + "word " * 80)
    summaries = [b for b in script.bodies(CHAT) if "compress" in b["messages"][0]["content"]]
    assert summaries, "the history was summarised"
    assert all(0 < b["max_tokens"] <= 400 * 0.15 for b in summaries)


# options


def test_options_from_the_alias_and_the_turn_reach_the_server(foliko_home: Path):
    script = Script()
    script.on(CHAT, chat_reply())
    configured = {"t": {"model": "openai:local-model", "options": {"temperature": 0.2, "seed": 1}}}
    model = provider(script, "t", configured)

    turn(model, foliko_home)
    turn(model, foliko_home, options={"seed": 7, "stop": ["END"], "top_p": 0.5})

    first, second = script.bodies(CHAT)
    assert (first["temperature"], first["seed"]) == (0.2, 1)
    assert (second["temperature"], second["seed"]) == (0.2, 7)
    assert (second["stop"], second["top_p"]) == (["END"], 0.5)


def test_anthropic_gets_stop_as_stop_sequences(foliko_home: Path):
    script = Script()
    reply = {"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"}
    script.on(MESSAGES, json_response({**reply, "usage": {"input_tokens": 3, "output_tokens": 1}}))
    env = {"ANTHROPIC_BASE_URL": "http://a.test", "ANTHROPIC_API_KEY": "k"}

    turn(provider(script, "anthropic:claude-x", env=env), foliko_home, options={"stop": "END"})

    body = script.bodies(MESSAGES)[0]
    assert body["stop_sequences"] == ["END"]
    assert body["max_tokens"] == 4096
    assert "stop" not in body


def test_the_cli_parses_option_values(run_foliko, fake_server, openai_env):
    fake_server.queue(openai_stream(["fine"]))

    result = run_foliko(
        "chat", "-s", "o", "-o", "temperature=0.2", "-o", "stop=[\"END\"]",
        "--option", "user=bob", "-o", "logprobs=true", "-o", "max_tokens=9", "hi",
        env=openai_env,
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    body = fake_server.requests[0].body
    assert body["temperature"] == 0.2
    assert body["stop"] == ["END"]
    assert body["user"] == "bob"
    assert body["logprobs"] is True
    assert body["max_tokens"] == 9


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        (
            "max_tokens=abc",
            "model option max_tokens must be a whole number from 1 to 2,147,483,647, not 'abc'",
        ),
        ("max_tokens=0", "max_tokens must be a whole number from 1 to 2,147,483,647"),
        (f"max_tokens={2**63}", "max_tokens must be a whole number from 1 to 2,147,483,647"),
        (f"max_tokens={2**63 - 1}", "max_tokens must be a whole number from 1 to 2,147,483,647"),
        (f"max_tokens={2**31}", "max_tokens must be a whole number from 1 to 2,147,483,647"),
        (f"top_k={2**40}", "top_k must be a whole number from 1 to 2,147,483,647"),
        ("temperature=hot", "model option temperature must be a number of 0 or more, not 'hot'"),
        ("top_p=2", "top_p must be a number from 0 to 1"),
        ("seed=1.5", "seed must be a whole number"),
        ("stop=3", "stop must be a string or a list of strings"),
        ("novalue", "KEY=VALUE"),
    ],
)
def test_bad_options_are_usage_errors(run_foliko, fake_server, openai_env, option, expected):
    result = run_foliko("chat", "-s", "o", "-o", option, "hi", env=openai_env)

    assert result.returncode == 2
    assert expected in result.stderr.decode()
    assert fake_server.requests == []


def test_dry_run_shows_the_options(run_foliko):
    result = run_foliko("chat", "-s", "d", "--dry-run", "-o", "seed=3", "hi")

    assert result.returncode == 0, result.stderr
    shown = orjson.loads(result.stdout)
    assert shown["options"] == {"max_tokens": 2048, "seed": 3}


# structured output


def test_openai_gets_the_schema_as_response_format(foliko_home: Path):
    script = Script()
    script.on(CHAT, chat_reply('{"name": "Ada", "age": 36}'))

    result, _ = turn(provider(script), foliko_home, schema=PERSON)

    body = script.bodies(CHAT)[0]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "reply", "schema": PERSON},
    }
    assert orjson.loads(result.message) == {"name": "Ada", "age": 36}


@pytest.mark.parametrize(
    ("reply", "expected"),
    [('{"name": "Ada", "age": "old"}', "at age: 'old' is not of type 'integer'"),
     ("Ada is 36", "not JSON")],
)  # fmt: skip
def test_a_reply_that_breaks_the_schema_fails_and_saves_nothing(foliko_home, reply, expected):
    script = Script()
    script.on(CHAT, chat_reply(reply))
    model = provider(script)
    with Foliko("sqlite", model, home=foliko_home) as foliko:
        with pytest.raises(InvalidReplyError) as failure:
            foliko.chat("s", "who?", schema=PERSON)
        assert foliko.session_ids() == []
    assert expected in str(failure.value)
    assert failure.value.exit_code == 1


def test_anthropic_answers_through_a_forced_reply_tool(foliko_home: Path):
    script = Script()
    use = {"type": "tool_use", "id": "t1", "name": REPLY_TOOL, "input": {"name": "Ada", "age": 36}}
    script.on(MESSAGES, json_response({"content": [use], "stop_reason": "tool_use"}))
    env = {"ANTHROPIC_BASE_URL": "http://a.test", "ANTHROPIC_API_KEY": "k"}

    result, record = turn(
        provider(script, "anthropic:claude-x", env=env), foliko_home, schema=PERSON
    )

    body = script.bodies(MESSAGES)[0]
    assert body["tool_choice"] == {"type": "tool", "name": REPLY_TOOL}
    assert body["tools"][-1]["input_schema"] == PERSON
    assert orjson.loads(result.message) == {"name": "Ada", "age": 36}
    assert "tool_calls" not in record.messages[-1]
    assert result.step_count == 1


def test_anthropic_wraps_a_schema_that_is_not_an_object(foliko_home: Path):
    script = Script()
    use = {"type": "tool_use", "id": "t1", "name": REPLY_TOOL, "input": {"value": [1, 2]}}
    script.on(MESSAGES, json_response({"content": [use], "stop_reason": "tool_use"}))
    env = {"ANTHROPIC_BASE_URL": "http://a.test", "ANTHROPIC_API_KEY": "k"}
    numbers = {"type": "array", "items": {"type": "integer"}}

    result, _ = turn(provider(script, "anthropic:claude-x", env=env), foliko_home, schema=numbers)

    assert script.bodies(MESSAGES)[0]["tools"][-1]["input_schema"]["properties"]["value"] == numbers
    assert orjson.loads(result.message) == [1, 2]


def test_the_cli_prints_a_valid_structured_reply_whole(
    run_foliko, fake_server, openai_env, tmp_path
):
    schema_file = tmp_path / "person.json"
    schema_file.write_bytes(orjson.dumps(PERSON))
    fake_server.queue(openai_message('{"name": "Ada", "age": 36}'))

    result = run_foliko(
        "chat", "-s", "p", "--stream", "--schema", str(schema_file), "hi", env=openai_env
    )

    assert result.returncode == 0, result.stderr
    assert orjson.loads(result.stdout) == {"name": "Ada", "age": 36}
    assert fake_server.requests[0].body.get("stream") is None, "checked before printing"


def test_the_cli_fails_an_invalid_structured_reply(run_foliko, fake_server, openai_env):
    fake_server.queue(openai_message('{"name": "Ada"}'))

    result = run_foliko(
        "chat", "-s", "p", "--schema", orjson.dumps(PERSON).decode(), "hi", env=openai_env
    )

    assert result.returncode == 1
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "does not follow the schema" in lines[0]
    assert "'age' is a required property" in lines[0]
    assert result.stdout == b""
    assert run_foliko("sessions", "show", "p").returncode == 2


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("missing.json", "cannot read schema file 'missing.json'"),
        ('{"type": 3}', "not a valid JSON Schema"),
        ("{not json", "not valid JSON"),
        ("[1]", "cannot read schema file"),
    ],
)
def test_a_bad_schema_is_a_usage_error(run_foliko, source, expected):
    result = run_foliko("chat", "-s", "p", "--schema", source, "hi")

    assert result.returncode == 2
    assert expected in result.stderr.decode()
    with pytest.raises(UsageError):
        load_schema(source)


# usage and cost


def test_usage_keeps_cached_and_reasoning_tokens_and_the_duration(foliko_home: Path):
    script = Script()
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "prompt_tokens_details": {"cached_tokens": 64},
        "completion_tokens_details": {"reasoning_tokens": 12},
    }
    script.on(CHAT, chat_reply("ok", usage=usage))

    result, record = turn(provider(script), foliko_home)

    reply = record.messages[-1]
    assert reply["usage"] == {
        "input_tokens": 100,
        "output_tokens": 20,
        "cached_tokens": 64,
        "reasoning_tokens": 12,
    }
    assert isinstance(reply["duration_ms"], int) and reply["duration_ms"] >= 0
    assert result.usage["cached_tokens"] == 64
    assert result.cost is None and "cost" not in reply


def test_prices_give_the_cost_of_the_turn_and_of_each_message(foliko_home: Path):
    script = Script()
    script.on(
        CHAT, chat_reply("ok", usage={"prompt_tokens": 1_000_000, "completion_tokens": 500_000})
    )
    configured = {
        "priced": {"model": "openai:local-model", "price": {"input": 0.15, "output": 0.6}}
    }

    result, record = turn(provider(script, "priced", configured), foliko_home)

    assert result.cost == pytest.approx(0.15 + 0.30)
    assert record.messages[-1]["cost"] == pytest.approx(0.45)


def test_a_malformed_price_is_a_usage_error():
    with pytest.raises(UsageError, match="price must be a table"):
        model_spec("p", {"p": {"model": "openai:m", "price": {"input": "cheap"}}}, ENV)
    with pytest.raises(UsageError, match="options must be a table"):
        model_spec("p", {"p": {"model": "openai:m", "options": 3}}, ENV)


def test_the_cli_prints_usage_on_stderr(run_foliko, fake_server, openai_env):
    fake_server.queue(openai_stream(["fine"], usage=(1234, 56)))

    result = run_foliko("chat", "-s", "u", "-u", "hi", env=openai_env)

    assert result.returncode == 0, result.stderr
    assert result.stdout == b"fine\n"
    line = result.stderr.decode().strip().splitlines()[-1]
    assert line.startswith("1,234 input, 56 output tokens, ") and line.endswith(" s")


def test_json_output_carries_duration_and_cost(run_foliko, fake_server, openai_env, tmp_path):
    (tmp_path / "foliko.toml").write_text(
        '[models.priced]\nmodel = "openai:some-model"\nprice = {input = 1.0, output = 2.0}\n'
    )
    fake_server.queue(openai_stream(["fine"], usage=(1000, 500)))

    result = run_foliko("chat", "-s", "j", "-m", "priced", "--json", "hi", env=openai_env)

    assert result.returncode == 0, result.stderr
    data = orjson.loads(result.stdout)
    assert data["cost"] == pytest.approx(0.002)
    assert data["duration_ms"] >= 0


def test_the_offline_model_asks_no_server_for_its_window():
    request = ModelRequest([{"role": "user", "content": "x"}])
    assert request.schema is None and dict(request.options) == {}
    handler = AgentChatHandler(Framework("memory"), build_model(model_spec("echo")))
    asyncio.run(handler.learn_context_window())
    assert handler.compressor.budget == 8192


def test_an_aliass_bad_option_fails_the_turn_before_anything_is_sent(foliko_home: Path):
    script = Script()
    script.on(CHAT, chat_reply())
    configured = {"hot": {"model": "openai:local-model", "options": {"temperature": "hot"}}}

    with pytest.raises(UsageError, match="model option temperature must be a number"):
        turn(provider(script, "hot", configured), foliko_home)

    assert script.bodies(CHAT) == []
    with Foliko("sqlite", "echo", home=foliko_home) as foliko:
        assert foliko.list_sessions() == []


def test_options_foliko_does_not_know_pass_as_they_are(foliko_home: Path):
    script = Script()
    script.on(CHAT, chat_reply())

    turn(provider(script), foliko_home, options={"logit_bias": {"50256": -100}, "top_p": 1})

    body = script.bodies(CHAT)[0]
    assert (body["logit_bias"], body["top_p"]) == ({"50256": -100}, 1)


def test_the_call_that_compresses_the_history_is_in_the_usage(run_foliko, fake_server, openai_env):
    env = {**openai_env, "FOLIKO_CONTEXT_WINDOW": "300"}
    fake_server.queue(openai_stream(["fine"], usage=(100, 5)))
    fake_server.queue(openai_message("they talked", usage=(400, 9)))
    fake_server.queue(openai_stream(["again"], usage=(50, 6)))

    first = run_foliko("chat", "-s", "c", "-u", "lorem ipsum dolor " * 40, env=env)
    second = run_foliko("chat", "-s", "c", "-u", "and now?", env=env)

    assert first.returncode == 0 and second.returncode == 0, second.stderr
    assert len(fake_server.requests) == 3
    line = second.stderr.decode().strip().splitlines()[-1]
    assert line.startswith("50 input, 6 output tokens (and 400 input, 9 output to compress")
    totals = orjson.loads(run_foliko("usage", "--json", env=env).stdout)["total"]
    assert totals["input_tokens"] == 550
    assert totals["output_tokens"] == 20
    assert totals["compression_input_tokens"] == 400


def test_an_alias_with_a_bound_past_the_limit_is_refused(run_foliko, fake_server, openai_env):
    """Was: max_tokens = 2**63 went to the server."""
    from trusting import trust

    config = Path("foliko.toml")
    config.write_text(f'[models.big]\nmodel = "openai:m"\nmax_tokens = {2**63 - 1}\n')
    trust(config)
    result = run_foliko("chat", "-s", "o", "-m", "big", "hi", env=openai_env)
    assert result.returncode == 2
    assert "model 'big': max_tokens must be a whole number from 1 to 2,147,483,647" in (
        result.stderr.decode()
    )
    assert fake_server.requests == []
