"""`sessions import` of Codex CLI rollouts: the ones the real ``codex exec`` writes
while it talks to ``foliko serve`` (the npm package tests/serve/node pins; skipped
without npm unless FOLIKO_REQUIRE_SERVICES=1), and a rollout in the shape of the
0.4x releases with what the echo model cannot make Codex write (an image, a
patch, an undone turn)."""

from __future__ import annotations

import base64
import shutil
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from serve.node_clients import NodeClients, node_clients, run_codex, trapped_network
from serve.servers import ServeProcess, foliko_env

from .conftest import DATA, assert_exit, assert_usage_error, turns

OLD = "0199a7e2-4b5c-7d6e-8f90-a1b2c3d4e5f6"
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


# the shape of the 0.4x releases


def test_a_rollout_with_an_image_a_patch_and_an_undone_turn(invoke, show):
    sessions = DATA / "codex" / "sessions"

    result = invoke("sessions", "import", "--format", "codex", "--branches", "all", str(sessions))

    assert_exit(result, 0, "imported 2, unchanged 0, skipped 0")
    assert "left out 3 hidden, reasoning or unsupported item(s)" in result.stderr
    session = show(OLD)
    listed = '{"output":"README.md\\ncli.py\\n","metadata":{"exit_code":0,"duration_seconds":0.0}}'
    patched = '{"output":"Success. Updated the following files:\\nM cli.py\\n",'
    assert turns(session) == [
        ("user", "List the files, and look at this screenshot"),
        ("assistant", ""),
        ("tool", listed),
        ("assistant", "Two files: README.md and cli.py. The screenshot shows a terminal."),
        ("user", "Add a --verbose flag to cli.py"),
        ("assistant", ""),
        ("tool", patched + '"metadata":{"exit_code":0}}'),
        ("assistant", "Added --verbose."),
    ]
    (image,) = session["messages"][0]["attachments"]
    assert base64.b64decode(image["data"]) == PNG
    shell = session["messages"][1]
    assert shell["tool_calls"] == [
        {
            "id": "call_Ls01",
            "name": "shell",
            "arguments": {"command": ["bash", "-lc", "ls"], "workdir": "/home/ada/proj"},
        }
    ]
    assert shell["usage"] == {"input_tokens": 4100, "output_tokens": 40, "cached_tokens": 3000}
    assert shell["model"] == "gpt-5-codex"
    assert session["messages"][3]["usage"]["reasoning_tokens"] == 8
    patch = session["messages"][5]["tool_calls"][0]
    assert patch["name"] == "apply_patch" and patch["arguments"].startswith("*** Begin Patch")
    assert session["messages"][6]["name"] == "apply_patch"
    assert session["metadata"]["title"] == "Files and a screenshot"
    assert session["metadata"]["cwd"] == "/home/ada/proj"
    assert session["metadata"]["created_at"] == 1_759_413_600_100
    undone = show(f"{OLD}.branch-1")
    assert turns(undone) == [  # its own messages: the 4 before are OLD's
        ("user", "Delete cli.py"),
        ("assistant", "Are you sure? It is the entry point."),
    ]
    assert undone["metadata"]["forked_from"] == OLD
    assert undone["metadata"]["forked_at_message"] == 4


def test_a_rollout_that_is_not_whole(invoke, show, copied):
    path = next(copied("codex/sessions").rglob("rollout-*.jsonl"))
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:12]) + "{not json\n")

    result = invoke("sessions", "import", str(path))

    assert_exit(result, 3, "line 13 is not JSON", "imported 1,")
    assert turns(show(OLD))[-1][0] == "assistant"
    path.write_text("".join(lines[1:]))
    assert_usage_error(
        invoke("sessions", "import", "--format", "codex", str(path)), "no session_meta line"
    )


# written by the real codex exec


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> NodeClients:
    return node_clients(tmp_path_factory.mktemp("node-clients"))


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[ServeProcess]:
    home = tmp_path_factory.mktemp("serve-home")
    running = ServeProcess([], foliko_env(home), [], home=home)
    try:
        yield running.wait_ready()
    finally:
        running.kill()


def _thread(events: list[dict]) -> str:
    return next(e["thread_id"] for e in events if e["type"] == "thread.started")


@pytest.fixture(scope="module")
def rollouts(node, server, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """Codex's sessions directory after: a prompt; a prompt whose answer runs a
    command, resumed with another prompt; a fork of the first session."""
    where = tmp_path_factory.mktemp("codex")
    threads = {}
    with trapped_network() as trap:
        for name, args in [
            ("hi", ("say hi",)),
            ("tool", ('/tool exec_command {"cmd": "echo codex-ran-this"}',)),
        ]:
            done, events = run_codex(node, where, trap, server.base_url, *args)
            assert done.returncode == 0, done.stdout + done.stderr
            threads[name] = _thread(events)
        for args in [
            ("resume", threads["tool"], "and once more"),
            ("fork", threads["hi"], "forked prompt"),
        ]:
            done, events = run_codex(node, where, trap, server.base_url, *args)
            assert done.returncode == 0, done.stdout + done.stderr
        threads["fork"] = _thread(events)
    return where / "codex-home" / "sessions", threads


@pytest.mark.slow
def test_the_sessions_codex_exec_wrote(invoke, show, session_ids, rollouts):
    sessions, threads = rollouts

    result = invoke("sessions", "import", str(sessions))

    assert_exit(result, 0, "imported 3, unchanged 0, skipped 0")
    assert session_ids() == sorted(threads.values())
    hi = show(threads["hi"])
    assert turns(hi) == [("user", "say hi"), ("assistant", "say hi")]
    assert hi["messages"][1]["model"] == "echo"
    assert hi["messages"][1]["usage"]["input_tokens"] > 0
    assert hi["metadata"]["imported_from"] == "codex"
    tool = show(threads["tool"])
    assert [m["role"] for m in tool["messages"]] == [
        "user", "assistant", "tool", "assistant", "user", "assistant"
    ]  # fmt: skip
    (call,) = tool["messages"][1]["tool_calls"]
    assert (call["name"], call["arguments"]) == ("exec_command", {"cmd": "echo codex-ran-this"})
    assert tool["messages"][2]["tool_call_id"] == call["id"]
    assert "codex-ran-this" in tool["messages"][2]["content"]
    assert turns(tool)[-2:] == [("user", "and once more"), ("assistant", "and once more")]
    fork = show(threads["fork"])
    assert turns(fork) == [
        ("user", "say hi"),
        ("assistant", "say hi"),
        ("user", "forked prompt"),
        ("assistant", "forked prompt"),
    ]
    assert fork["metadata"]["forked_from"] == threads["hi"]


@pytest.mark.slow
def test_main_only_leaves_the_fork_out_and_a_second_import_changes_nothing(
    invoke, session_ids, rollouts
):
    sessions, threads = rollouts

    first = invoke("sessions", "import", "--main-only", str(sessions))
    again = invoke("sessions", "import", "--main-only", str(sessions))

    assert_exit(first, 0, "imported 2,", "left out 1 fork(s)")
    assert_exit(again, 0, "imported 0, unchanged 2, skipped 0")
    assert threads["fork"] not in session_ids()


@pytest.mark.slow
def test_a_fork_without_the_rollout_it_came_from(invoke, session_ids, rollouts, tmp_path):
    sessions, threads = rollouts
    (fork,) = sessions.rglob(f"rollout-*{threads['fork']}.jsonl")
    alone = tmp_path / "sessions" / fork.name
    alone.parent.mkdir()
    shutil.copyfile(fork, alone)

    result = invoke("sessions", "import", str(alone))

    assert_exit(result, 3, f"it is a fork of session {threads['hi']}", "is not under")
    piped = invoke("sessions", "import", "-", input=fork.read_bytes())
    assert_exit(piped, 3, f"it is a fork of session {threads['hi']}", "give the file's path")
    assert session_ids() == []


def test_a_subagent_rollout_is_left_out(invoke, session_ids, copied):
    path = next(copied("codex/sessions").rglob("rollout-*.jsonl"))
    lines = path.read_text().splitlines()
    meta = orjson.loads(lines[0])
    meta["payload"]["source"] = {
        "subagent": {"thread_spawn": {"parent_thread_id": "p", "depth": 1}}
    }
    path.write_text("\n".join([orjson.dumps(meta).decode(), *lines[1:]]) + "\n")

    result = invoke("sessions", "import", str(path))

    assert_exit(result, 0, "imported 0,", "left out 1 subagent transcript(s)")
    assert session_ids() == []


def test_a_fork_of_a_rollout_that_cannot_be_read(invoke, session_ids, copied):
    parent = next(copied("codex/sessions").rglob("rollout-*.jsonl"))
    fork = parent.with_name(
        "rollout-2025-10-02T15-00-00-0199a7e2-0000-7000-8000-000000000001.jsonl"
    )
    meta = {
        "id": "0199a7e2-0000-7000-8000-000000000001",
        "forked_from_id": OLD,
        "forked_from_ordinal_exclusive": 5,
        "timestamp": "2025-10-02T15:00:00.000Z",
        "cwd": "/home/ada/proj",
    }
    line = {"timestamp": meta["timestamp"], "ordinal": 5, "type": "session_meta", "payload": meta}
    fork.write_bytes(orjson.dumps(line) + b"\n")
    parent.write_text("{broken\n")

    result = invoke("sessions", "import", str(fork))

    assert_exit(result, 3, "the rollout it was forked from cannot be read: line 1 is not JSON")
    assert session_ids() == []
