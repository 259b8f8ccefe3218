"""`foliko chat` through click's CliRunner."""

from __future__ import annotations

import orjson
import pytest


def test_first_turn_creates_the_session_and_prints_the_reply(invoke, show):
    result = invoke("chat", "--session", "s1", "hi")
    assert result.exit_code == 0
    assert "hi" in result.stdout
    assert [m["role"] for m in show("s1")["messages"]] == ["user", "assistant"]


def test_second_turn_continues_the_session(invoke, show):
    invoke("chat", "-s", "s1", "hi")
    invoke("chat", "-s", "s1", "and now?")
    messages = show("s1")["messages"]
    assert [(m["role"], m["content"]) for m in messages] == [
        ("user", "hi"),
        ("assistant", "hi"),
        ("user", "and now?"),
        ("assistant", "and now?"),
    ]


def test_echo_default_is_announced_once_per_home_on_stderr_only(invoke, tmp_path):
    result = invoke("chat", "-s", "s1", "hello there")
    assert result.stdout == "hello there\n"
    assert "echo" in result.stderr and "FOLIKO_MODEL" in result.stderr
    assert invoke("chat", "-s", "s1", "again").stderr == ""
    elsewhere = invoke("chat", "-s", "s1", "hi", env={"FOLIKO_HOME": str(tmp_path / "other")})
    assert "echo" in elsewhere.stderr


def test_configured_model_is_not_announced(invoke):
    result = invoke("chat", "-s", "s1", "hi", env={"FOLIKO_MODEL": "echo"})
    assert result.exit_code == 0
    assert result.stderr == ""


def test_json_output_has_the_turn_fields(invoke):
    result = invoke("chat", "-s", "s1", "hi", "--json", "-m", "echo")
    data = orjson.loads(result.stdout)
    assert data["session_id"] == "s1"
    assert data["message"] == "hi"
    assert data["step_count"] == 1
    assert data["success"] is True
    assert len(data["request_id"]) == 16 and len(data["trace_id"]) == 32
    assert set(data["usage"]) == {"input_tokens", "output_tokens"}


def test_stored_messages_carry_the_turn_ids(invoke, show):
    data = orjson.loads(invoke("chat", "-s", "s1", "hi", "--json").stdout)
    for message in show("s1")["messages"]:
        assert message["request_id"] == data["request_id"]
        assert message["trace_id"] == data["trace_id"]
        assert isinstance(message["created_at"], int) and message["created_at"] > 1e12


def test_message_from_stdin(invoke, show):
    result = invoke("chat", "-s", "p", input="piped text\n")
    assert result.exit_code == 0
    assert "piped text" in result.stdout
    assert show("p")["messages"][0]["content"] == "piped text\n"


def test_argument_and_stdin_combine(invoke, show):
    invoke("chat", "-s", "p", "Summarise:", input="the body")
    assert show("p")["messages"][0]["content"] == "Summarise:\n\nthe body"


def test_tool_call_through_the_echo_model(invoke, show):
    result = invoke("chat", "-s", "t", '/tool set_variable {"key": "colour", "value": "blue"}')
    assert result.exit_code == 0
    assert "blue" in result.stdout
    session = show("t")
    assert session["variables"] == {"colour": "blue"}
    assert [m["role"] for m in session["messages"]] == ["user", "assistant", "tool", "assistant"]


@pytest.mark.parametrize(
    ("args", "stdin", "expected"),
    [
        (["chat", "-s", "s1"], "", "no message"),
        (["chat", "-s", "s1", "   "], None, "the message is blank"),
        (["chat", "-s", "bad\x00id", "hi"], None, "control character"),
        (["chat", "-s", "", "hi"], None, "empty"),
        (["chat", "-s", "x" * 300, "hi"], None, "longer than"),
        (["chat", "-s", "s1", "hi", "-m", "nosuch:model"], None, "unknown model"),
        (["--storage", "bogus", "chat", "-s", "s1", "hi"], None, "unknown storage"),
        (["--storage", "sqlite://host/x.db", "chat", "-s", "s1", "hi"], None, "no host"),
        (["--storage", "ftp://x", "chat", "-s", "s1", "hi"], None, "unknown storage"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_saves_nothing(invoke, args, stdin, expected):
    result = invoke(*args, input=stdin)
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert expected in lines[-1]
    assert lines[-1].startswith("foliko: error: ")
    listing = invoke("sessions", "list", "--json")
    assert orjson.loads(listing.stdout) == []


def test_invalid_utf8_on_stdin_exits_2(invoke):
    result = invoke("chat", "-s", "s1", input=b"caf\xe9\n")
    assert result.exit_code == 2
    assert "not valid UTF-8" in result.stderr
    assert orjson.loads(invoke("sessions", "list", "--json").stdout) == []


def test_missing_session_option_is_a_usage_error(invoke):
    result = invoke("chat", "hi")
    assert result.exit_code == 2
    assert "--session" in result.stderr


def test_zero_timeout_is_rejected(invoke):
    result = invoke("chat", "-s", "s1", "hi", "--timeout", "0")
    assert result.exit_code == 2
