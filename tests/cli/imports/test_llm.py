"""`sessions import` of llm's logs.db, written by llm itself (the version this
project's dev extras pin): its command line and its Python API talk to a fake
OpenAI-compatible server, and foliko imports what llm logged.

The schema before 0.36 (the ``responses`` table) is made by llm's own
migrations up to the one that added the 0.36 tables, filled the way llm 0.2x
logged a response; the 0.36 command line then continues one of its
conversations, which upgrades the database as it does for its users.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import yaml
from models.fake_servers import FakeServer, openai_stream
from storage.services import require_or_skip

from .conftest import assert_exit, assert_usage_error, turns

LLM_BIN = Path(sys.executable).with_name("llm")
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


@pytest.fixture(scope="module")
def model_server() -> Iterator[FakeServer]:
    fake = FakeServer().start()
    try:
        yield fake
    finally:
        fake.stop()


def new_llm_home(home: Path, model_server: FakeServer) -> Path:
    require_or_skip("llm (the llm package)", LLM_BIN.exists(), f"{LLM_BIN} is not installed")
    home.mkdir()
    declared = {
        "model_id": "fake",
        "model_name": "fake-model",
        "api_base": f"{model_server.url}/v1",
        "supports_tools": True,
        "vision": True,
    }
    (home / "extra-openai-models.yaml").write_text(yaml.safe_dump([declared]))
    return home


@pytest.fixture
def llm_home(tmp_path: Path, model_server: FakeServer) -> Path:
    return new_llm_home(tmp_path / "llm-home", model_server)


def run_llm(home: Path, *args: str) -> str:
    done = subprocess.run(
        [str(LLM_BIN), *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "LLM_USER_PATH": str(home), "OPENAI_API_KEY": "sk-fake"},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def run_python(home: Path, script: str) -> str:
    """Run llm's Python API in its own process (it reads LLM_USER_PATH once)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        env={**os.environ, "LLM_USER_PATH": str(home), "OPENAI_API_KEY": "sk-fake"},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


# what llm 0.36 writes


@pytest.fixture(scope="module")
def logged_home(tmp_path_factory, model_server: FakeServer) -> tuple[Path, dict[str, str]]:
    """A logs.db holding, from the command line: a conversation with a system
    prompt continued with -c, a tool chain, an image attachment and a fragment;
    from the Python API: a conversation answered two ways (a branch) and a
    thread forked from it. Returns llm's home and the thread ids by name."""
    tmp_path = tmp_path_factory.mktemp("llm-logged")
    llm_home = new_llm_home(tmp_path / "llm-home", model_server)
    model_server.queue(
        openai_stream(["Hi."], usage=(12, 3), model="fake-model-2025-01"),
        openai_stream(["Again."], usage=(20, 2)),
        openai_stream(tool_calls=[("call_add1", "add", {"a": 2, "b": 3})], usage=(30, 9)),
        openai_stream(["5"], usage=(41, 1)),
        openai_stream(["A dot."]),
        openai_stream(["They are short."]),
    )
    run_llm(llm_home, "-m", "fake", "-s", "You are terse", "hello there")
    run_llm(llm_home, "-c", "and again")
    add = "def add(a: int, b: int) -> int:\n    return a + b\n"
    run_llm(llm_home, "-m", "fake", "--functions", add, "add 2 and 3")
    image = tmp_path / "dot.png"
    image.write_bytes(PNG)
    run_llm(llm_home, "-m", "fake", "-a", str(image), "what is in this image?")
    notes = tmp_path / "notes.txt"
    notes.write_text("Buy milk.\nCall Ada.\n")
    run_llm(llm_home, "-m", "fake", "-f", str(notes), "summarize the notes")
    model_server.queue(
        openai_stream(["Blue."]), openai_stream(["It is calm."]), openai_stream(["Red is loud."])
    )
    printed = run_python(
        llm_home,
        """
        import llm, sqlite_utils
        from llm.logs import LogStore

        db = sqlite_utils.Database(llm.user_dir() / "logs.db")
        model = llm.get_model("fake")
        first = model.conversation()
        asked = first.prompt("pick a colour")
        asked.text()
        asked.log_to_db(db)
        second = model.conversation()
        second.id, second.responses = first.id, list(first.responses)
        for conversation, text in ((first, "why blue?"), (second, "why not red?")):
            response = conversation.prompt(text)
            response.text()
            response.log_to_db(db)
        tip = db.execute("select tip_message_hash from turns where id = ?", [asked.id]).fetchone()
        fork = LogStore(db).fork(tip[0], name="colour fork", forked_from=first.id)
        print(first.id, fork)
        """,
    )
    colours, fork = printed.split()
    threads = _threads(llm_home / "logs.db")
    fragment = next(thread for name, thread in threads.items() if name.startswith("Buy milk."))
    return llm_home, {**threads, "fragment": fragment, "colours": colours, "fork": fork}


@pytest.fixture
def logged(logged_home) -> dict[str, str]:
    return logged_home[1]


@pytest.fixture
def logs_db(logged_home, tmp_path: Path) -> Path:
    """A copy of the logs.db of ``logged_home`` for this test."""
    import shutil

    return Path(shutil.copyfile(logged_home[0] / "logs.db", tmp_path / "logs.db"))


def _threads(path: Path) -> dict[str, str]:
    import sqlite3

    db = sqlite3.connect(path)
    try:
        return {name: thread_id for thread_id, name in db.execute("select id, name from threads")}
    finally:
        db.close()


def test_every_thread_becomes_a_session(invoke, show, logged_home, logged):
    logs = run_llm(logged_home[0], "logs", "path").strip()

    result = invoke("sessions", "import", "--format", "llm", "--branches", "all", logs)

    assert_exit(result, 0, "imported 7, unchanged 0, skipped 0")
    chat = show(logged["hello there"])
    assert turns(chat) == [
        ("system", "You are terse"),
        ("user", "hello there"),
        ("assistant", "Hi."),
        ("user", "and again"),
        ("assistant", "Again."),
    ]
    first_reply = chat["messages"][2]
    assert first_reply["usage"] == {"input_tokens": 12, "output_tokens": 3}
    assert first_reply["model"] in ("fake", "fake-model-2025-01")
    assert isinstance(first_reply["duration_ms"], int)
    times = [m["created_at"] for m in chat["messages"]]
    assert times == sorted(times) and times[0] > 1_600_000_000_000
    assert chat["metadata"]["title"] == "hello there"
    assert chat["metadata"]["imported_from"] == "llm"
    assert chat["usage"]["input_tokens"] == 32


def test_tool_calls_results_attachments_and_fragments(invoke, show, logs_db, logged):
    invoke("sessions", "import", str(logs_db))

    tools = show(logged["add 2 and 3"])
    assert turns(tools) == [
        ("user", "add 2 and 3"),
        ("assistant", ""),
        ("tool", "5"),
        ("assistant", "5"),
    ]
    assert tools["messages"][1]["tool_calls"] == [
        {"id": "call_add1", "name": "add", "arguments": {"a": 2, "b": 3}}
    ]
    assert tools["messages"][2]["tool_call_id"] == "call_add1"
    assert tools["messages"][2]["name"] == "add"
    (picture,) = show(logged["what is in this image?"])["messages"][0]["attachments"]
    assert picture["type"] == "image" and picture["media_type"] == "image/png"
    assert picture["sha256"] == hashlib.sha256(PNG).hexdigest()
    assert picture["path"].endswith("dot.png") and picture["name"] == "dot.png"
    summary = show(logged["fragment"])["messages"][0]["content"]
    assert "Buy milk.\nCall Ada." in summary and summary.endswith("summarize the notes")


def test_a_turn_off_the_thread_is_a_branch_and_a_forked_thread_keeps_its_id(
    invoke, show, logged, logs_db
):
    invoke("sessions", "import", "--branches", "all", str(logs_db))

    colours = show(logged["colours"])
    assert turns(colours)[-2:] == [("user", "why not red?"), ("assistant", "Red is loud.")]
    branch = show(f"{logged['colours']}.branch-1")
    assert turns(branch) == [("user", "why blue?"), ("assistant", "It is calm.")]  # its own
    assert branch["metadata"]["forked_from"] == logged["colours"]
    fork = show(logged["fork"])
    assert turns(fork) == [("user", "pick a colour"), ("assistant", "Blue.")]
    assert fork["metadata"]["forked_from"] == logged["colours"]
    for forked in (branch, fork):
        meta = forked["metadata"]
        assert (meta["forked_at_message"], meta["forked_at_turn"]) == (2, 1), "after 1 turn"
    assert fork["metadata"]["title"] == "colour fork"
    assert fork["messages"][1]["created_at"] == colours["messages"][1]["created_at"]


def test_main_only_and_a_second_import(invoke, session_ids, logged, logs_db):
    logs = str(logs_db)

    first = invoke("sessions", "import", "--main-only", logs)
    again = invoke("sessions", "import", "--main-only", logs)

    assert_exit(first, 0, "imported 5,", "left out 1 branch(es), 1 fork(s)")
    assert_exit(again, 0, "imported 0, unchanged 5, skipped 0")
    assert logged["fork"] not in session_ids()


# what llm kept before 0.36


LEGACY = """
import hashlib, sqlite_utils
from llm.migrations import MIGRATIONS, ensure_migrations_table

db = sqlite_utils.Database(PATH)
ensure_migrations_table(db)
for migration in MIGRATIONS:
    if migration.__name__ == "m023_message_store":
        break
    migration(db)
    db["_llm_migrations"].insert({"name": migration.__name__, "applied_at": "2025-01-01"})
db["conversations"].insert_all([
    {"id": "01legacycats", "name": "Haiku about cats", "model": "fake"},
    {"id": "01legacytool", "name": "What is 2+3?", "model": "fake"},
])
common = {"options_json": "{}", "prompt_json": None, "response_json": None,
          "token_details": None, "schema_id": None}
db["responses"].insert_all([
    dict(common, id="01legacyr1", model="fake", prompt="Write a haiku about cats",
         system="You are a poet", response="Soft paws on the sill", conversation_id="01legacycats",
         duration_ms=1200, datetime_utc="2024-06-01T10:00:00.000000", input_tokens=12,
         output_tokens=20, resolved_model="fake-2024-07-18"),
    dict(common, id="01legacyr2", model="fake", prompt="Another, about this picture",
         system="You are a poet", response="A single dot", conversation_id="01legacycats",
         duration_ms=800, datetime_utc="2024-06-01T10:05:00.000000", input_tokens=30,
         output_tokens=18, resolved_model=None),
    dict(common, id="01legacyr3", model="fake", prompt="What is 2+3? Use add.", system=None,
         response="", conversation_id="01legacytool", duration_ms=300,
         datetime_utc="2024-06-02T08:00:00.000000", input_tokens=40, output_tokens=9),
    dict(common, id="01legacyr4", model="fake", prompt=None, system=None, response="5",
         conversation_id="01legacytool", duration_ms=200,
         datetime_utc="2024-06-02T08:00:01.000000", input_tokens=52, output_tokens=1),
])
db["tools"].insert({"id": 1, "hash": "h1", "name": "add", "description": "Add.",
                    "input_schema": "{}", "plugin": None})
db["tool_calls"].insert({"response_id": "01legacyr3", "tool_id": 1, "name": "add",
                         "arguments": '{"a": 2, "b": 3}', "tool_call_id": "call_legacy1"})
db["tool_results"].insert({"response_id": "01legacyr4", "tool_id": 1, "name": "add",
                           "output": "5", "tool_call_id": "call_legacy1", "exception": None})
png = bytes.fromhex(PNG_HEX)
db["attachments"].insert({"id": hashlib.sha256(png).hexdigest(), "type": "image/png",
                          "path": None, "url": None, "content": png})
db["prompt_attachments"].insert({"response_id": "01legacyr2",
                                 "attachment_id": hashlib.sha256(png).hexdigest(), "order": 0})
"""


@pytest.fixture
def legacy_db(llm_home: Path) -> Path:
    path = llm_home / "logs.db"
    script = f"PATH = {str(path)!r}\nPNG_HEX = {PNG.hex()!r}\n" + LEGACY
    run_python(llm_home, script)
    return path


def test_the_responses_table_of_earlier_llm_versions(invoke, show, legacy_db):
    result = invoke("sessions", "import", str(legacy_db))

    assert_exit(result, 0, "imported 2, unchanged 0, skipped 0")
    cats = show("01legacycats")
    assert turns(cats) == [
        ("system", "You are a poet"),
        ("user", "Write a haiku about cats"),
        ("assistant", "Soft paws on the sill"),
        ("user", "Another, about this picture"),
        ("assistant", "A single dot"),
    ]
    assert cats["messages"][1]["created_at"] == 1_717_236_000_000
    assert cats["messages"][2]["model"] == "fake-2024-07-18"
    assert cats["messages"][2]["duration_ms"] == 1200
    (picture,) = cats["messages"][3]["attachments"]
    assert base64.b64decode(picture["data"]) == PNG
    assert cats["metadata"]["title"] == "Haiku about cats"
    assert cats["usage"]["input_tokens"] == 42 and cats["usage"]["output_tokens"] == 38
    tool = show("01legacytool")
    assert turns(tool) == [
        ("user", "What is 2+3? Use add."),
        ("assistant", ""),
        ("tool", "5"),
        ("assistant", "5"),
    ]
    assert tool["messages"][1]["tool_calls"] == [
        {"id": "call_legacy1", "name": "add", "arguments": {"a": 2, "b": 3}}
    ]


def test_a_conversation_continued_after_the_upgrade_to_0_36(
    invoke, show, legacy_db, llm_home, model_server
):
    model_server.queue(openai_stream(["Wings at dawn"], usage=(60, 4)))
    run_llm(llm_home, "-c", "--cid", "01legacycats", "And about birds?")

    result = invoke("sessions", "import", str(legacy_db))

    assert_exit(result, 0, "imported 2, unchanged 0, skipped 0")
    cats = show("01legacycats")
    assert turns(cats)[-3:] == [
        ("assistant", "A single dot"),
        ("user", "And about birds?"),
        ("assistant", "Wings at dawn"),
    ]
    # llm 0.36 rebuilt the old conversation with the system prompt before each prompt
    assert [m["role"] for m in cats["messages"]][:4] == ["system", "user", "assistant", "system"]
    assert len(cats["messages"]) == 8
    assert cats["messages"][1]["created_at"] == 1_717_236_000_000
    assert cats["messages"][2]["model"] == "fake-2024-07-18"
    assert cats["messages"][4]["created_at"] == 1_717_236_300_000
    assert base64.b64decode(cats["messages"][4]["attachments"][0]["data"]) == PNG
    assert cats["messages"][-1]["usage"] == {"input_tokens": 60, "output_tokens": 4}
    assert cats["messages"][-1]["created_at"] > cats["messages"][4]["created_at"]
    assert turns(show("01legacytool"))[0] == ("user", "What is 2+3? Use add.")


# what is not a logs.db


def test_files_that_are_not_an_llm_database_exit_2(invoke, session_ids, tmp_path):
    import sqlite3

    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    for args, fragment in [
        (("--format", "llm", str(other)), "not an llm logs database"),
        ((str(other),), "not an llm logs database"),
        (("--format", "llm", str(text)), "not a SQLite database"),
        (("--format", "llm", str(tmp_path / "none.db")), "no such file or directory"),
        (("--format", "llm", "-"), "cannot be read from stdin"),
    ]:
        assert_usage_error(invoke("sessions", "import", *args), fragment)
    assert session_ids() == []


def test_a_thread_whose_messages_are_gone_is_reported(invoke, session_ids, logged, logs_db):
    import sqlite3

    db = sqlite3.connect(logs_db)
    db.execute("PRAGMA foreign_keys = OFF")
    db.execute(
        "DELETE FROM messages WHERE hash = (SELECT tip_message_hash FROM threads WHERE name = ?)",
        ["add 2 and 3"],
    )
    db.commit()
    db.close()

    result = invoke("sessions", "import", str(logs_db))

    assert_exit(result, 3, f"thread {logged['add 2 and 3']}: message b2:", "is missing")
    assert logged["add 2 and 3"] not in session_ids()
    assert logged["hello there"] in session_ids()
    again = orjson.loads(invoke("sessions", "import", str(logs_db), "--json").stdout)
    assert again["unreadable"][0]["source"].endswith(f"thread {logged['add 2 and 3']}")
