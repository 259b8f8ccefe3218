"""`foliko sessions search`, `sessions show/export --format markdown`, `foliko usage`
and `sessions import --format chatgpt|llm`, through CliRunner."""

from __future__ import annotations

import asyncio
import copy
import sqlite3
from pathlib import Path

import orjson
import pytest

from foliko_cli.storage.record import SessionRecord, new_metadata
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
    from foliko_cli.clock import now_ms

    now = now_ms()
    store(foliko_home, SessionRecord("new", messages=[reply("x", "small", now, input_tokens=7)]))
    report = orjson.loads(invoke("usage", "--since", "1d", "--json").stdout)
    assert report["total"]["input_tokens"] == 7
    assert [r["session"] for r in report["rows"]] == ["new"]


def test_usage_bad_grouping_exits_2(invoke):
    assert_usage_error(invoke("usage", "--by", "week"), "--by")


# imports: ChatGPT


def node(node_id, parent, children, role=None, text=None, at=None, **extra):
    message = None
    if role is not None:
        content = extra.pop("content", {"content_type": "text", "parts": [text]})
        message = {
            "id": node_id,
            "author": {"role": role, "name": extra.pop("name", None), "metadata": {}},
            "create_time": at,
            "update_time": None,
            "content": content,
            "status": "finished_successfully",
            "end_turn": role == "assistant",
            "weight": 1.0,
            "metadata": extra.pop("metadata", {}),
            "recipient": extra.pop("recipient", "all"),
        }
    return {"id": node_id, "message": message, "parent": parent, "children": children}


def chatgpt_export() -> list[dict]:
    """Two conversations shaped like a real export: a hidden system node, an edited
    prompt (two user branches), a regenerated answer, a browsing tool call, an
    image part, and a conversation named by ``id`` only."""
    t = 1_700_000_000.5
    mapping = {
        "root": node("root", None, ["sys"]),
        "sys": node(
            "sys", "root", ["u1"], "system", "", t,
            metadata={"is_visually_hidden_from_conversation": True},
        ),
        "u1": node("u1", "sys", ["a1"], "user", "Plan a trip to Tokyo", t + 1),
        "a1": node(
            "a1", "u1", ["u2-old", "u2"], "assistant", "How many days?", t + 2,
            metadata={"model_slug": "gpt-4"},
        ),
        "u2-old": node("u2-old", "a1", ["a2-old"], "user", "Three days", t + 3),
        "a2-old": node("a2-old", "u2-old", [], "assistant", "Day 1: Asakusa", t + 4),
        "u2": node(
            "u2", "a1", ["call"], "user", None, t + 5,
            content={
                "content_type": "multimodal_text",
                "parts": [{"content_type": "image_asset_pointer"}, "Five days, budget"],
            },
        ),
        "call": node(
            "call", "u2", ["browse"], "assistant", None, t + 6,
            content={"content_type": "code", "text": "search('tokyo hotels')"},
            recipient="browser",
            metadata={"model_slug": "gpt-4o"},
        ),
        "browse": node(
            "browse", "call", ["a3-first", "a3"], "tool", None, t + 7,
            name="browser",
            content={"content_type": "tether_browsing_display", "result": "hotels..."},
        ),
        "a3-first": node(
            "a3-first", "browse", [], "assistant", "First draft", t + 8,
            metadata={"model_slug": "gpt-4o"},
        ),
        "a3": node(
            "a3", "browse", [], "assistant", "Here is a five-day plan.", t + 9,
            metadata={"model_slug": "gpt-4o"},
        ),
    }  # fmt: skip
    first = {
        "title": "Tokyo trip",
        "create_time": t,
        "update_time": t + 9,
        "mapping": mapping,
        "current_node": "a3",
        "conversation_id": "6f1c2d3e-0000-4000-8000-000000000001",
        "id": "6f1c2d3e-0000-4000-8000-000000000001",
        "moderation_results": [],
        "is_archived": False,
    }
    second = {
        "title": "Größe",
        "create_time": t + 100,
        "update_time": t + 101,
        "mapping": {
            "r": node("r", None, ["q"]),
            "q": node("q", "r", ["a"], "user", "Was heißt Größe?", t + 100),
            "a": node("a", "q", [], "assistant", "Size.", t + 101),
        },
        "current_node": "a",
        "id": "conv-2",
    }
    return [first, second]


@pytest.fixture
def export_file(tmp_path: Path) -> Path:
    path = tmp_path / "conversations.json"
    path.write_bytes(orjson.dumps(chatgpt_export()))
    return path


def test_chatgpt_import_keeps_the_current_branch(invoke, show, export_file):
    result = invoke("sessions", "import", "--format", "chatgpt", str(export_file))
    assert result.exit_code == 0, result.stderr
    assert "imported 2, unchanged 0, skipped 0" in result.stderr
    assert "dropped 3 message(s) on other branches" in result.stderr
    assert "left out 3 hidden, system or tool message(s)" in result.stderr
    trip = show("6f1c2d3e-0000-4000-8000-000000000001")
    assert [(m["role"], m["content"]) for m in trip["messages"]] == [
        ("user", "Plan a trip to Tokyo"),
        ("assistant", "How many days?"),
        ("user", "Five days, budget"),
        ("assistant", "Here is a five-day plan."),
    ]
    assert [m.get("model") for m in trip["messages"]] == [None, "gpt-4", None, "gpt-4o"]
    assert trip["messages"][0]["created_at"] == 1_700_000_001_500
    assert trip["metadata"]["title"] == "Tokyo trip"
    assert trip["metadata"]["created_at"] == 1_700_000_000_500
    second = show("conv-2")
    assert second["metadata"]["title"] == "Größe"
    assert [m["content"] for m in second["messages"]] == ["Was heißt Größe?", "Size."]


def test_chatgpt_import_twice_changes_nothing(invoke, show, export_file):
    invoke("sessions", "import", "--format", "chatgpt", str(export_file))
    before = show("conv-2")
    again = invoke("sessions", "import", "--format", "chatgpt", str(export_file))
    assert again.exit_code == 0, again.stderr
    assert "imported 0, unchanged 2, skipped 0" in again.stderr
    assert show("conv-2") == before


def test_imported_chatgpt_sessions_are_searchable(invoke, export_file):
    invoke("sessions", "import", "--format", "chatgpt", str(export_file))
    hits = orjson.loads(invoke("sessions", "search", "five-day", "--json").stdout)
    assert [(h["session_id"], h["seq"]) for h in hits] == [
        ("6f1c2d3e-0000-4000-8000-000000000001", 3)
    ]


def shifted_times(value, by: float):
    """``value`` (a ChatGPT export) with every create/update time moved ``by`` s."""
    if isinstance(value, dict):
        return {
            k: v + by if k in ("create_time", "update_time") and v else shifted_times(v, by)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [shifted_times(v, by) for v in value]
    return value


def test_prune_keeps_a_chatgpt_import_whose_dates_are_old(invoke, tmp_path, foliko_home):
    from foliko_cli.clock import now_ms

    from .test_sessions_manage import DAY, store

    june_2024 = 1_717_200_000 - 1_700_000_000
    path = tmp_path / "conversations.json"
    path.write_bytes(orjson.dumps(shifted_times(chatgpt_export(), june_2024)))
    assert invoke("sessions", "import", "--format", "chatgpt", str(path)).exit_code == 0
    store(foliko_home, "unused", updated_at=now_ms() - 40 * DAY)
    result = invoke("sessions", "prune", "--older-than", "30d")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "unused\n"
    listed = orjson.loads(invoke("sessions", "list", "--json").stdout)
    assert sorted(row["session_id"] for row in listed) == [
        "6f1c2d3e-0000-4000-8000-000000000001",
        "conv-2",
    ]
    second = orjson.loads(invoke("sessions", "show", "conv-2", "--json").stdout)
    assert second["messages"][0]["created_at"] == 1_700_000_100_500 + june_2024 * 1000


def broken_exports() -> list[tuple[object, str]]:
    cycle = copy.deepcopy(chatgpt_export()[1])
    cycle["mapping"]["r"]["parent"] = "a"
    orphan = copy.deepcopy(chatgpt_export()[1])
    orphan["mapping"]["q"]["parent"] = "gone"
    nameless = copy.deepcopy(chatgpt_export()[1])
    del nameless["id"]
    twice = [chatgpt_export()[1], chatgpt_export()[1]]
    return [
        (cycle, "has a cycle"),
        (orphan, "message 'gone' is missing"),
        (nameless, "no usable conversation_id"),
        (twice, "twice"),
        ([{"title": "x"}], "not a ChatGPT conversation"),
    ]


@pytest.mark.parametrize(("document", "fragment"), broken_exports())
def test_a_broken_chatgpt_export_exits_2_and_imports_nothing(invoke, tmp_path, document, fragment):
    path = tmp_path / "bad.json"
    path.write_bytes(orjson.dumps(document))
    assert_usage_error(invoke("sessions", "import", "--format", "chatgpt", str(path)), fragment)
    assert orjson.loads(invoke("sessions", "list", "--json").stdout) == []


def test_a_chatgpt_file_that_is_not_json_exits_2(invoke, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{nope")
    assert_usage_error(invoke("sessions", "import", "--format", "chatgpt", str(path)), "not JSON")


# imports: llm


LLM_SCHEMA = """
CREATE TABLE [conversations] ([id] TEXT PRIMARY KEY, [name] TEXT, [model] TEXT);
CREATE TABLE [responses] (
   [id] TEXT PRIMARY KEY, [model] TEXT, [prompt] TEXT, [system] TEXT,
   [prompt_json] TEXT, [options_json] TEXT, [response] TEXT, [response_json] TEXT,
   [conversation_id] TEXT REFERENCES [conversations]([id]), [duration_ms] INTEGER,
   [datetime_utc] TEXT, [input_tokens] INTEGER, [output_tokens] INTEGER,
   [token_details] TEXT, [schema_id] TEXT, [resolved_model] TEXT
);
CREATE VIRTUAL TABLE [responses_fts] USING FTS5 ([prompt], [response], content=[responses]);
"""


@pytest.fixture
def logs_db(tmp_path: Path) -> Path:
    path = tmp_path / "logs.db"
    db = sqlite3.connect(path)
    db.executescript(LLM_SCHEMA)
    db.executemany(
        "INSERT INTO conversations VALUES (?, ?, ?)",
        [("01j0conva", "Haiku about cats", "gpt-4o-mini"), ("01j0convb", "Größe", "claude-3")],
    )
    rows = [
        ("01j0r1", "gpt-4o-mini", "Write a haiku about cats", "You are a poet", "Soft paws...",
         "01j0conva", 1200, "2024-06-01T10:00:00.000000", 12, 20, "gpt-4o-mini-2024-07-18"),
        ("01j0r2", "gpt-4o", "Another, about dogs", "You are a poet", "Loyal friend...",
         "01j0conva", 800, "2024-06-01T10:05:00.000000", 30, 18, None),
        ("01j0r3", "claude-3", "Was heißt Größe?", None, "Size.",
         "01j0convb", None, "2024-06-02T08:00:00+00:00", None, None, None),
    ]  # fmt: skip
    db.executemany(
        """INSERT INTO responses (id, model, prompt, system, response, conversation_id,
           duration_ms, datetime_utc, input_tokens, output_tokens, resolved_model)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        rows,
    )
    db.commit()
    db.close()
    return path


def test_llm_import_makes_one_session_per_conversation(invoke, show, logs_db):
    result = invoke("sessions", "import", "--format", "llm", str(logs_db))
    assert result.exit_code == 0, result.stderr
    assert "imported 2, unchanged 0, skipped 0" in result.stderr
    cats = show("01j0conva")
    assert [(m["role"], m["content"]) for m in cats["messages"]] == [
        ("system", "You are a poet"),
        ("user", "Write a haiku about cats"),
        ("assistant", "Soft paws..."),
        ("user", "Another, about dogs"),
        ("assistant", "Loyal friend..."),
    ]
    assert [m.get("model") for m in cats["messages"] if m["role"] == "assistant"] == [
        "gpt-4o-mini-2024-07-18",
        "gpt-4o",
    ]
    assert cats["messages"][1]["created_at"] == 1_717_236_000_000
    assert cats["metadata"]["title"] == "Haiku about cats"
    assert cats["usage"]["input_tokens"] == 42 and cats["usage"]["output_tokens"] == 38
    other = show("01j0convb")
    assert [m["role"] for m in other["messages"]] == ["user", "assistant"]
    assert other["messages"][0]["created_at"] == 1_717_315_200_000


def test_llm_import_twice_changes_nothing(invoke, logs_db):
    invoke("sessions", "import", "--format", "llm", str(logs_db))
    again = invoke("sessions", "import", "--format", "llm", str(logs_db))
    assert again.exit_code == 0, again.stderr
    assert "imported 0, unchanged 2, skipped 0" in again.stderr


def test_llm_import_of_a_file_that_is_not_a_logs_db_exits_2(invoke, tmp_path):
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    assert_usage_error(
        invoke("sessions", "import", "--format", "llm", str(other)), "not an llm logs database"
    )
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    assert_usage_error(invoke("sessions", "import", "--format", "llm", str(text)), "cannot read")
    assert_usage_error(
        invoke("sessions", "import", "--format", "llm", str(tmp_path / "none.db")),
        "is not a file",
    )
