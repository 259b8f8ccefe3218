"""`sessions import` of Claude Code's session files (data/claude-code/projects/)."""

from __future__ import annotations

import base64

import orjson

from .conftest import DATA, assert_exit, assert_usage_error, turns

PROJECTS = DATA / "claude-code" / "projects"
SESSION = "7f3e2a14-8c1b-4d5e-9a6f-1b2c3d4e5f60"
SESSION_FILE = PROJECTS / "-home-ada-proj" / f"{SESSION}.jsonl"
NOTES = "0c9d8e7f-6a5b-4c3d-2e1f-0a9b8c7d6e5f"
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def test_the_projects_directory(invoke, show, session_ids):
    result = invoke(
        "sessions", "import", "--format", "claude-code", "--branches=all", str(PROJECTS)
    )

    assert_exit(result, 0, "imported 3, unchanged 0, skipped 0", "1 subagent transcript(s)")
    assert session_ids() == sorted([SESSION, f"{SESSION}.branch-1", NOTES])
    notes = show(NOTES)
    assert notes["metadata"]["title"] == "Shopping list script"
    assert notes["metadata"]["cwd"] == "/home/ada/notes"
    assert notes["messages"][1]["model"] == "claude-opus-4-1-20250805"


def test_a_session_with_tools_a_rewind_a_compaction_and_an_image(invoke, show):
    result = invoke("sessions", "import", "--branches", "all", str(SESSION_FILE))

    assert_exit(result, 0, "imported 2,")
    session = show(SESSION)
    assert turns(session) == [
        ("user", "Add a --verbose flag to cli.py"),
        ("assistant", "I'll read cli.py first."),
        ("tool", "     1\timport argparse\n     2\tparser = argparse.ArgumentParser()\n"),
        ("assistant", ""),
        ("tool", "The file /home/ada/proj/cli.py has been updated."),
        ("assistant", "Added `--verbose` to the parser."),
        ("user", "Also document the flag in README.md"),
        ("assistant", "Documented it under Usage."),
        ("user", "What does this screenshot show?"),
        ("assistant", "A terminal printing the --verbose output."),
    ]
    streamed = session["messages"][1]
    assert streamed["tool_calls"] == [
        {
            "id": "toolu_01Read7Xq",
            "name": "Read",
            "arguments": {"file_path": "/home/ada/proj/cli.py"},
        }
    ]
    assert streamed["usage"] == {"input_tokens": 4, "output_tokens": 61, "cached_tokens": 9800}
    assert streamed["model"] == "claude-sonnet-4-5-20250929"
    assert streamed["created_at"] == 1_748_858_403_120
    assert [m.get("name") for m in session["messages"] if m["role"] == "tool"] == ["Read", "Edit"]
    (image,) = session["messages"][8]["attachments"]
    assert (image["type"], image["media_type"]) == ("image", "image/png")
    assert base64.b64decode(image["data"]) == PNG
    assert session["metadata"]["title"] == "Add a --verbose flag to the CLI"
    assert session["metadata"]["cwd"] == "/home/ada/proj"
    rewound = show(f"{SESSION}.branch-1")
    assert turns(rewound)[-2:] == [
        ("user", "Also add -v as a short form"),
        ("assistant", "Done: -v works too."),
    ]
    assert rewound["metadata"]["forked_from"] == SESSION
    shared = rewound["metadata"]["forked_at_message"]
    assert turns(session)[shared:][:1] != turns(rewound)[:1]  # it holds its own messages only


def test_main_only_and_repeating(invoke, session_ids):
    first = invoke("sessions", "import", "--main-only", str(PROJECTS))
    again = invoke("sessions", "import", "--main-only", str(PROJECTS))

    assert_exit(first, 0, "imported 2,", "left out 1 branch(es),")
    assert_exit(again, 0, "imported 0, unchanged 2, skipped 0")
    assert session_ids() == sorted([SESSION, NOTES])


def test_a_line_cut_short_is_reported_and_the_rest_imported(invoke, show, copied):
    path = copied(f"claude-code/projects/-home-ada-proj/{SESSION}.jsonl")
    with open(path, "a") as handle:
        handle.write('{"parentUuid": "a1f0c3d8-0008-4b2a-9c41-5e6f7a8b9c08", "type": "us')

    result = invoke("sessions", "import", str(path))

    assert_exit(result, 3, f"could not read {path}: line 21 is not JSON")
    assert len(show(SESSION)["messages"]) == 10


def test_a_file_that_is_not_a_session_in_a_projects_directory(invoke, session_ids, copied):
    projects = copied("claude-code/projects")
    (projects / "-home-ada-proj" / "notes.jsonl").write_text('{"note": "mine"}\n')

    result = invoke("sessions", "import", "--format", "claude-code", str(projects))

    assert_exit(result, 3, "notes.jsonl: ", "is not a Claude Code session file")
    assert SESSION in session_ids()


def test_a_file_of_another_format_exits_2(invoke):
    rollout = next((DATA / "codex").rglob("rollout-*.jsonl"))
    assert_usage_error(
        invoke("sessions", "import", "--format", "claude-code", str(rollout)),
        "is not a Claude Code session file",
    )


def test_a_first_record_longer_than_what_is_sniffed(invoke, show, tmp_path):
    source = (PROJECTS / "-home-ada-notes" / f"{NOTES}.jsonl").read_text().splitlines()
    first = orjson.loads(source[1])
    first["message"]["content"] = "x" * 400_000
    folder = tmp_path / "projects" / "-home-ada-notes"
    folder.mkdir(parents=True)
    (folder / f"{NOTES}.jsonl").write_text("\n".join([orjson.dumps(first).decode(), *source[2:]]))

    assert_exit(invoke("sessions", "import", str(tmp_path / "projects")), 0, "imported 1,")
    assert len(show(NOTES)["messages"][0]["content"]) == 400_000
