"""Bounded imports (SPEC R11): a conversation tree costs what its messages do, not
a copy of a prefix per branch; a message over the size limit is named and
left out, in memory about twice its size; a byte order mark is no error; an
empty path is not the current directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from foliko_cli.messages.record import MAX_MESSAGE_CHARS

from .conftest import assert_exit, assert_usage_error

FOLIKO = str(Path(sys.executable).with_name("foliko"))
NODES = 600  # a line of NODES messages with a side branch at every one
TEXT = "w" * 200


def chatgpt_tree(n: int = NODES) -> bytes:
    mapping = {"root": {"id": "root", "message": None, "parent": None, "children": []}}
    previous = "root"
    for i in range(n):
        for key, text in ((f"s{i}", f"side {i} {TEXT}"), (f"m{i}", f"line {i} {TEXT}")):
            role = "user" if i % 2 == 0 else "assistant"
            content = {"content_type": "text", "parts": [text]}
            message = {"id": key, "author": {"role": role}, "content": content, "metadata": {}}
            mapping[key] = {"id": key, "parent": previous, "children": [], "message": message}
            mapping[previous]["children"].append(key)
        previous = f"m{i}"
    tree = {"id": "tree", "title": "Tree", "mapping": mapping, "current_node": previous}
    return orjson.dumps([tree])


def claude_tree(n: int = NODES) -> bytes:
    messages, previous = [], None
    for i in range(n):
        sender = "human" if i % 2 == 0 else "assistant"
        for key, text in ((f"s{i}", f"side {i} {TEXT}"), (f"m{i}", f"line {i} {TEXT}")):
            messages.append(
                {"uuid": key, "text": text, "sender": sender, "parent_message_uuid": previous}
            )
        previous = f"m{i}"
    tree = {"uuid": "tree", "name": "Tree", "chat_messages": messages}
    return orjson.dumps([{**tree, "current_leaf_message_uuid": previous}])


def openwebui_tree(n: int = NODES) -> bytes:
    nodes, previous = {}, None
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        for key, text in ((f"s{i}", f"side {i} {TEXT}"), (f"m{i}", f"line {i} {TEXT}")):
            nodes[key] = {"id": key, "parentId": previous, "role": role, "content": text}
        previous = f"m{i}"
    history = {"messages": nodes, "currentId": previous}
    return orjson.dumps([{"id": "tree", "title": "Tree", "chat": {"history": history}}])


def librechat_tree(n: int = NODES) -> bytes:
    messages, previous = [], "00000000-0000-0000-0000-000000000000"
    for i in range(n):
        user = i % 2 == 0
        # the side branch comes after the line: LibreChat shows the newest child
        for key, text in ((f"m{i}", f"line {i} {TEXT}"), (f"s{i}", f"side {i} {TEXT}")):
            messages.append(
                {"messageId": key, "parentMessageId": previous, "text": text}
                | {"isCreatedByUser": user, "sender": "User" if user else "GPT"}
            )
        previous = f"m{i}"
    messages.sort(key=lambda m: m["messageId"].startswith("m"))  # the line last: shown
    return orjson.dumps({"conversationId": "tree", "title": "Tree", "messages": messages})


def claude_code_tree(n: int = NODES) -> bytes:
    lines, previous = [], None
    for i in range(n):
        kind = "user" if i % 2 == 0 else "assistant"
        for key, text in ((f"s{i}", f"side {i} {TEXT}"), (f"m{i}", f"line {i} {TEXT}")):
            message = {"role": kind, "content": text}
            if kind == "assistant":
                message = {
                    **message,
                    "id": f"msg-{key}",
                    "content": [{"type": "text", "text": text}],
                }
            record = {"type": kind, "uuid": key, "parentUuid": previous, "sessionId": "tree"}
            lines.append(orjson.dumps({**record, "message": message}))
        previous = f"m{i}"
    return b"\n".join(lines) + b"\n"


TREES = {
    "chatgpt": (chatgpt_tree, "conversations.json"),
    "claude": (claude_tree, "conversations.json"),
    "openwebui": (openwebui_tree, "chat-export-1.json"),
    "librechat": (librechat_tree, "export.json"),
    "claude-code": (claude_code_tree, "tree.jsonl"),
}


def stored(invoke) -> dict[str, int]:
    listed = invoke("sessions", "list", "--json")
    return {row["session_id"]: row["message_count"] for row in orjson.loads(listed.stdout)}


@pytest.mark.parametrize("fmt", sorted(TREES))
def test_a_tree_with_a_branch_at_every_node_stays_its_own_size(
    invoke, show, tmp_path, foliko_home, fmt
):
    """Was: a 944 KB ChatGPT export became 2,001 sessions and 2,005,000 messages."""
    make, name = TREES[fmt]
    path = tmp_path / name
    path.write_bytes(make())

    shown = invoke("sessions", "import", "--format", fmt, str(path))
    assert_exit(shown, 0, "imported 1,", f"left out {NODES} branch(es) (--branches all")
    assert stored(invoke) == {"tree": NODES}

    everything = invoke("sessions", "import", "--format", fmt, "--branches", "all", str(path))
    assert_exit(everything, 0, f"imported {NODES}, unchanged 1")
    counts = stored(invoke)
    assert len(counts) == NODES + 1
    assert sum(counts.values()) == 2 * NODES  # each message once
    side = show(f"tree.branch-{NODES}")  # the side branch at the last node
    assert [m["content"] for m in side["messages"]] == [f"side {NODES - 1} {TEXT}"]
    meta = side["metadata"]
    assert (meta["forked_from"], meta["forked_at_message"]) == ("tree", NODES - 1)
    assert meta["own_messages_only"] is True
    database = foliko_home / "sessions.db"
    assert database.stat().st_size < 8 * path.stat().st_size


def run_measured(args: list[str], env: dict[str, str]) -> tuple[int, bytes, int]:
    """(exit status, stderr, peak resident bytes) of one foliko process."""
    process = subprocess.Popen(
        [FOLIKO, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert process.stderr is not None
    err = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, err, usage.ru_maxrss * 1024


def conversation(cid: str, text: str) -> dict:
    message = {"id": "a", "author": {"role": "user"}, "content": {"parts": [text]}}
    mapping = {"a": {"id": "a", "parent": None, "children": [], "message": message}}
    return {"id": cid, "title": cid, "mapping": mapping, "current_node": "a"}


def test_a_message_over_the_limit_is_named_and_held_about_twice(tmp_path, foliko_home):
    """Was: a 1 GB message peaked at 3.1 GB of memory, then nothing was imported."""
    env = {**os.environ, "FOLIKO_HOME": str(foliko_home)}
    small, large = tmp_path / "small.json", tmp_path / "large.json"
    small.write_bytes(orjson.dumps([conversation("before", "hi")]))
    size = 3 * MAX_MESSAGE_CHARS
    huge = conversation("huge", "x" * size)
    large.write_bytes(
        orjson.dumps([conversation("before", "hi"), huge, conversation("after", "bye")])
    )

    code, _, baseline = run_measured(["sessions", "import", str(small)], env)
    assert code == 0
    code, err, peak = run_measured(["sessions", "import", str(large)], env)

    assert code == 3, err
    lines = err.decode().splitlines()
    assert lines[0] == (
        f"foliko: error: could not read {large}: conversation #2: message 1 (user) holds "
        f"{size:,} characters, over the {MAX_MESSAGE_CHARS:,} a message may hold"
    )
    assert "imported 1, unchanged 1, skipped 0, could not read 1" in lines[1]
    assert peak - baseline < 2.4 * size, f"{(peak - baseline) / size:.2f} times the message"


def test_a_foliko_export_with_a_message_over_the_limit_imports_nothing(invoke, tmp_path):
    record = {
        "session_id": "big",
        "messages": [{"role": "user", "content": "x" * (MAX_MESSAGE_CHARS + 1)}],
    }
    path = tmp_path / "backup.ndjson"
    path.write_bytes(
        orjson.dumps({"session_id": "ok", "messages": []}) + b"\n" + orjson.dumps(record)
    )
    result = invoke("sessions", "import", str(path))
    assert_usage_error(result, "session #2 ('big'): message 1 (user) holds", "nothing imported")
    assert stored(invoke) == {}


BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("conversations.json", orjson.dumps([conversation("bommed", "hello")])),
        ("backup.ndjson", orjson.dumps({"session_id": "bommed", "messages": []}) + b"\n"),
        ("backup.json", orjson.dumps([{"session_id": "bommed", "messages": []}])),
        ("tree.jsonl", claude_code_tree(2).replace(b'"tree"', b'"bommed"')),
    ],
)
def test_a_utf8_file_with_a_byte_order_mark_is_imported(invoke, tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(BOM + data)
    result = invoke("sessions", "import", str(path))
    assert_exit(result, 0, "imported 1,")
    assert list(stored(invoke)) == ["bommed"]
    piped = invoke("sessions", "import", "-", input=BOM + data)
    assert_exit(piped, 0, "unchanged 1")


def test_an_empty_path_is_refused_not_taken_for_this_directory(invoke, tmp_path):
    """`sessions import "$(llm logs path)"` when llm is missing."""
    (tmp_path / "conversations.json").write_bytes(orjson.dumps([conversation("here", "x")]))
    for words in (["sessions", "import", ""], ["sessions", "import", "--format", "llm", ""]):
        result = invoke(*words)
        assert_usage_error(result, "the source to import is empty")
    assert stored(invoke) == {}
