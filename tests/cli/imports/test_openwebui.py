"""`sessions import` of an Open WebUI chat export (data/openwebui/)."""

from __future__ import annotations

import base64

import orjson

from .conftest import DATA, assert_exit, assert_usage_error, turns

EXPORT = DATA / "openwebui" / "chat-export-1719000100000.json"
HAIKU = "3c9e4b1a-7d2f-4e8a-9b6c-1f0e2d3c4b01"
UNITS = "3c9e4b1a-7d2f-4e8a-9b6c-1f0e2d3c4b02"
OLD = "3c9e4b1a-7d2f-4e8a-9b6c-1f0e2d3c4b03"
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def test_the_shown_answer_files_and_tool_calls_in_the_text(invoke, show, session_ids):
    result = invoke("sessions", "import", "--format", "openwebui", "--branches", "all", str(EXPORT))

    assert_exit(result, 0, "imported 4, unchanged 0, skipped 0")
    assert session_ids() == sorted([HAIKU, f"{HAIKU}.branch-1", UNITS, OLD])
    haiku = show(HAIKU)
    assert turns(haiku) == [
        ("user", "Write a haiku about this photo"),
        ("assistant", "Crisp air, amber light"),
        ("user", "What time is it in Tokyo?"),
        ("assistant", "Let me check."),
        ("tool", "21:04"),
        ("assistant", "It is 21:04 in Tokyo."),
    ]
    photo, pdf = haiku["messages"][0]["attachments"][0], haiku["messages"][2]["attachments"][0]
    assert base64.b64decode(photo["data"]) == PNG
    assert pdf == {
        "type": "file",
        "name": "notes.pdf",
        "media_type": "application/pdf",
        "size": 5120,
    }
    assert haiku["messages"][1]["usage"] == {"input_tokens": 24, "output_tokens": 30}
    assert haiku["messages"][1]["model"] == "llama3.1:8b"
    assert haiku["messages"][3]["tool_calls"] == [
        {"id": "call_7f2a", "name": "get_time", "arguments": {"city": "Tokyo"}}
    ]
    assert (haiku["messages"][4]["tool_call_id"], haiku["messages"][4]["name"]) == (
        "call_7f2a",
        "get_time",
    )
    assert haiku["messages"][0]["created_at"] == 1_718_000_000_000
    assert haiku["metadata"]["title"] == "Haiku about autumn"
    assert haiku["metadata"]["model"] == "llama3.1:8b"
    first = show(f"{HAIKU}.branch-1")
    assert turns(first) == [("assistant", "Leaves drift on cold wind")]
    assert first["metadata"]["forked_from"] == HAIKU


def test_output_items_and_a_chat_of_an_older_version(invoke, show):
    result = invoke("sessions", "import", str(EXPORT))

    assert_exit(result, 0, "left out 1 branch(es) (--branches all imports them), 2 hidden,")
    units = show(UNITS)
    assert turns(units) == [
        ("user", "How many feet is 3 metres?"),
        ("assistant", ""),
        ("tool", "9.84"),
        ("assistant", "3 metres is 9.84 feet."),
    ]
    assert units["messages"][1]["tool_calls"] == [
        {"id": "call_conv1", "name": "convert", "arguments": {"value": 3, "from": "m", "to": "ft"}}
    ]
    assert units["messages"][3]["usage"] == {"input_tokens": 40, "output_tokens": 12}
    old = show(OLD)
    assert turns(old) == [("user", "Hello"), ("assistant", "Hi! How can I help?")]
    assert old["messages"][1]["model"] == "mistral:7b"


def test_a_chat_that_cannot_be_read(invoke, session_ids, tmp_path):
    chats = orjson.loads(EXPORT.read_bytes())
    chats[0]["chat"]["history"]["messages"]["q1"]["parentId"] = "r3"
    del chats[1]["id"]
    path = tmp_path / "export.json"
    path.write_bytes(orjson.dumps(chats))

    result = invoke("sessions", "import", str(path))

    assert_exit(
        result,
        3,
        f"could not read {path}: chat #1: its message tree has a cycle",
        f"could not read {path}: chat #2: it has no id",
    )
    assert session_ids() == [OLD]


def test_a_file_that_is_not_an_open_webui_export_exits_2(invoke, tmp_path):
    path = tmp_path / "export.json"
    path.write_bytes(orjson.dumps([{"id": "x", "title": "no chat"}]))
    assert_usage_error(
        invoke("sessions", "import", "--format", "openwebui", str(path)),
        "is not an Open WebUI chat export",
    )
