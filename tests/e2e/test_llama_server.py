"""The real CLI against a real llama-server serving SmolLM2-135M with a 1,024-token window.

Replies are kept short (``-o max_tokens``) so the tier stays quick on two cores.
"""

from __future__ import annotations

import time

import orjson
from trusting import trust

from .server import CONTEXT

SHORT = ("-o", "max_tokens=8")
TOPICS = [
    "rivers",
    "mountains",
    "bread",
    "trains",
    "owls",
    "glass",
    "maps",
    "tea",
]


def long_message(topic: str) -> str:
    """About 250 tokens of plain English about ``topic``."""
    sentence = (
        f"Here is a note about {topic}: people have written about {topic} for a long time, "
        f"and every account of {topic} adds a detail that the others left out. "
    )
    return (sentence * 8)[:1000] + " Answer in one word: what was this note about?"


def one_line(stderr: bytes) -> str:
    lines = stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_plain_turn_is_answered_and_stored_with_its_usage(foliko, stored):
    result = foliko("chat", "-s", "plain", *SHORT, "-u", "Say hello.")

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    usage_line = result.stderr.decode().strip().splitlines()[-1]
    assert " input, " in usage_line and " output tokens, " in usage_line
    reply = stored("plain")["messages"][-1]
    assert reply["role"] == "assistant"
    assert reply["usage"]["input_tokens"] > 0
    assert 0 < reply["usage"]["output_tokens"] <= 8
    assert reply["duration_ms"] > 0


def test_a_streamed_turn_writes_the_reply_as_it_comes(foliko, stored):
    result = foliko("chat", "-s", "streamed", "--stream", *SHORT, "Say hello.")

    assert result.returncode == 0, result.stderr
    reply = stored("streamed")["messages"][-1]
    assert reply["content"]
    assert result.stdout.decode() == reply["content"] + "\n"
    assert 0 < reply["usage"]["output_tokens"] <= 8, "a stream reports its usage too"


def test_a_json_turn_reports_finish_reason_and_usage(foliko):
    result = foliko(
        "chat",
        "-s",
        "json",
        "--json",
        "-o",
        "max_tokens=5",
        "-o",
        "temperature=0",
        "Count to twenty.",
    )

    assert result.returncode == 0, result.stderr
    data = orjson.loads(result.stdout)
    assert data["finish_reason"] == "length", "max_tokens=5 reached the server"
    assert data["usage"]["output_tokens"] == 5
    assert data["duration_ms"] > 0


def test_a_reply_is_bounded_by_default(foliko):
    """With a 96-token window the default bound is a quarter of it: 24 tokens."""
    result = foliko(
        "chat",
        "-s",
        "bounded",
        "--json",
        "Write a long story about a dragon and a knight.",
        env={"FOLIKO_CONTEXT_WINDOW": "96"},
    )

    assert result.returncode == 0, result.stderr
    data = orjson.loads(result.stdout)
    assert data["usage"]["output_tokens"] <= 24
    assert data["finish_reason"] == "length"


def test_eight_long_turns_fit_a_window_nobody_configured(foliko, stored):
    """The window comes from the server (/props); the history is compressed, never lost."""
    for topic in TOPICS:
        result = foliko(
            "chat", "-s", "long", "--timeout", "300", *SHORT, long_message(topic), timeout=330
        )
        assert result.returncode == 0, (topic, result.stderr)

    session = stored("long")
    messages = session["messages"]
    assert len(messages) == 2 * len(TOPICS), "every turn is stored whole"
    assert [m["role"] for m in messages] == ["user", "assistant"] * len(TOPICS)
    assert [m["content"] for m in messages[::2]] == [long_message(t) for t in TOPICS]
    assert session["metadata"]["compression_count"] >= 1
    assert max(m["usage"]["input_tokens"] for m in messages[1::2]) < CONTEXT


def test_a_message_the_window_cannot_hold_fails_in_one_line_and_saves_nothing(foliko):
    """A wrong, too large window is corrected by the server's answer; the message alone
    still does not fit, so the turn fails with the sizes and the fix."""
    result = foliko(
        "chat", "-s", "huge", *SHORT, "hello " * 1200, env={"FOLIKO_CONTEXT_WINDOW": "100000"}
    )

    assert result.returncode == 1
    line = one_line(result.stderr)
    assert "does not fit" in line and f"{CONTEXT:,} tokens" in line
    assert "shorten the message" in line
    assert foliko("sessions", "show", "huge").returncode == 2


def test_structured_output_follows_the_schema(foliko):
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
        },
        "required": ["name", "age"],
        "additionalProperties": False,
    }

    result = foliko(
        "chat",
        "-s",
        "structured",
        "--schema",
        orjson.dumps(schema).decode(),
        "-o",
        "max_tokens=60",
        "Describe a person as JSON with a name and an age.",
    )

    assert result.returncode == 0, result.stderr
    person = orjson.loads(result.stdout)
    assert set(person) == {"name", "age"}
    assert isinstance(person["age"], int)


def test_a_timeout_mid_stream_leaves_the_server_idle(foliko, llama):
    result = foliko(
        "chat",
        "-s",
        "cut",
        "--stream",
        "--timeout",
        "8",
        "-o",
        "max_tokens=2000",
        "-o",
        "ignore_eos=true",
        "Write a very long story.",
    )

    assert result.returncode == 1
    assert result.stdout, "the reply was streaming when the turn timed out"
    assert "did not finish" in one_line(result.stderr) or "in time" in result.stderr.decode()
    deadline = time.monotonic() + 15
    while llama.busy_slots() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert llama.busy_slots() == 0, "the server stopped generating when foliko hung up"
    assert foliko("sessions", "show", "cut").returncode == 2


def test_models_list_names_the_served_model(foliko, llama):
    result = foliko("models", "list", "--json")

    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in orjson.loads(result.stdout)}
    served = rows[f"openai:{llama.model}"]
    assert served["served"] is True
    assert served["usable"] is True
    assert served["context_window"] == CONTEXT
    assert rows["openai:MODEL"]["usable"] is True


def test_a_text_file_attachment_reaches_the_model(foliko, stored, tmp_path):
    (tmp_path / "notes.txt").write_text("The password is swordfish.\n")

    result = foliko("chat", "-s", "notes", *SHORT, "-a", str(tmp_path / "notes.txt"), "Repeat it.")

    assert result.returncode == 0, result.stderr
    user = stored("notes")["messages"][0]
    assert "notes.txt:\n```txt\nThe password is swordfish.\n```" in user["content"]
    assert stored("notes")["metadata"]["message_count"] == 2


def test_an_image_for_a_text_only_model_fails_in_one_line_and_saves_nothing(foliko, tmp_path):
    from models.images import png

    (tmp_path / "dot.png").write_bytes(png())

    result = foliko("chat", "-s", "image", *SHORT, "-a", str(tmp_path / "dot.png"), "What is it?")

    assert result.returncode == 2, result.stderr
    line = one_line(result.stderr)
    assert "does not take images (500: image input is not supported" in line, line
    assert "use a vision model" in line and "nothing was saved" in line
    assert foliko("sessions", "show", "image").returncode == 2


def test_an_alias_to_the_server_is_listed_once_with_the_server_s_window(foliko, llama, tmp_path):
    (tmp_path / "foliko.toml").write_text(
        f'[models.smol]\nmodel = "openai:smol"\nbase_url = "{llama.url}/v1"\n'
    )
    trust(tmp_path / "foliko.toml")
    nothing_else = {"OPENAI_BASE_URL": "", "OPENAI_API_KEY": "", "FOLIKO_MODEL": "smol"}

    listed = foliko("models", "list", "--json", env=nothing_else)
    dry = foliko("chat", "-s", "d", "--dry-run", "hi", env=nothing_else)

    assert listed.returncode == 0, listed.stderr
    rows = orjson.loads(listed.stdout)
    (smol,) = [row for row in rows if row["base_url"] == f"{llama.url}/v1"]
    assert smol["name"] == "smol" and smol["served"] is True
    assert (smol["context_window"], smol["window_source"]) == (CONTEXT, "server")
    assert (smol["key_needed"], smol["usable"]) == (False, True)
    assert not any(row["served"] and "api.openai.com" in (row["base_url"] or "") for row in rows)
    assert dry.returncode == 0, dry.stderr
    body = orjson.loads(dry.stdout)["request"]["body"]
    assert body["max_tokens"] == CONTEXT // 4, "the bound the discovered window gives"


def test_a_reply_cut_by_its_limit_says_so(foliko):
    result = foliko("chat", "-s", "cut", "-o", "max_tokens=3", "Tell a long story about owls.")

    assert result.returncode == 0, result.stderr
    assert result.stderr.decode().splitlines()[-1] == (
        "foliko: the reply was cut at its limit of 3 tokens (max_tokens, finish reason length); "
        "raise it with -o max_tokens=6, or with max_tokens in the model's [models.NAME] alias"
    )
