"""`sessions import` of ChatGPT's conversations.json (Settings > Data controls >
Export data): the shown branch, the other branches as forks, what is left out."""

from __future__ import annotations

import copy
from pathlib import Path

import orjson
import pytest

from .conftest import assert_exit, assert_usage_error, turns

TRIP = "6f1c2d3e-0000-4000-8000-000000000001"


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
                "parts": [
                    {
                        "content_type": "image_asset_pointer",
                        "asset_pointer": "file-service://file-Xy12",
                        "size_bytes": 2048, "width": 32, "height": 32,
                    },
                    "Five days, budget",
                ],
            },
            metadata={
                "attachments": [
                    {"id": "file-Xy12", "name": "map.png", "size": 2048, "mime_type": "image/png"}
                ]
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


def test_the_shown_branch_is_the_session_and_the_others_are_forks(invoke, show, export_file):
    result = invoke(
        "sessions", "import", "--format", "chatgpt", "--branches", "all", str(export_file)
    )

    assert_exit(result, 0, "imported 4, unchanged 0, skipped 0")
    assert "left out 3 hidden, reasoning or unsupported item(s)" in result.stderr
    trip = show(TRIP)
    assert turns(trip) == [
        ("user", "Plan a trip to Tokyo"),
        ("assistant", "How many days?"),
        ("user", "Five days, budget"),
        ("assistant", "Here is a five-day plan."),
    ]
    assert [m.get("model") for m in trip["messages"]] == [None, "gpt-4", None, "gpt-4o"]
    assert trip["messages"][2]["attachments"] == [
        {"type": "image", "name": "map.png", "media_type": "image/png", "size": 2048}
    ]
    assert trip["messages"][0]["created_at"] == 1_700_000_001_500
    assert trip["metadata"]["title"] == "Tokyo trip"
    assert trip["metadata"]["created_at"] == 1_700_000_000_500
    assert trip["metadata"]["imported_from"] == "chatgpt"
    edited, regenerated = show(f"{TRIP}.branch-1"), show(f"{TRIP}.branch-2")
    # each branch holds its own messages only: the ones before are TRIP's
    assert turns(edited) == [("user", "Three days"), ("assistant", "Day 1: Asakusa")]
    assert turns(regenerated) == [("assistant", "First draft")]
    assert edited["metadata"]["own_messages_only"] is True
    assert edited["metadata"]["forked_from"] == regenerated["metadata"]["forked_from"] == TRIP
    fork_points = [
        (branch["metadata"]["forked_at_message"], branch["metadata"]["forked_at_turn"])
        for branch in (edited, regenerated)
    ]
    assert fork_points == [(2, 1), (3, 1)], "an edited prompt, a regenerated answer"
    assert edited["metadata"]["title"] == "Tokyo trip"
    second = show("conv-2")
    assert second["metadata"]["title"] == "Größe"
    assert [m["content"] for m in second["messages"]] == ["Was heißt Größe?", "Size."]


def test_only_the_shown_branch_is_imported_unless_asked(invoke, session_ids, export_file):
    for words in ([], ["--main-only"], ["--branches", "current"]):
        result = invoke("sessions", "import", *words, str(export_file))
        assert_exit(result, 0, "left out 2 branch(es)")
        assert session_ids() == sorted([TRIP, "conv-2"])
    assert "(--branches all imports them)" in invoke("sessions", "import", str(export_file)).stderr
    both = invoke("sessions", "import", "--main-only", "--branches", "all", str(export_file))
    assert_usage_error(both, "--main-only leaves out the branches --branches all asks for")


def test_importing_twice_changes_nothing(invoke, show, export_file):
    invoke("sessions", "import", "--format", "chatgpt", "--branches", "all", str(export_file))
    before = show(TRIP), show(f"{TRIP}.branch-1")

    again = invoke("sessions", "import", "--format", "chatgpt", "--branches=all", str(export_file))

    assert_exit(again, 0, "imported 0, unchanged 4, skipped 0")
    assert (show(TRIP), show(f"{TRIP}.branch-1")) == before


def test_a_conversation_grown_since_is_skipped_or_replaced(invoke, show, export_file):
    invoke("sessions", "import", "--branches", "all", str(export_file))
    grown = chatgpt_export()
    mapping = grown[1]["mapping"]
    mapping["a"]["children"] = ["q2"]
    mapping["q2"] = node("q2", "a", [], "user", "Und Straße?", 1_700_000_300)
    grown[1]["current_node"] = "q2"
    export_file.write_bytes(orjson.dumps(grown))

    skipped = invoke("sessions", "import", "--branches", "all", str(export_file))
    assert_exit(skipped, 0, "imported 0, unchanged 3, skipped 1", "skipped 'conv-2'")
    replaced = invoke(
        "sessions", "import", "--branches", "all", str(export_file), "--on-conflict", "replace"
    )
    assert_exit(replaced, 0, "imported 1, unchanged 3, skipped 0")
    assert turns(show("conv-2"))[-1] == ("user", "Und Straße?")


def test_imported_sessions_are_searchable(invoke, export_file):
    invoke("sessions", "import", "--format", "chatgpt", str(export_file))
    hits = orjson.loads(invoke("sessions", "search", "five-day", "--json").stdout)
    assert [(h["session_id"], h["seq"]) for h in hits] == [(TRIP, 3)]


def broken_conversations() -> list[tuple[object, str]]:
    cycle = copy.deepcopy(chatgpt_export()[1])
    cycle["mapping"]["r"]["parent"] = "a"
    orphan = copy.deepcopy(chatgpt_export()[1])
    orphan["mapping"]["q"]["parent"] = "gone"
    nameless = copy.deepcopy(chatgpt_export()[1])
    del nameless["id"]
    other = copy.deepcopy(chatgpt_export()[1])
    other["mapping"]["a"]["message"]["content"]["parts"] = ["Something else."]
    return [
        (cycle, "has a cycle"),
        (orphan, "message 'gone', the parent of 'q', is missing"),
        (nameless, "no usable conversation_id or id"),
        ({"title": "x"}, "not a ChatGPT conversation (no mapping)"),
        (other, "its id 'conv-2' is also the id of"),
    ]


@pytest.mark.parametrize(("broken", "fragment"), broken_conversations())
def test_a_conversation_that_cannot_be_read_is_reported_and_the_others_imported(
    invoke, session_ids, tmp_path, broken, fragment
):
    path = tmp_path / "conversations.json"
    path.write_bytes(orjson.dumps([chatgpt_export()[1], broken]))

    result = invoke("sessions", "import", "--format", "chatgpt", str(path))

    assert_exit(result, 3, f"could not read {path}: conversation #2: ", fragment)
    assert "imported 1, unchanged 0, skipped 0, could not read 1" in result.stderr
    assert session_ids() == ["conv-2"]


def test_the_same_conversation_twice_is_imported_once(invoke, session_ids, tmp_path):
    path = tmp_path / "conversations.json"
    path.write_bytes(orjson.dumps([chatgpt_export()[1], chatgpt_export()[1]]))

    assert_exit(invoke("sessions", "import", str(path)), 0, "imported 1,")
    assert session_ids() == ["conv-2"]


def test_a_file_with_no_chatgpt_conversation_exits_2(invoke, session_ids, tmp_path):
    path = tmp_path / "conversations.json"
    path.write_bytes(orjson.dumps([{"title": "x"}]))
    assert_usage_error(
        invoke("sessions", "import", "--format", "chatgpt", str(path)), "is not a ChatGPT export"
    )
    path.write_text("{nope")
    assert_usage_error(invoke("sessions", "import", "--format", "chatgpt", str(path)), "not JSON")
    assert session_ids() == []


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
    from foliko_cli.common.clock import now_ms

    from ..test_sessions_manage import DAY, store

    june_2024 = 1_717_200_000 - 1_700_000_000
    path = tmp_path / "conversations.json"
    path.write_bytes(orjson.dumps(shifted_times(chatgpt_export(), june_2024)))
    assert invoke("sessions", "import", "--format", "chatgpt", str(path)).exit_code == 0
    store(foliko_home, "unused", updated_at=now_ms() - 40 * DAY)
    result = invoke("sessions", "prune", "--older-than", "30d")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "unused\n"
    listed = orjson.loads(invoke("sessions", "list", "--json").stdout)
    kept = sorted(row["session_id"] for row in listed)
    assert "unused" not in kept and kept, kept
    imported = orjson.loads(invoke("sessions", "show", kept[0], "--json").stdout)
    assert imported["messages"][0]["created_at"] < now_ms() - 365 * DAY
