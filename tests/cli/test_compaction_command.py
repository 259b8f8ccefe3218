"""``sessions compact``, ``uncompact``, ``show --compactions``, the mark ``show``
puts where the model's view begins, and ``sessions tree``: on every backend a
process can reopen (json, sqlite, postgres, redis; memory is the library's,
tests/test_compaction.py), and their errors, one line each."""

from __future__ import annotations

import orjson
import pytest
from storage import damage, services

from .imports.conftest import assert_usage_error

PERSISTENT = ("json", "sqlite", "postgres", "redis")


@pytest.fixture(params=PERSISTENT)
def run(request, invoke, tmp_path):
    """``foliko --storage URL ...`` on a fresh store of each backend, echo model."""
    with services.backend_url(request.param, tmp_path) as url:

        def call(*args: str):
            return invoke("--storage", url, *args, env={"FOLIKO_MODEL": "echo"})

        yield call


def ok(result) -> str:
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stdout


def chat(run, session_id: str, *texts: str, extra: tuple[str, ...] = ()) -> None:
    for text in texts:
        ok(run("chat", "-s", session_id, *extra, text))


def test_compact_show_and_uncompact(run):
    chat(run, "s1", "first question", "second question", "third question")
    compacted = run("sessions", "compact", "s1", "--keep", "1", "--json")
    entry = orjson.loads(ok(compacted))
    assert (entry["covered"], entry["turns"], entry["status"]) == (4, [1, 2], "active")
    assert compacted.stderr == (
        "foliko: compacted 's1': turns 1–2 (messages 1–4) are now in the summary; "
        "the model's view begins at message 5\n"
    )
    assert orjson.loads(ok(run("sessions", "show", "s1", "--compactions", "--json"))) == [entry]
    usage = orjson.loads(ok(run("sessions", "show", "s1", "--json")))["usage"]
    assert usage["compression_input_tokens"] == entry["usage"]["input_tokens"] > 0
    assert usage["replies"] == 3

    listed = ok(run("sessions", "show", "s1", "--compactions")).splitlines()
    assert listed[0].startswith("compaction 1 · ")
    assert listed[0].endswith(" · summary by echo, asked for · in effect")
    assert listed[1:4] == [
        "  stands for turns 1–2 (messages 1–4); new in it: turns 1–2",
        f"  usage: {entry['usage']['input_tokens']:,} input, "
        f"{entry['usage']['output_tokens']:,} output tokens",
        "  summary:",
    ]
    assert "    user: second question" in listed

    shown = ok(run("sessions", "show", "s1")).splitlines()
    assert "view      from message 5 (see --compactions)" in shown
    mark = shown.index("── The model's view begins here: messages 1–4 are in the summary. ──")
    assert shown[mark + 3] == "third question" and shown[mark - 2] == "second question"
    markdown = ok(run("sessions", "show", "s1", "--format", "markdown")).splitlines()
    mark = markdown.index("> The model's view begins here: messages 1–4 are in the summary.")
    assert markdown[mark + 2].startswith("## 5. User")
    exported = ok(run("sessions", "export", "s1", "--format", "markdown")).splitlines()
    assert exported[mark:] == markdown[mark:], "the export marks the view as show does"
    assert "view begins here" in ok(run("sessions", "show", "s1", "--tail", "2"))
    tail = ok(run("sessions", "show", "s1", "--tail", "1"))
    assert "view begins here" not in tail, "the tail begins after it"

    undone = run("sessions", "uncompact", "s1", "--json")
    assert orjson.loads(ok(undone)) == {"uncompacted": "s1", "messages": 6}
    assert undone.stderr == "foliko: the next turn of 's1' sends its whole history (6 message(s))\n"
    assert "view begins here" not in ok(run("sessions", "show", "s1"))
    assert "· undone" in ok(run("sessions", "show", "s1", "--compactions")).splitlines()[0]
    shown = orjson.loads(ok(run("sessions", "show", "s1", "--json")))
    assert "covered" not in shown["compression_state"]
    assert len(shown["messages"]) == 6


def test_the_fork_tree_drawn_as_rows_and_as_json(run):
    chat(run, "s1", "one", "two", "three")
    chat(run, "s2", "diverge", extra=("--from", "s1", "--turns", "2"))
    chat(run, "s3", "again", extra=("--from", "s2", "--turns", "1"))
    chat(run, "s4", "all of it", extra=("--from", "s1"))
    chat(run, "lone", "alone")

    assert ok(run("sessions", "tree")) == (
        "session_id\tparent\tturn\ns1\t\t\ns2\ts1\t2\ns3\ts2\t1\ns4\ts1\t3\nlone\t\t\n"
    )
    assert ok(run("sessions", "tree", "s3", "--format", "tree")) == (
        "s1 · 6 message(s)\n"
        "├── s2 · 6 message(s) · forked after turn 2\n"
        "│   └── s3 · 4 message(s) · forked after turn 1\n"
        "└── s4 · 8 message(s) · forked after turn 3\n"
    )
    rows = orjson.loads(ok(run("sessions", "tree", "--json")))
    assert [(r["session_id"], r["depth"], r["message"]) for r in rows] == [
        ("s1", 0, None),
        ("s2", 1, 4),
        ("s3", 2, 2),
        ("s4", 1, 6),
        ("lone", 0, None),
    ]
    shown = orjson.loads(ok(run("sessions", "show", "s3", "--json")))
    assert {k: shown["metadata"][k] for k in ("forked_from", "forked_at_turn")} == {
        "forked_from": "s2",
        "forked_at_turn": 1,
    }
    ok(run("sessions", "delete", "s2"))
    assert ok(run("sessions", "tree", "s3", "--format", "tree")) == (
        "s3 · 4 message(s) · forked after turn 1 · from 's2', which is not stored\n"
    )


def test_imported_branches_are_forks_in_the_tree(invoke, tmp_path):
    export = [
        {
            "id": "conv",
            "title": "t",
            "create_time": 1_700_000_000.0,
            "update_time": 1_700_000_009.0,
            "current_node": "a2",
            "mapping": {
                "root": _node("root", None, ["u1"]),
                "u1": _node("u1", "root", ["a1"], "user", "hi", 1),
                "a1": _node("a1", "u1", ["u2", "u2-edit"], "assistant", "hello", 2),
                "u2": _node("u2", "a1", ["a2"], "user", "more", 3),
                "a2": _node("a2", "u2", [], "assistant", "sure", 4),
                "u2-edit": _node("u2-edit", "a1", ["a2-edit"], "user", "less", 5),
                "a2-edit": _node("a2-edit", "u2-edit", [], "assistant", "fine", 6),
            },
        }
    ]
    source = tmp_path / "conversations.json"
    source.write_bytes(orjson.dumps(export))
    ok(invoke("sessions", "import", "--branches", "all", str(source)))
    assert ok(invoke("sessions", "tree", "--format", "tree")) == (  # the branch's own messages
        "conv · 4 message(s)\n└── conv.branch-1 · 2 message(s) · forked after turn 1\n"
    )


def _node(node_id, parent, children, role=None, text=None, at=0):
    message = None
    if role is not None:
        message = {
            "id": node_id,
            "author": {"role": role, "metadata": {}},
            "create_time": 1_700_000_000.0 + at,
            "content": {"content_type": "text", "parts": [text]},
            "status": "finished_successfully",
            "metadata": {},
            "recipient": "all",
        }
    return {"id": node_id, "message": message, "parent": parent, "children": children}


@pytest.fixture
def three_turns(invoke):
    for text in ("one", "two", "three"):
        ok(invoke("chat", "-s", "s", text, env={"FOLIKO_MODEL": "echo"}))


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (("compact", "nope"), ("session 'nope' not found",)),
        (("uncompact", "nope"), ("session 'nope' not found",)),
        (("show", "nope", "--compactions"), ("session 'nope' not found",)),
        (("tree", "nope"), ("session 'nope' not found",)),
        (("compact", "s", "--keep", "-1"), ("invalid value for '--keep'", "-1")),
        (("compact", "s", "--keep", "two"), ("invalid value for '--keep'", "'two'")),
        (
            ("compact", "s", "--keep", "3"),
            (
                "session 's' has nothing to compact: it has 3 turn(s), and keeping the last 3 "
                "keeps them all; keep fewer of its last turns verbatim (--keep N)",
            ),
        ),
        (("compact", "s"), ("nothing to compact", "fit in the part of the window")),
        (("uncompact", "s"), ("session 's' is not compacted", "compact it first")),
        (("compact",), ("name one session: foliko sessions compact ID",)),
        (("compact", "s", "t"), ("name only one session",)),
        (("tree", "s", "t"), ("name at most one session: foliko sessions tree [ID]",)),
    ],
)
def test_errors_are_one_line_and_change_nothing(invoke, three_turns, args, fragments):
    before = ok(invoke("sessions", "show", "s", "--json"))
    result = invoke("sessions", *args, env={"FOLIKO_MODEL": "echo"})
    assert_usage_error(result, *fragments)
    assert result.stderr.startswith("foliko: error: ")
    assert ok(invoke("sessions", "show", "s", "--json")) == before


def test_a_damaged_session_is_exit_3_and_marked_in_the_tree(invoke, tmp_path, foliko_home):
    with services.backend_url("sqlite", tmp_path) as url:

        def foliko(*args: str):
            return invoke("--storage", url, *args, env={"FOLIKO_MODEL": "echo"})

        for text in ("one", "two"):
            ok(foliko("chat", "-s", "victim", text))
        damage.damage_at(url, foliko_home, "victim", "message-lost")
        for args in (("compact", "victim", "--keep", "0"), ("uncompact", "victim")):
            result = foliko("sessions", *args)
            assert result.exit_code == 3, result.stderr
            (line,) = result.stderr.splitlines()
            assert line.startswith("foliko: error: session 'victim' is damaged")
        listed = foliko("sessions", "show", "victim", "--compactions")
        assert listed.exit_code == 3
        tree = foliko("sessions", "tree", "--json")
        [row] = orjson.loads(ok(tree))
        assert row["session_id"] == "victim" and row["error"]
        assert "session 'victim' is damaged" in tree.stderr
