"""Compaction you can see and steer, and the fork tree, through the library on
every backend (issue 27 items 3 and 4).

A compaction is listed with its summary, the turns it stands for and its
model call's usage; ``compact`` compresses now, ``uncompact`` gives the model
the whole history again from the next turn, and what the next turn sends
proves both. Every session records what it was forked from and where;
``session_tree`` lists the families.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from storage import services

from foliko_cli import Foliko
from foliko_cli.common.clock import now_ms
from foliko_cli.engine.compression import SUMMARY_HEADING
from foliko_cli.errors import NothingToCompactError, SessionNotFoundError, UsageError
from foliko_cli.messages.record import SessionRecord
from foliko_cli.models.base import ModelRequest, ModelResponse
from foliko_cli.models.echo import EchoModel

BACKENDS = ("memory", "json", "sqlite", "postgres", "redis")
SUMMARY_USAGE = {"input_tokens": 1000, "output_tokens": 7}
MODEL_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name", "is_error")


class Recording(EchoModel):
    """The echo model, keeping every request; a summary costs SUMMARY_USAGE."""

    def __init__(self, context_window: int = 8192) -> None:
        super().__init__(context_window)
        self.requests: list[ModelRequest] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        response = await super().generate(request)
        if request.purpose == "summary":
            return response._replace(usage=SUMMARY_USAGE)
        return response

    @property
    def last_turn(self) -> ModelRequest:
        return [r for r in self.requests if r.purpose == "turn"][-1]


@pytest.fixture(params=BACKENDS)
def url(request, tmp_path: Path) -> Iterator[str]:
    if request.param == "memory":
        yield "memory"
        return
    with services.backend_url(request.param, tmp_path) as found:
        yield found


@pytest.fixture
def model() -> Recording:
    return Recording()


@pytest.fixture
def foliko(url: str, model: Recording, tmp_path: Path) -> Iterator[Foliko]:
    with Foliko(url, model, home=tmp_path / "home") as opened:
        yield opened


def sent(messages: list[dict]) -> list[dict]:
    return [{k: m[k] for k in MODEL_KEYS if k in m} for m in messages]


def chat_turns(foliko: Foliko, session_id: str, count: int, start: int = 1) -> None:
    for number in range(start, start + count):
        foliko.chat(session_id, f"turn {number}: the quick brown fox")


def again(url: str, tmp_path: Path) -> Foliko:
    """A second library user of the same store (another process, as it were)."""
    return Foliko(url, Recording(), home=tmp_path / "home")


def test_compact_keeps_the_last_turns_and_the_next_turn_sends_the_summary_and_them(
    foliko, model, url, tmp_path
):
    chat_turns(foliko, "s", 4)
    entry = foliko.compact("s", keep=1)

    assert {k: entry[k] for k in ("number", "trigger", "method", "model", "from", "covered")} == {
        "number": 1,
        "trigger": "manual",
        "method": "summary",
        "model": "echo",
        "from": 0,
        "covered": 6,
    }
    assert (entry["turns"], entry["new_turns"], entry["status"]) == ([1, 3], [1, 3], "active")
    assert entry["usage"] == SUMMARY_USAGE
    assert "turn 3: the quick brown fox" in entry["summary"]
    record = foliko.get_session("s")
    assert len(record.messages) == 8, "the history itself stays whole"
    assert record.compression_state["covered"] == 6
    assert record.compression_state["summary"] == entry["summary"]
    assert record.metadata["compression_count"] == 1

    foliko.chat("s", "turn 5")
    assert model.last_turn.system == f"{SUMMARY_HEADING}\n{entry['summary']}"
    after = foliko.get_session("s")
    assert model.last_turn.messages == sent(after.messages[6:-1])
    assert "compactions" not in after.compression_state, "the next reply took it"
    [kept] = after.messages[-1]["compactions"]
    assert kept == {k: v for k, v in entry.items() if k not in ("turns", "new_turns", "status")}
    assert foliko.compactions("s") == [entry]
    totals = foliko.usage()["total"]
    assert totals["compression_input_tokens"] == 1000
    assert totals["compression_output_tokens"] == 7
    if url != "memory":
        with again(url, tmp_path) as other:
            assert other.compactions("s") == [entry]


def test_a_compaction_waiting_for_a_turn_is_listed_and_counted(foliko):
    chat_turns(foliko, "s", 3)
    replies = foliko.usage()["total"]["replies"]
    entry = foliko.compact("s", keep=0)

    assert (entry["covered"], entry["turns"]) == (6, [1, 3])
    assert foliko.compactions("s") == [entry]
    totals = foliko.usage()["total"]
    assert totals["replies"] == replies, "a compaction is not a reply"
    assert totals["compression_input_tokens"] == 1000
    by_model = foliko.usage(by="model")["rows"]
    assert [row["compression_output_tokens"] for row in by_model] == [7]


def test_keep_zero_sends_only_the_summary_and_the_new_message(foliko, model):
    chat_turns(foliko, "s", 2)
    entry = foliko.compact("s", keep=0)
    foliko.chat("s", "what now?")
    assert model.last_turn.system.endswith(entry["summary"])
    assert model.last_turn.messages == [{"role": "user", "content": "what now?"}]


def test_a_second_compaction_folds_in_the_first(foliko):
    chat_turns(foliko, "s", 3)
    first = foliko.compact("s", keep=1)
    chat_turns(foliko, "s", 2, start=4)
    second = foliko.compact("s", keep=1)

    assert (second["number"], second["from"], second["covered"]) == (2, 4, 8)
    assert (second["turns"], second["new_turns"]) == ([1, 4], [3, 4])
    assert "[Earlier summary]" in second["summary"]
    listed = foliko.compactions("s")
    assert [(e["number"], e["status"]) for e in listed] == [(1, "folded"), (2, "active")]
    assert listed[0]["summary"] == first["summary"]


def test_uncompact_sends_the_whole_history_from_the_next_turn(foliko, model, url, tmp_path):
    chat_turns(foliko, "s", 3)
    foliko.compact("s", keep=1)
    revision = foliko.get_session("s").revision
    uncompacted = foliko.uncompact("s")

    assert uncompacted.first_seq == 6 and uncompacted.revision != revision
    state = foliko.get_session("s").compression_state
    assert "summary" not in state and "covered" not in state
    foliko.chat("s", "turn 4")
    whole = foliko.get_session("s")
    assert model.last_turn.system is None
    assert model.last_turn.messages == sent(whole.messages[:-1])
    assert len(whole.messages) == 8
    assert [(e["number"], e["status"]) for e in foliko.compactions("s")] == [(1, "undone")]
    assert whole.metadata["compression_count"] == 1
    if url != "memory":
        with again(url, tmp_path) as other:
            assert [e["status"] for e in other.compactions("s")] == ["undone"]
    again_compacted = foliko.compact("s", keep=1)
    assert (again_compacted["number"], again_compacted["from"]) == (2, 0)
    assert "[Earlier summary]" not in again_compacted["summary"]
    statuses = [e["status"] for e in foliko.compactions("s")]
    assert statuses == ["undone", "active"]


@pytest.mark.parametrize(
    ("call", "error", "fragment"),
    [
        (lambda f: f.compact("s", keep=3), NothingToCompactError, "it has 3 turn(s)"),
        (lambda f: f.compact("s", keep=9), NothingToCompactError, "keeping the last 9"),
        (lambda f: f.compact("s"), NothingToCompactError, "fit in the part of the window"),
        (lambda f: f.compact("s", keep=-1), UsageError, "cannot keep -1 turns"),
        (lambda f: f.compact("s", keep=True), UsageError, "cannot keep True turns"),
        (lambda f: f.compact("nope"), SessionNotFoundError, "'nope' not found"),
        (lambda f: f.uncompact("s"), UsageError, "is not compacted"),
        (lambda f: f.uncompact("nope"), SessionNotFoundError, "'nope' not found"),
        (lambda f: f.compactions("nope"), SessionNotFoundError, "'nope' not found"),
        (lambda f: f.session_tree("nope"), SessionNotFoundError, "'nope' not found"),
    ],
)
def test_a_refused_compaction_changes_nothing(foliko, call, error, fragment):
    chat_turns(foliko, "s", 3)
    before = foliko.get_session("s")
    with pytest.raises(error) as caught:
        call(foliko)
    assert fragment in str(caught.value)
    assert caught.value.exit_code == 2
    assert foliko.get_session("s") == before


def test_the_fork_tree_of_every_kind_of_fork(foliko):
    chat_turns(foliko, "s1", 3)
    foliko.fork_session("s1", "a", turns=1)
    foliko.chat("b", "its own turn", fork_from="a")
    foliko.chat("c", "after two", fork_from="s1", turns=2)
    foliko.import_sessions(
        [
            SessionRecord(
                "s1.branch-1",
                messages=[{"role": "user", "content": "x"}],
                metadata={
                    "created_at": now_ms(),
                    "forked_from": "s1",
                    "forked_at_message": 0,
                    "forked_at_turn": 0,
                },
            )
        ]
    )
    chat_turns(foliko, "lone", 1)

    rows = foliko.session_tree()
    shape = [(r["session_id"], r["parent"], r["turn"], r["message"], r["depth"]) for r in rows]
    assert shape == [
        ("s1", None, None, None, 0),
        ("a", "s1", 1, 2, 1),
        ("b", "a", 1, 2, 2),
        ("c", "s1", 2, 4, 1),
        ("s1.branch-1", "s1", 0, 0, 1),
        ("lone", None, None, None, 0),
    ]
    assert [r["message_count"] for r in rows] == [6, 2, 4, 6, 1, 2]
    assert foliko.session_tree("b") == rows[:5], "a family is the whole tree of its root"
    assert foliko.get_session("c").metadata["forked_from"] == "s1"

    foliko.delete_sessions(["a"])
    orphan = foliko.session_tree("b")
    assert [(r["session_id"], r["parent"], r["parent_missing"], r["depth"]) for r in orphan] == [
        ("b", "a", True, 0)
    ]


def test_a_loop_of_origins_is_cut_where_it_closes(foliko):
    chat_turns(foliko, "x", 1)
    foliko.fork_session("x", "y")
    foliko.update_metadata("x", {"forked_from": "y"})  # as ids reused after renames leave it

    rows = foliko.session_tree()
    assert [(r["session_id"], r["depth"]) for r in rows] == [("y", 0), ("x", 1)]
    assert foliko.session_tree("x") == rows


def test_a_fork_of_a_compacted_session_keeps_only_what_holds_for_its_part(foliko):
    chat_turns(foliko, "s", 4)
    entry = foliko.compact("s", keep=1)
    whole = foliko.fork_session("s", "whole")
    early = foliko.fork_session("s", "early", turns=2)

    assert whole.compression_state["covered"] == entry["covered"]
    assert [e["number"] for e in foliko.compactions("whole")] == [1]
    assert early.compression_state == {}
    assert foliko.compactions("early") == []
    assert early.metadata["forked_at_turn"] == 2 and early.metadata["forked_at_message"] == 4


def test_turns_log_their_own_compactions_on_their_replies(tmp_path):
    model = Recording()
    with Foliko("memory", model, home=tmp_path, context_window=600) as foliko:
        chat_turns(foliko, "s", 30)
        record = foliko.get_session("s")
        listed = foliko.compactions("s")

    state = record.compression_state
    assert len(listed) == record.metadata["compression_count"] >= 2
    assert [e["number"] for e in listed] == list(range(1, len(listed) + 1))
    assert {e["trigger"] for e in listed} == {"auto"}
    assert [e["status"] for e in listed] == ["folded"] * (len(listed) - 1) + ["active"]
    assert (listed[-1]["covered"], listed[-1]["summary"]) == (state["covered"], state["summary"])
    for entry in listed[1:]:
        previous = listed[entry["number"] - 2]
        assert entry["from"] == previous["covered"]
    carriers = [m for m in record.messages if m.get("compactions")]
    for message in carriers:
        usage = [e["usage"] for e in message["compactions"]]
        assert message["compression_usage"] == {
            key: sum(u[key] for u in usage) for key in SUMMARY_USAGE
        }
    summaries = {e["summary"] for e in listed}
    told = {r.system.removeprefix(f"{SUMMARY_HEADING}\n") for r in model.requests if r.system}
    assert summaries <= told | {None}, "every summary listed is one the model was sent"


def test_a_summary_from_before_the_log_is_listed_as_one_entry(tmp_path):
    with Foliko("memory", "echo", home=tmp_path) as foliko:
        chat_turns(foliko, "old", 2)
        record = foliko.get_session("old")
        record.compression_state = {"summary": "earlier", "covered": 2, "method": "summary"}
        foliko.run(foliko.storage.save(record, expected_revision=record.revision))
        [entry] = foliko.compactions("old")

    assert (entry["number"], entry["summary"], entry["covered"]) == (None, "earlier", 2)
    assert (entry["turns"], entry["status"], entry["usage"]) == ([1, 1], "active", None)


class Summariser(Recording):
    name = "summariser"


def test_a_compaction_counts_under_its_own_model_and_time_after_the_next_turn(tmp_path):
    with Foliko("memory", Recording(), home=tmp_path) as foliko:
        chat_turns(foliko, "s", 3)
        entry = foliko.compact("s", keep=1, model=Summariser())
        foliko.chat("s", "next")
        by_model = {row["model"]: row for row in foliko.usage(by="model")["rows"]}
        later = foliko.usage(since=entry["at"] + 1)["total"]

    assert entry["model"] == "summariser"
    assert by_model["summariser"]["replies"] == 0
    assert by_model["summariser"]["compression_input_tokens"] == 1000
    assert "compression_input_tokens" not in by_model["echo"]
    assert by_model["echo"]["replies"] == 4
    assert "compression_input_tokens" not in later, "counted at its own time, not the reply's"


def test_a_compaction_in_effect_stays_listed_when_its_reply_goes(foliko):
    """rewind, regenerate and a fork can drop the reply that keeps a compaction
    whose summary still holds: it then waits for the next reply again."""
    chat_turns(foliko, "s", 3)
    entry = foliko.compact("s", keep=1)
    foliko.chat("s", "turn 4")  # its reply now keeps the compaction
    early = foliko.fork_session("s", "early", turns=3)

    assert early.compression_state["covered"] == entry["covered"]
    assert foliko.compactions("early") == [entry]
    rewound = foliko.rewind_session("s")
    assert [e["number"] for e in rewound.compression_state["compactions"]] == [1]
    assert foliko.compactions("s") == [entry]
    foliko.chat("s", "turn 4 again")
    foliko.chat("s", None, regenerate=True)
    assert foliko.compactions("s") == [entry]
    [carrier] = [m for m in foliko.get_session("s").messages if m.get("compactions")]
    assert carrier["content"] == "turn 4 again"
    by_session = {row["session"]: row for row in foliko.usage()["rows"]}
    assert by_session["s"]["compression_input_tokens"] == 1000, "counted once"


def test_a_turn_looks_up_no_fragment_of_a_message_summarised_earlier(tmp_path: Path):
    """A long-lived facade holds a session's whole history; a turn reads the
    fragments of what the model may still read, never scans the rest (P2): a
    text lost long ago, behind the summary, is not asked for on every turn."""
    import asyncio

    from foliko_cli.storage.memory import MemoryStorage

    class Asked(MemoryStorage):
        def __init__(self) -> None:
            super().__init__()
            self.asked: list[set[str]] = []

        async def get_fragments(self, hashes):
            self.asked.append(set(hashes))
            return await super().get_fragments(hashes)

    lost = "0" * 64
    storage = Asked()
    now = now_ms()
    old = {"role": "user", "content": "see", "created_at": now, "fragments": [{"sha256": lost}]}
    record = SessionRecord(
        "s",
        messages=[old, {"role": "assistant", "content": "seen", "created_at": now}],
        metadata={"created_at": now, "last_active": now},
    )
    asyncio.run(storage.save(record, expected_revision=0))
    with Foliko(storage=storage, model="echo", home=tmp_path) as foliko:
        foliko.chat("s", "first")
        assert any(lost in hashes for hashes in storage.asked), "the text is missing"
        foliko.compact("s", keep=1)
        storage.asked.clear()
        foliko.chat("s", "second")
        foliko.chat("s", "third")
        assert foliko.get_session("s").metadata["message_count"] == 8
    assert not any(lost in hashes for hashes in storage.asked)
