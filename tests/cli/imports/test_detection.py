"""`sessions import` without --format: the format told from a file, a directory
or stdin; what it says when it cannot tell; the exit codes of the command."""

from __future__ import annotations

import shutil

import orjson
import pytest

from .conftest import DATA, assert_exit, assert_usage_error

FILES = [
    ("claude", "claude/conversations.json"),
    ("claude-code", "claude-code/projects/-home-ada-notes/*.jsonl"),
    ("codex", "codex/sessions/*/*/*/rollout-*.jsonl"),
    ("openwebui", "openwebui/chat-export-*.json"),
    ("librechat", "librechat/long-story.json"),
]
FORMATS = "one of chatgpt, claude, claude-code, codex, llm, openwebui, librechat (--format)"


def imported_from(invoke, session_ids) -> set[str]:
    found = set()
    for session_id in session_ids():
        shown = orjson.loads(invoke("sessions", "show", session_id, "--json").stdout)
        found.add(shown["metadata"]["imported_from"])
    return found


@pytest.mark.parametrize(("fmt", "name"), FILES)
def test_a_file_is_read_in_the_format_it_is_in(invoke, session_ids, fmt, name):
    (path,) = DATA.glob(name)
    told = invoke("sessions", "import", str(path))
    assert_exit(told, 0, "imported ")
    found = session_ids()

    named = invoke("sessions", "import", "--format", fmt, str(path))

    assert_exit(named, 0, f"imported 0, unchanged {len(found)}, skipped 0")
    assert imported_from(invoke, session_ids) == {fmt}


@pytest.mark.parametrize(("fmt", "name"), FILES)
def test_stdin_is_read_in_the_format_it_is_in(invoke, session_ids, fmt, name):
    (path,) = DATA.glob(name)
    result = invoke("sessions", "import", "-", input=path.read_bytes())

    assert_exit(result, 0, "imported ")
    assert imported_from(invoke, session_ids) == {fmt}


@pytest.mark.parametrize(("fmt", "name"), [("claude-code", "claude-code"), ("codex", "codex")])
def test_a_directory_is_read_in_the_format_of_its_files(invoke, session_ids, fmt, name):
    assert_exit(invoke("sessions", "import", str(DATA / name)), 0, "imported ")
    assert imported_from(invoke, session_ids) == {fmt}


def test_files_in_no_known_format_in_a_directory_are_counted(invoke, copied):
    tree = copied("codex")
    (tree / "notes.json").write_text('{"note": "mine"}')

    result = invoke("sessions", "import", str(tree))

    assert_exit(result, 0, "1 file(s) in no format foliko knows")


def test_a_directory_of_several_formats_exits_2(invoke, session_ids, tmp_path):
    mixed = tmp_path / "mixed"
    shutil.copytree(DATA / "claude-code", mixed / "claude-code")
    shutil.copytree(DATA / "codex", mixed / "codex")

    result = invoke("sessions", "import", str(mixed))

    assert_usage_error(result, "holds files of several formats (claude-code, codex)", "--format")
    assert session_ids() == []


def test_a_directory_with_nothing_foliko_can_tell_exits_2(invoke, tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "readme.txt").write_text("hello")
    (folder / "data.json").write_text("[1, 2]")

    result = invoke("sessions", "import", str(folder))

    assert_usage_error(result, "holds no file in a format foliko can tell", FORMATS)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [(b"\x00\x01binary\xff", "not valid UTF-8"), (b"just some text", "not JSON or NDJSON")],
)
def test_a_file_foliko_cannot_tell_exits_2_naming_the_formats(invoke, tmp_path, content, fragment):
    path = tmp_path / "history.bin"
    path.write_bytes(content)

    assert_usage_error(invoke("sessions", "import", str(path)), fragment, FORMATS)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--format", "codex", "{data}/claude"), "holds no file of Codex CLI rollout files"),
        (("--format", "foliko", "{data}/claude"), "is a directory"),
        (("--format", "openwebui", "{data}/librechat/long-story.json"), "not an Open WebUI"),
        (("--format", "claude", "{data}/openwebui/chat-export-1719000100000.json"), "not a Claude"),
        (("{data}/nothing-here.json",), "no such file or directory"),
        (("--format", "gemini", "{data}/claude"), "'gemini' is not one of"),
    ],
)
def test_usage_errors_exit_2(invoke, session_ids, args, fragment):
    result = invoke("sessions", "import", *(arg.format(data=DATA) for arg in args))

    assert_exit(result, 2, fragment)
    assert session_ids() == []


def test_the_json_summary_lists_what_could_not_be_read(invoke, copied):
    path = copied("librechat/long-story.json")
    export = orjson.loads(path.read_bytes())
    export["conversationId"] = "bad\x00id"
    path.write_bytes(orjson.dumps(export))

    result = invoke("sessions", "import", "--json", str(path))

    assert_exit(result, 3)
    summary = orjson.loads(result.stdout)
    assert summary["imported"] == []
    (problem,) = summary["unreadable"]
    assert problem["source"] == str(path)
    assert "its id cannot name a session" in problem["reason"]


def test_exit_codes_of_the_installed_command(run_foliko, copied):
    broken = copied("claude/conversations.json")
    conversations = orjson.loads(broken.read_bytes())
    del conversations[0]["uuid"]
    broken.write_bytes(orjson.dumps(conversations))

    unreadable = run_foliko("sessions", "import", str(broken))
    unknown = run_foliko("sessions", "import", str(DATA))
    fine = run_foliko("sessions", "import", str(DATA / "claude" / "conversations.json"))

    assert unreadable.returncode == 3, unreadable.stderr
    assert b"could not read" in unreadable.stderr
    assert unknown.returncode == 2, unknown.stderr
    assert b"several formats" in unknown.stderr
    assert fine.returncode == 0, fine.stderr


def test_help_names_the_formats(invoke):
    shown = invoke("sessions", "import", "--help").stdout
    for name in ("chatgpt", "claude-code", "codex", "llm", "openwebui", "librechat", "--main-only"):
        assert name in shown


def test_a_file_that_cannot_be_read_exits_2(invoke, monkeypatch, tmp_path):
    path = tmp_path / "conversations.json"
    path.write_text("[]")

    def refuse(self):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(type(path), "read_bytes", refuse)

    assert_usage_error(
        invoke("sessions", "import", "--format", "claude", str(path)),
        f"cannot read {path}: Permission denied",
    )


@pytest.mark.parametrize("fmt", ["chatgpt", "claude", "openwebui", "librechat"])
def test_a_json_format_given_a_file_that_is_not_json_exits_2(invoke, tmp_path, fmt):
    path = tmp_path / "export.json"
    path.write_text("{not json")

    assert_exit(invoke("sessions", "import", "--format", fmt, str(path)), 2, str(path))


def test_a_corrupt_sqlite_file_exits_2(invoke, tmp_path):
    path = tmp_path / "logs.db"
    path.write_bytes(b"SQLite format 3\x00" + b"\x07" * 4000)

    assert_usage_error(invoke("sessions", "import", str(path)), f"cannot read {path}")


def test_data_of_an_unexpected_shape_is_reported_not_a_traceback(invoke, session_ids, tmp_path):
    path = tmp_path / "conversations.json"
    conversation = {"id": "odd", "mapping": {"a": {"parent": ["not", "an", "id"], "children": []}}}
    path.write_bytes(orjson.dumps([conversation]))

    result = invoke("sessions", "import", str(path))

    assert_exit(result, 3, "conversation #1: unexpected data (TypeError: ")
    assert session_ids() == []


def test_a_branch_whose_id_would_be_too_long(invoke, session_ids, copied):
    path = copied("librechat/long-story.json")
    export = orjson.loads(path.read_bytes())
    export["conversationId"] = "c" * 250
    path.write_bytes(orjson.dumps(export))

    result = invoke("sessions", "import", "--branches", "all", str(path))

    assert_exit(result, 3, ", branch 1: invalid session id: longer than 256 characters")
    assert session_ids() == ["c" * 250]
