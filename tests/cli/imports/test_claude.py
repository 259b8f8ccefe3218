"""`sessions import` of a Claude.ai data export (data/claude/conversations.json)."""

from __future__ import annotations

import hashlib

import orjson

from .conftest import DATA, assert_exit, assert_usage_error, turns

EXPORT = DATA / "claude" / "conversations.json"
REGEX = "0b7d3c1e-5a0f-4b9e-9d0e-2f4f0c6a1a01"
WEATHER = "5e2b7c40-8f1d-4a6e-b3c9-0d4e5f6a7b02"
TRANSLATIONS = "8b5e0f73-1c40-4d91-a6f2-3a7b8c9d0e53"
DIAGRAM = "e1be6fd9-72a6-43f7-8c58-903b4c5d6eb9"


def test_each_conversation_becomes_a_session(invoke, show, session_ids):
    result = invoke("sessions", "import", "--format", "claude", "--branches", "all", str(EXPORT))

    assert_exit(result, 0, "imported 6, unchanged 0, skipped 0")
    assert "left out 1 hidden, reasoning or unsupported item(s)" in result.stderr
    assert session_ids() == sorted(
        [REGEX, WEATHER, TRANSLATIONS, f"{TRANSLATIONS}.branch-1", DIAGRAM, f"{DIAGRAM}.branch-1"]
    )
    regex = show(REGEX)
    assert regex["metadata"]["title"] == "Regex for ISO dates"
    assert regex["metadata"]["imported_from"] == "claude"
    assert regex["metadata"]["created_at"] == 1_741_079_702_118
    asked, answer = regex["messages"]
    assert asked["content"].startswith("Write a regex that matches the ISO 8601 dates in the file")
    assert (
        "samples.txt:\n```txt\n2025-03-04\n2024-12-31T23:59:59Z\nnot a date\n```"
        in (asked["content"])
    )
    assert asked["attachments"] == [
        {
            "type": "text",
            "name": "samples.txt",
            "media_type": "text/plain",
            "size": 43,
            "sha256": hashlib.sha256(b"2025-03-04\n2024-12-31T23:59:59Z\nnot a date\n").hexdigest(),
        }
    ]
    assert answer["role"] == "assistant" and answer["content"].startswith("This one matches")
    assert "Dates with an optional time part" not in answer["content"]
    assert answer["created_at"] == 1_741_079_709_330


def test_tool_use_and_its_result(invoke, show):
    invoke("sessions", "import", str(EXPORT))

    weather = show(WEATHER)
    assert turns(weather) == [
        ("user", "What's the weather in Lisbon right now?"),
        ("assistant", "Let me look that up."),
        ("tool", "Lisbon: 18°C, light rain"),
        ("assistant", "It is 18°C with light rain in Lisbon."),
    ]
    call = weather["messages"][1]["tool_calls"]
    assert call == [
        {
            "id": "srvtoolu_01KJ8pX3",
            "name": "web_search",
            "arguments": {"query": "Lisbon weather now"},
        }
    ]
    assert weather["messages"][2]["tool_call_id"] == "srvtoolu_01KJ8pX3"
    assert weather["messages"][2]["name"] == "web_search"


def test_an_edited_prompt_and_a_regenerated_answer_are_branches(invoke, show):
    invoke("sessions", "import", "--branches", "all", str(EXPORT))

    assert turns(show(TRANSLATIONS))[2:] == [
        ("user", "Translate 'good night' to Italian"),
        ("assistant", "Buona notte."),
    ]
    edited = show(f"{TRANSLATIONS}.branch-1")
    assert turns(edited) == [("user", "Translate 'good night' to French")]  # its own only
    assert edited["metadata"]["forked_from"] == TRANSLATIONS
    assert edited["metadata"]["forked_at_message"] == 2
    diagram = show(DIAGRAM)
    assert turns(diagram) == [
        ("user", "Is this architecture diagram sound?"),
        ("assistant", "Yes, with one caveat about the cache."),
        ("user", "What would you change?"),
    ]
    assert diagram["messages"][0]["attachments"] == [
        {"type": "image", "name": "diagram.png", "media_type": "image/png"}
    ]
    assert turns(show(f"{DIAGRAM}.branch-1"))[0] == (
        "assistant",
        "Mostly; the cache is a single point of failure.",
    )


def test_a_conversation_that_cannot_be_read(invoke, session_ids, tmp_path):
    conversations = orjson.loads(EXPORT.read_bytes())
    del conversations[1]["uuid"]
    conversations[2]["chat_messages"][1] = "not a message"
    path = tmp_path / "conversations.json"
    path.write_bytes(orjson.dumps(conversations))

    result = invoke("sessions", "import", "--branches", "all", str(path))

    assert_exit(
        result,
        3,
        f"could not read {path}: conversation #2: it has no uuid",
        f"could not read {path}: conversation #3: message #2 is not an object",
        "imported 3, unchanged 0, skipped 0, could not read 2",
    )
    assert session_ids() == sorted([REGEX, DIAGRAM, f"{DIAGRAM}.branch-1"])


def test_a_file_that_is_not_a_claude_export_exits_2(invoke, tmp_path):
    path = tmp_path / "conversations.json"
    path.write_bytes(orjson.dumps([{"uuid": "x", "name": "no messages"}]))
    assert_usage_error(
        invoke("sessions", "import", "--format", "claude", str(path)), "is not a Claude.ai export"
    )
