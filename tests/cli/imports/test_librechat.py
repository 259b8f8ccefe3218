"""`sessions import` of LibreChat's conversation exports (data/librechat/)."""

from __future__ import annotations

import orjson

from .conftest import DATA, assert_exit, assert_usage_error, turns

TREE = DATA / "librechat" / "square-roots.json"
LISTED = DATA / "librechat" / "long-story.json"
ROOTS = "d2b7e0c4-5a1f-4c8e-9b3d-7e6f5a4b3c21"
STORY = "e3c8f1d5-6b20-4d9f-8c4e-8f7a6b5c4d32"


def test_a_nested_export_with_branches_and_an_agent_that_called_a_tool(invoke, show):
    result = invoke("sessions", "import", "--format", "librechat", "--branches", "all", str(TREE))

    assert_exit(result, 0, "imported 2, unchanged 0, skipped 0")
    assert "left out 1 hidden, reasoning or unsupported item(s)" in result.stderr
    roots = show(ROOTS)
    assert turns(roots) == [
        ("user", "What is the square root of 2?"),
        ("assistant", "Let me compute it."),
        ("tool", "1.4142135623730951"),
        ("assistant", "The square root of 2 is 1.41421356..."),
        ("user", "And of 3?"),
        ("assistant", "About 1.732."),
    ]
    assert roots["messages"][1]["tool_calls"] == [
        {"id": "call_sq2", "name": "calculator", "arguments": {"input": "sqrt(2)"}}
    ]
    assert roots["messages"][2]["tool_call_id"] == "call_sq2"
    assert roots["messages"][0]["attachments"] == [
        {"type": "image", "name": "worksheet.png", "media_type": "image/png"}
    ]
    assert roots["messages"][1]["model"] == "gpt-4o"
    assert roots["messages"][0]["created_at"] == 1_754_042_400_000
    assert roots["metadata"]["title"] == "Square roots"
    assert roots["metadata"]["endpoint"] == "agents"
    first = show(f"{ROOTS}.branch-1")
    assert turns(first) == [("assistant", "About 1.41.")]  # after ROOTS's first message
    assert first["metadata"]["forked_at_message"] == 1


def test_a_listed_export_whose_first_prompt_was_edited(invoke, show):
    result = invoke("sessions", "import", "--branches", "all", str(LISTED))

    assert_exit(result, 0, "imported 2,")
    assert turns(show(STORY)) == [
        ("user", "tell me a long story"),
        ("assistant", "Long ago, in Eldoria..."),
    ]
    assert turns(show(f"{STORY}.branch-1")) == [
        ("user", "tell me a story"),
        ("assistant", "Once upon a time..."),
    ]
    assert show(STORY)["metadata"]["model"] == "gpt-4o-mini"


def test_main_only_and_repeating(invoke, session_ids):
    for path in (TREE, LISTED):
        assert_exit(invoke("sessions", "import", "--main-only", str(path)), 0, "imported 1,")
        assert_exit(invoke("sessions", "import", "--main-only", str(path)), 0, "unchanged 1")
    assert session_ids() == sorted([ROOTS, STORY])


def test_a_file_that_is_not_a_librechat_export_exits_2(invoke, tmp_path):
    path = tmp_path / "export.json"
    path.write_bytes(orjson.dumps({"title": "no conversation id", "messages": []}))
    assert_usage_error(
        invoke("sessions", "import", "--format", "librechat", str(path)),
        "is not a LibreChat export",
    )
