"""`foliko sessions search`, `sessions show/export --format markdown` and `foliko usage`,
through CliRunner (imports are in tests/cli/imports/)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from foliko_cli.messages.record import SessionRecord, new_metadata
from foliko_cli.storage.sqlite import SQLiteStorage

T0 = 1_700_000_000_000
DAY = 86_400_000


def store(home: Path, *records: SessionRecord) -> None:
    async def save() -> None:
        storage = SQLiteStorage(home / "sessions.db")
        try:
            for record in records:
                await storage.save(record)
        finally:
            await storage.close()

    asyncio.run(save())


def reply(text: str, model: str, at: int, **usage) -> dict:
    message = {"role": "assistant", "content": text, "created_at": at, "model": model}
    cost = usage.pop("cost", None)
    message["usage"] = usage
    if cost is not None:
        message["cost"] = cost
    return message


def ask(text: str, at: int) -> dict:
    return {"role": "user", "content": text, "created_at": at}


def assert_usage_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


# search


@pytest.fixture
def searchable(foliko_home: Path) -> None:
    store(
        foliko_home,
        SessionRecord(
            "ops",
            messages=[
                ask("why is the connection refused?", T0),
                reply("Connection refused: nothing listens on 8080.", "m1", T0 + 1000),
            ],
            metadata=new_metadata(T0),
        ),
        SessionRecord("misc", messages=[ask("Größe in 東京", T0 + 5000)]),
    )


def test_search_prints_the_match_marked_in_brackets(invoke, searchable):
    result = invoke("sessions", "search", "refused", "--format", "tsv")
    assert result.exit_code == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split("\t") == ["session_id", "seq", "role", "created_at", "marked"]
    cells = [row.split("\t") for row in rows]
    assert sorted((c[0], c[1], c[2]) for c in cells) == [
        ("ops", "0", "user"),
        ("ops", "1", "assistant"),
    ]
    assert {c[4] for c in cells} == {
        "why is the connection [refused]?",
        "Connection [refused]: nothing listens on 8080.",
    }


def test_search_json_carries_the_match_offsets(invoke, searchable):
    result = invoke("sessions", "search", "東京", "--json")
    assert result.exit_code == 0, result.stderr
    [hit] = orjson.loads(result.stdout)
    assert (hit["session_id"], hit["seq"], hit["role"]) == ("misc", 0, "user")
    assert hit["snippet"][hit["match_start"] : hit["match_end"]] == "東京"
    assert hit["marked"] == "Größe in [東京]"
    assert hit["created_at"] == T0 + 5000


def test_search_filters_and_limit(invoke, searchable):
    result = invoke("sessions", "search", "refused", "--role", "assistant", "--json")
    assert [h["seq"] for h in orjson.loads(result.stdout)] == [1]
    result = invoke("sessions", "search", "refused", "--session", "misc", "--json")
    assert orjson.loads(result.stdout) == []
    result = invoke("sessions", "search", "refused", "--limit", "1", "--ndjson")
    assert len(result.stdout.splitlines()) == 1
    result = invoke("sessions", "search", "refused", "--since", "1d", "--json")
    assert orjson.loads(result.stdout) == []  # written in 2023
    every = invoke("sessions", "search", "refused", "--json").stdout
    far = "1" + "0" * 30  # past what the store's integers hold
    assert invoke("sessions", "search", "refused", "--limit", far, "--json").stdout == every
    assert invoke("sessions", "search", "refused", "--since", far + "d", "--json").stdout == every


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (['"connection refused'], "unclosed quote"),
        (["!!! ???"], "no words"),
        (["ref*used"], "a * inside a word"),
        (["x", "--limit", "0"], "--limit"),
        (["x", "--role", "robot"], "--role"),
        (["x", "--session", " bad "], "invalid session id"),
        (["x", "--since", "soon"], "not a duration"),
    ],
)
def test_bad_search_input_exits_2_with_the_reason(invoke, searchable, args, fragment):
    assert_usage_error(invoke("sessions", "search", *args), fragment)


def test_search_on_the_json_backend_scans(invoke, foliko_home):
    env = {"FOLIKO_MODEL": "echo"}
    result = invoke("--storage", "json", "chat", "-s", "j1", "hello Flamingo", env=env)
    assert result.exit_code == 0, result.stderr
    result = invoke(
        "--storage", "json", "sessions", "search", "flamingo", "--role", "user", "--json"
    )
    hits = orjson.loads(result.stdout)
    assert [(h["session_id"], h["seq"], h["marked"]) for h in hits] == [
        ("j1", 0, "hello [Flamingo]")
    ]


def test_search_help_says_which_backends_scan(invoke):
    result = invoke("sessions", "search", "--help")
    assert "json, memory and redis backends read every session" in " ".join(result.stdout.split())


# transcripts


@pytest.fixture
def transcript_session(foliko_home: Path) -> None:
    call = {"id": "call_1", "name": "add", "arguments": {"a": 2, "b": 3}}
    store(
        foliko_home,
        SessionRecord(
            "t1",
            messages=[
                {"role": "system", "content": "Be brief.", "created_at": T0},
                ask("What is 2+3?", T0 + 1000),
                {**reply("", "gpt-x", T0 + 2000), "tool_calls": [call]},
                {
                    "role": "tool",
                    "content": "5 ```",
                    "tool_call_id": "call_1",
                    "name": "add",
                    "created_at": T0 + 3000,
                },
                reply("It is **5**.", "gpt-x", T0 + 4000),
            ],
            metadata={**new_metadata(T0), "title": "Arithmetic"},
        ),
    )


def test_show_markdown_has_a_heading_per_turn_and_fenced_tool_calls(invoke, transcript_session):
    result = invoke("sessions", "show", "t1", "--format", "markdown")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "# Session Arithmetic (t1)"
    headings = [line.split(" — ")[0] for line in lines if line.startswith("## ")]
    assert headings == [
        "## 1. System",
        "## 2. User",
        "## 3. Assistant · gpt-x",
        "## 4. Tool · add",
        "## 5. Assistant · gpt-x",
    ]
    assert all(" — 20" in line for line in lines if line.startswith("## "))
    text = result.stdout
    assert "Tool call `add` (call_1)\n\n```json\n" in text
    fenced = text.split("```json\n", 1)[1].split("\n```", 1)[0]
    assert orjson.loads(fenced) == {"a": 2, "b": 3}
    assert "````\n5 ```\n````" in text  # a fence longer than the backticks inside
    assert "It is **5**." in text


def test_show_tail_in_markdown_keeps_the_positions(invoke, transcript_session):
    result = invoke("sessions", "show", "t1", "--format", "markdown", "--tail", "1")
    headings = [line for line in result.stdout.splitlines() if line.startswith("## ")]
    assert len(headings) == 1 and headings[0].startswith("## 5. Assistant")


def test_show_in_a_pipe_keeps_the_plain_view(invoke, transcript_session):
    piped = invoke("sessions", "show", "t1")
    assert piped.stdout == invoke("sessions", "show", "t1", "--format", "text").stdout
    assert piped.stdout.startswith("session   t1\n")
    assert "[assistant → add]" in piped.stdout


def test_export_markdown_writes_every_session(invoke, transcript_session, foliko_home, tmp_path):
    store(foliko_home, SessionRecord("t2", messages=[ask("second one", T0)]))
    out = tmp_path / "all.md"
    result = invoke("sessions", "export", "--all", "--format", "markdown", "-o", str(out))
    assert result.exit_code == 0, result.stderr
    text = out.read_text()
    assert text.count("# Session ") == 2 and "\n---\n" in text
    assert "# Session Arithmetic (t1)" in text and "# Session t2" in text


# usage


@pytest.fixture
def switched_models(foliko_home: Path) -> None:
    store(
        foliko_home,
        SessionRecord(
            "a",
            messages=[
                ask("one", T0),
                reply("r1", "small", T0 + 1, input_tokens=10, output_tokens=5, cost=0.001),
                ask("two", T0 + 2),
                reply(
                    "r2",
                    "large",
                    T0 + DAY,
                    input_tokens=100,
                    output_tokens=50,
                    cached_input_tokens=40,
                    cost=0.02,
                ),
            ],
        ),
        SessionRecord(
            "b",
            messages=[
                ask("three", T0),
                reply("r3", "small", T0 + 3, input_tokens=1, output_tokens=2),
            ],
        ),
    )


def test_show_json_sums_the_replies_usage(show, switched_models):
    usage = show("a")["usage"]
    assert usage == {
        "input_tokens": 110,
        "output_tokens": 55,
        "cached_input_tokens": 40,
        "replies": 2,
        "cost": pytest.approx(0.021),
    }


def test_usage_by_model_splits_a_session_that_switched_models(invoke, switched_models):
    result = invoke("usage", "--by", "model", "--json")
    assert result.exit_code == 0, result.stderr
    report = orjson.loads(result.stdout)
    rows = {row["model"]: row for row in report["rows"]}
    assert (rows["small"]["input_tokens"], rows["small"]["output_tokens"]) == (11, 7)
    assert rows["small"]["replies"] == 2 and rows["small"]["cost"] == pytest.approx(0.001)
    assert (rows["large"]["input_tokens"], rows["large"]["cached_input_tokens"]) == (100, 40)
    assert report["total"]["input_tokens"] == 111
    assert report["total"]["cost"] == pytest.approx(0.021)


def test_usage_by_session_and_day(invoke, switched_models):
    by_session = orjson.loads(invoke("usage", "--json").stdout)
    assert [(r["session"], r["output_tokens"]) for r in by_session["rows"]] == [("a", 55), ("b", 2)]
    by_day = orjson.loads(invoke("usage", "--by", "day", "--json").stdout)
    assert [(r["day"], r["input_tokens"]) for r in by_day["rows"]] == [
        ("2023-11-14", 11),
        ("2023-11-15", 100),
    ]


def test_usage_table_ends_with_the_total(invoke, switched_models):
    result = invoke("usage", "--by", "model", "--format", "tsv")
    lines = [line.split("\t") for line in result.stdout.splitlines()]
    assert lines[0][:3] == ["model", "input_tokens", "output_tokens"]
    assert lines[-1][:3] == ["TOTAL", "111", "57"]


def test_usage_since_counts_only_recent_replies(invoke, foliko_home, switched_models):
    from foliko_cli.common.clock import now_ms

    now = now_ms()
    store(foliko_home, SessionRecord("new", messages=[reply("x", "small", now, input_tokens=7)]))
    report = orjson.loads(invoke("usage", "--since", "1d", "--json").stdout)
    assert report["total"]["input_tokens"] == 7
    assert [r["session"] for r in report["rows"]] == ["new"]


def test_usage_bad_grouping_exits_2(invoke):
    assert_usage_error(invoke("usage", "--by", "week"), "--by")
