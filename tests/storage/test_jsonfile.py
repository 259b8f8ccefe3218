"""What is specific to the JSON-file backend: the seed's format, file names,
permissions, atomic writes and corrupt files."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

import orjson
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from foliko_cli.errors import CorruptSessionError, SessionExistsError, StorageError
from foliko_cli.messages.record import SessionRecord, SessionState
from foliko_cli.messages.stored import content_hash
from foliko_cli.storage import open_storage
from foliko_cli.storage.jsonfile import (
    JsonStorage,
    file_name,
    file_stem,
    seed_file_name,
    session_id_from_stem,
)

from .test_conformance import NESTED_VARIABLES, ODD_IDS, RICH_MESSAGES, make_record, state, turn


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


@pytest.fixture
def json_storage(directory: Path, run):
    adapter = JsonStorage(directory)
    yield adapter
    run(adapter.close())


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def write_seed(directory: Path, name: str, document: dict) -> Path:
    """A file as the original foliko wrote it: JSON.stringify(data, null, 2)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))
    return path


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def files_under(root: Path) -> list[Path]:
    return [Path(d) / f for d, _, names in os.walk(root) for f in names]


SEED_CHAT = {
    "sessionId": "chat-1",
    "messages": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {
                    "type": "tool-call",
                    "toolCallId": "call_abc",
                    "toolName": "weather",
                    "args": {"city": "Paris"},
                },
            ],
        },
        {
            "role": "tool",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": "call_abc",
                    "toolName": "weather",
                    "result": {"tempC": 18},
                }
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "It is 18 °C."}]},
    ],
    "variables": {"city": "Paris", "prefs": {"units": "metric", "days": [1, 2]}},
    "metadata": {
        "createdAt": 1714000000000,
        "lastActive": 1714000005000,
        "messageCount": 4,
        "compressionCount": 0,
    },
    "savedAt": 1714000005000,
}


# files written by the original foliko


def test_seed_file_with_ai_sdk_parts_loads_as_canonical_messages(json_storage, directory, run):
    write_seed(directory, "chat-1.json", SEED_CHAT)
    record = run(json_storage.load("chat-1"))
    assert record.session_id == "chat-1"
    assert [(m["role"], m["content"]) for m in record.messages] == [
        ("user", "What is the weather in Paris?"),
        ("assistant", "Let me check."),
        ("tool", '{"tempC":18}'),
        ("assistant", "It is 18 °C."),
    ]
    assert record.messages[1]["tool_calls"] == [
        {"id": "call_abc", "name": "weather", "arguments": {"city": "Paris"}}
    ]
    assert record.messages[2]["tool_call_id"] == "call_abc"
    assert record.messages[2]["name"] == "weather"
    assert record.variables == SEED_CHAT["variables"]
    assert record.metadata["created_at"] == 1714000000000
    assert record.metadata["last_active"] == 1714000005000
    assert record.saved_at == 1714000005000
    assert record.revision >= 1
    assert run(json_storage.revision("chat-1")) == record.revision


def test_seed_files_are_listed_and_summarised(json_storage, directory, run):
    write_seed(directory, "chat-1.json", SEED_CHAT)
    write_seed(directory, "plain.json", {"sessionId": "plain", "messages": [], "savedAt": 5})
    assert sorted(run(json_storage.session_ids())) == ["chat-1", "plain"]
    summaries = {s.session_id: s for s in run(json_storage.list_summaries())}
    chat = summaries["chat-1"]
    assert chat.error is None
    assert chat.message_count == 4
    assert chat.preview == "What is the weather in Paris?"
    assert chat.created_at == 1714000000000
    assert chat.updated_at == 1714000005000
    assert summaries["plain"].message_count == 0


def test_seed_file_named_by_a_raw_id_is_found_and_rewritten_in_place(json_storage, directory, run):
    session_id = "Project X: 2024.v2"
    document = {**SEED_CHAT, "sessionId": session_id}
    path = write_seed(directory, f"{session_id}.json", document)
    assert file_name(session_id) != path.name
    assert run(json_storage.session_ids()) == [session_id]
    record = run(json_storage.load(session_id))
    run(json_storage.append(session_id, turn("more"), state(), expected_revision=record.revision))
    assert sorted(p.name for p in directory.glob("*.json")) == [path.name]
    stored = orjson.loads(path.read_bytes())
    assert stored["sessionId"] == session_id
    assert len(stored["messages"]) == 6
    assert run(json_storage.load(session_id)).messages[-2:] == turn("more")


def test_seed_file_without_session_id_takes_the_id_from_its_name(json_storage, directory, run):
    document = {k: v for k, v in SEED_CHAT.items() if k != "sessionId"}
    write_seed(directory, "legacy.json", document)
    assert run(json_storage.session_ids()) == ["legacy"]
    assert run(json_storage.load("legacy")).session_id == "legacy"
    assert len(run(json_storage.load("legacy")).messages) == 4


def test_seed_file_with_null_content_and_no_metadata_loads(json_storage, directory, run):
    document = {
        "sessionId": "bare",
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}],
    }
    write_seed(directory, "bare.json", document)
    record = run(json_storage.load("bare"))
    assert [m["content"] for m in record.messages] == ["hi", ""]
    assert record.metadata["message_count"] == 2


# our files are the seed's format


def test_written_files_are_camel_case_seed_documents(json_storage, directory, run):
    revision = run(json_storage.save(make_record("s1")))
    run(
        json_storage.append("s1", turn("next"), state(NESTED_VARIABLES), expected_revision=revision)
    )
    document = orjson.loads((directory / "s1.json").read_bytes())
    assert {"sessionId", "messages", "variables", "metadata", "savedAt"} <= set(document)
    assert not [key for key in document if "_" in key]
    assert document["sessionId"] == "s1"
    assert set(document["metadata"]) == {
        "createdAt",
        "lastActive",
        "messageCount",
        "compressionCount",
    }
    assert document["metadata"]["messageCount"] == len(document["messages"]) == 8
    assert isinstance(document["savedAt"], int) and document["savedAt"] > 10**12
    for message in document["messages"]:
        assert not [key for key in message if "_" in key], message
        assert isinstance(message["createdAt"], int)
    assert document["messages"][2]["toolCalls"][0]["name"] == "get_weather"
    assert document["messages"][3]["toolCallId"] == "call_1"
    assert document["messages"][4]["isError"] is True
    assert document["variables"] == NESTED_VARIABLES


def test_revision_is_kept_in_the_document_and_counts_writes(json_storage, directory, run):
    path = directory / "s1.json"
    revisions = []
    revision = run(json_storage.save(make_record("s1")))
    revisions.append(orjson.loads(path.read_bytes())["revision"])
    for text in ("a", "b"):
        revision = run(json_storage.append("s1", turn(text), state(), expected_revision=revision))
        revisions.append(orjson.loads(path.read_bytes())["revision"])
    assert revisions[0] >= 1
    assert revisions == [revisions[0], revisions[0] + 1, revisions[0] + 2]
    assert revision == revisions[-1]


# permissions and locations


def test_files_are_owner_only_and_directories_are_created_0700(tmp_path, run, umask_022):
    directory = tmp_path / "a" / "b" / "sessions"
    adapter = JsonStorage(directory)
    run(adapter.save(make_record("s1")))

    async def hold():
        async with adapter.lock("s1", 5):
            return [mode(p) for p in (directory / ".locks").iterdir()]

    lock_modes = run(hold())
    for path in (tmp_path / "a", tmp_path / "a" / "b", directory, directory / ".locks"):
        assert mode(path) == 0o700, path
    assert mode(directory / "s1.json") == 0o600
    assert lock_modes and set(lock_modes) == {0o600}


def test_a_world_readable_seed_file_becomes_owner_only_when_rewritten(
    json_storage, directory, run, umask_022
):
    path = write_seed(directory, "chat-1.json", SEED_CHAT)
    path.chmod(0o644)
    record = run(json_storage.load("chat-1"))
    run(json_storage.append("chat-1", turn("x"), state(), expected_revision=record.revision))
    assert mode(path) == 0o600


def test_reading_a_missing_directory_finds_nothing_and_creates_nothing(
    json_storage, directory, run
):
    assert run(json_storage.load("s1")) is None
    assert run(json_storage.revision("s1")) is None
    assert run(json_storage.session_ids()) == []
    assert run(json_storage.list_summaries()) == []
    assert run(json_storage.delete("s1")) is False
    assert run(json_storage.check()) == []
    assert run(json_storage.health_check()) is True
    assert run(json_storage.info())["sessions"] == 0
    assert not directory.exists()


def test_storage_path_that_is_a_file_is_a_storage_error(tmp_path, run):
    path = tmp_path / "not-a-dir"
    path.write_text("x")
    adapter = JsonStorage(path)
    assert run(adapter.health_check()) is False
    with pytest.raises(StorageError) as failure:
        run(adapter.save(make_record("s1")))
    assert failure.value.exit_code == 3
    assert str(path) in str(failure.value)
    assert path.read_text() == "x"


def test_open_storage_maps_json_names_and_urls_to_this_backend(tmp_path):
    assert JsonStorage is type(open_storage("json", tmp_path))
    assert open_storage("json", tmp_path).directory == tmp_path / "sessions"
    absolute = open_storage(f"json:///{tmp_path}/abs", tmp_path)
    assert absolute.directory == tmp_path / "abs"


# file names

HOSTILE_IDS = [
    *ODD_IDS,
    "\0",
    "a\0b",
    "line\nbreak",
    "../" * 80,
    "/",
    "\\..\\..\\x",
    "~",
    "con.txt",
    "COM1",
    "lpt9",
    "wORK",
    "x~" + "a" * 32,
    "🎉" * 256,
    "%",
    "%00",
    "-rf",
    ".locks",
    ".quarantine",
    "s1.tmp",
]


def test_hostile_ids_never_address_a_path_outside_the_directory(tmp_path, run):
    directory = tmp_path / "inside" / "sessions"
    adapter = JsonStorage(directory)
    for i, session_id in enumerate(HOSTILE_IDS):
        revision = run(adapter.save(make_record(session_id, messages=turn(f"q{i}"))))
        run(adapter.append(session_id, turn("again"), state(), expected_revision=revision))

    async def lock_all():
        for session_id in HOSTILE_IDS:
            async with adapter.lock(session_id, 5):
                pass

    run(lock_all())
    root = os.path.realpath(directory)
    for path in files_under(tmp_path):
        assert os.path.commonpath([root, os.path.realpath(path)]) == root, path
    names = [p.name for p in directory.iterdir() if p.is_file()]
    assert len(names) == len(HOSTILE_IDS)
    assert len({name.lower() for name in names}) == len(names)  # case-insensitive filesystems
    for name in names:
        assert not name.startswith(".") and len(name.encode()) <= 255 and name.isascii()
    assert sorted(run(adapter.session_ids())) == sorted(HOSTILE_IDS)
    for i, session_id in enumerate(HOSTILE_IDS):
        assert run(adapter.load(session_id)).messages == turn(f"q{i}") + turn("again")


@pytest.mark.parametrize(
    ("session_id", "expected"),
    [
        ("work", "work.json"),
        ("s-1_x", "s-1_x.json"),
        ("Work", "^work.json"),
        ("a/b", "a%2Fb.json"),
        ("..", "%2E%2E.json"),
        ("a b", "a%20b.json"),
        ("%", "%25.json"),
        ("^", "%5E.json"),
        ("con", "%63on.json"),
        ("日", "%E6%97%A5.json"),
    ],
)
def test_file_names_keep_plain_ids_readable_and_escape_the_rest(session_id, expected):
    assert file_name(session_id) == expected
    assert session_id_from_stem(expected[: -len(".json")]) == session_id


def test_long_ids_get_a_hash_suffix_and_stay_distinct():
    first, second = "a" * 300 + "1", "a" * 300 + "2"
    assert file_stem(first) != file_stem(second)
    for session_id in (first, second, "日" * 256):
        stem = file_stem(session_id)
        assert len(stem) <= 120 and "~" in stem
        assert session_id_from_stem(stem) is None
        assert seed_file_name(stem) is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300), st.text(max_size=300))
def test_file_names_are_single_safe_components_that_never_collide(a, b):
    assume(a and b and a != b)
    for session_id in (a, b):
        name = file_name(session_id)
        assert name.isascii() and len(name) <= 255
        assert "/" not in name and "\\" not in name and "\0" not in name
        assert not name.startswith(".")
        assert session_id_from_stem(file_stem(session_id)) in (session_id, None)
        if len(file_stem(session_id)) < 100:
            assert session_id_from_stem(file_stem(session_id)) == session_id
    assert file_name(a).lower() != file_name(b).lower()


def test_an_id_cannot_reach_another_ids_file_through_the_seed_name(json_storage, run):
    run(json_storage.save(make_record("a/b", messages=turn("slash"))))
    assert run(json_storage.load("a%2Fb")) is None
    run(json_storage.save(make_record("a%2Fb", messages=turn("percent"))))
    assert run(json_storage.load("a/b")).messages == turn("slash")
    assert run(json_storage.load("a%2Fb")).messages == turn("percent")


# corrupt files

VALID = orjson.dumps(
    {"sessionId": "s", "messages": [{"role": "user", "content": "hello " * 50}], "revision": 4},
    option=orjson.OPT_INDENT_2,
)
CORRUPT = {
    "truncated": VALID[: len(VALID) // 2],
    "empty": b"",
    "not json": b"{bad",
    "not an object": b"[]",
    "messages not a list": b'{"sessionId": "s", "messages": {}}',
    "unknown role": b'{"sessionId": "s", "messages": [{"role": "wizard", "content": "x"}]}',
    "invalid utf-8": b'{"sessionId": "s", "messages": [], "x": "\xff\xfe"}',
    "compression state not an object": b'{"sessionId": "s", "compressionState": [1]}',
    "another session's file": b'{"sessionId": "other", "messages": []}',
}


@pytest.fixture(params=list(CORRUPT), ids=list(CORRUPT))
def corrupt(request, json_storage, directory, run) -> tuple[Path, bytes]:
    run(json_storage.save(make_record("healthy", messages=turn("fine"))))
    path = directory / file_name("s")
    path.write_bytes(CORRUPT[request.param])
    return path, CORRUPT[request.param]


def test_corrupt_file_load_raises_naming_the_file(json_storage, corrupt, run):
    path, _ = corrupt
    with pytest.raises(CorruptSessionError) as failure:
        run(json_storage.load("s"))
    assert failure.value.where == str(path)
    assert str(path) in str(failure.value)
    assert "\n" not in str(failure.value)
    assert failure.value.exit_code == 3


def test_corrupt_file_is_never_overwritten(json_storage, corrupt, run):
    path, original = corrupt
    attempts = [
        lambda: json_storage.save(make_record("s")),
        lambda: json_storage.append("s", turn("x"), state(), expected_revision=0),
        lambda: json_storage.append("s", turn("x"), state(), expected_revision=4),
        lambda: json_storage.rename("s", "moved"),
        lambda: json_storage.copy("s", "copied"),
        lambda: json_storage.copy("healthy", "s"),
        lambda: json_storage.rename("healthy", "s"),
    ]
    for attempt in attempts:
        with pytest.raises((CorruptSessionError, SessionExistsError)):
            run(attempt())
        assert path.read_bytes() == original
    assert run(json_storage.load("moved")) is None
    assert run(json_storage.load("copied")) is None
    assert run(json_storage.load("healthy")).messages == turn("fine")


def test_corrupt_file_is_marked_in_summaries_and_the_rest_still_list(json_storage, corrupt, run):
    path, _ = corrupt
    summaries = {s.session_id: s for s in run(json_storage.list_summaries())}
    assert set(summaries) == {"s", "healthy"}
    assert summaries["healthy"].error is None
    marked = summaries["s"]
    assert marked.error and path.name in marked.error and "\n" not in marked.error
    assert sorted(run(json_storage.session_ids())) == ["healthy", "s"]  # migration reports it


def test_storage_check_reports_and_quarantine_moves_it_aside(json_storage, corrupt, run):
    path, original = corrupt
    problems = run(json_storage.check())
    assert [(p.session_id, p.where) for p in problems] == [("s", str(path))]
    moved = Path(run(json_storage.quarantine(problems[0])))
    assert moved.read_bytes() == original
    assert moved.parent.name == ".quarantine"
    assert not path.exists()
    assert run(json_storage.check()) == []
    assert run(json_storage.session_ids()) == ["healthy"]


def test_a_corrupt_session_can_be_deleted(json_storage, corrupt, run):
    path, _ = corrupt
    assert run(json_storage.delete("s")) is True
    assert not path.exists()
    assert run(json_storage.load("s")) is None


def test_a_directory_named_like_a_session_is_reported_not_replaced(json_storage, directory, run):
    (directory / "s.json").mkdir(parents=True)
    with pytest.raises(CorruptSessionError):
        run(json_storage.load("s"))
    with pytest.raises(CorruptSessionError):
        run(json_storage.save(make_record("s")))
    assert (directory / "s.json").is_dir()
    assert [s.error is not None for s in run(json_storage.list_summaries())] == [True]


# crash safety


def test_temp_files_left_by_a_crash_are_ignored(json_storage, directory, run):
    run(json_storage.save(make_record("s", messages=turn("real"))))
    (directory / ".s.0123456789ab.tmp").write_bytes(b'{"sessionId": "s", "mess')
    (directory / ".ghost.ba9876543210.tmp").write_bytes(VALID)
    assert run(json_storage.session_ids()) == ["s"]
    assert [s.error for s in run(json_storage.list_summaries())] == [None]
    assert run(json_storage.load("s")).messages == turn("real")
    assert run(json_storage.load("ghost")) is None
    assert run(json_storage.check()) == []


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(
    json_storage, directory, run, monkeypatch
):
    revision = run(json_storage.save(make_record("s", messages=turn("before"))))
    original = (directory / "s.json").read_bytes()

    def full_disk(src, dst):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("foliko_cli.storage.jsonfile.os.replace", full_disk)
    with pytest.raises(StorageError) as failure:
        run(json_storage.append("s", turn("after"), state(), expected_revision=revision))
    assert not isinstance(failure.value, CorruptSessionError)
    assert "No space left" in str(failure.value)
    assert (directory / "s.json").read_bytes() == original
    assert sorted(p.name for p in directory.iterdir()) == [".locks", "s.json"]


def test_a_write_fsyncs_the_file_then_replaces_it_then_fsyncs_the_directory(
    json_storage, directory, run, monkeypatch
):
    revision = run(json_storage.save(make_record("s")))
    steps: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        steps.append("fsync dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        real_fsync(fd)

    def replace(src, dst):
        steps.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr("foliko_cli.storage.jsonfile.os.fsync", fsync)
    monkeypatch.setattr("foliko_cli.storage.jsonfile.os.replace", replace)
    run(json_storage.append("s", turn("x"), state(), expected_revision=revision))
    assert steps == ["fsync file", "replace", "fsync dir"]


def test_every_write_replaces_the_file_instead_of_rewriting_it(json_storage, directory, run):
    revision = run(json_storage.save(make_record("s")))
    with open(directory / "s.json", "rb") as reader:  # a reader holding the old version
        run(json_storage.append("s", turn("new"), state(), expected_revision=revision))
        old = orjson.loads(reader.read())
    assert len(old["messages"]) == len(RICH_MESSAGES)
    assert len(run(json_storage.load("s")).messages) == len(RICH_MESSAGES) + 2


def test_content_hash_of_a_seed_session_survives_a_rewrite(json_storage, directory, run):
    write_seed(directory, "chat-1.json", SEED_CHAT)
    before = run(json_storage.load("chat-1"))
    run(json_storage.save(before))
    after = run(json_storage.load("chat-1"))
    assert content_hash(after) == content_hash(before)
    assert after.revision == before.revision + 1


def test_records_keep_unknown_message_keys(json_storage, run):
    extra = {**turn("x")[0], "attachments": [{"kind": "image", "ref": "a.png"}]}
    run(json_storage.save(SessionRecord("s", messages=[extra])))
    assert run(json_storage.load("s")).messages == [extra]


def test_lock_files_live_in_the_locks_subdirectory(json_storage, directory, run):
    async def hold():
        async with json_storage.lock("s1", 5):
            return sorted(p.name for p in directory.iterdir())

    assert run(hold()) == [".locks"]
    with contextlib.suppress(FileNotFoundError):
        assert all(p.suffix == ".lock" for p in (directory / ".locks").iterdir())


def test_state_written_by_append_is_what_load_returns(json_storage, run):
    custom = SessionState(
        variables={"k": [1, {"n": None}]},
        metadata={"created_at": 5, "last_active": 6, "compression_count": 2, "extra": "kept"},
        compression_state={"summary": "earlier talk", "covers": 10},
    )
    run(json_storage.append("s", turn("x"), custom, expected_revision=0))
    record = run(json_storage.load("s"))
    assert record.variables == custom.variables
    assert record.metadata["compression_count"] == 2
    assert record.metadata["extra"] == "kept"
    assert record.compression_state == custom.compression_state


# what is read is checked, never silently changed


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (
            b'{"sessionId": "s", "messages": [], "variables": {"n": 18446744073709551616}}',
            "64 bits",
        ),
        (
            b'{"sessionId": "s", "messages": [], "variables": {"n": -9223372036854775809}}',
            "64 bits",
        ),
        (b'{"sessionId": "s", "messages": [{"role": 7, "content": "x"}]}', "role"),
        (b'{"sessionId": "s", "messages": [], "savedAt": 9007199254740993}', "2^53"),
        (
            b'{"sessionId": "s", "variables": {"d": ' + b"[" * 220 + b"]" * 220 + b"}}",
            "deeper than 200 levels",
        ),
    ],
)
def test_a_file_that_is_not_canonical_is_corrupt_and_reported(
    json_storage, directory, run, raw, reason
):
    directory.mkdir()
    (directory / "s.json").write_bytes(raw)
    with pytest.raises(CorruptSessionError) as error:
        run(json_storage.load("s"))
    assert reason in error.value.reason
    (problem,) = run(json_storage.check())
    assert reason in problem.reason
    assert (directory / "s.json").read_bytes() == raw


def test_a_long_run_of_digits_inside_a_string_is_not_mistaken_for_a_number(json_storage, run):
    digits = "12345678901234567890123456789"
    run(json_storage.save(make_record("s", variables={"text": digits, "n": 2**64 - 1})))
    assert run(json_storage.load("s")).variables == {"text": digits, "n": 2**64 - 1}


def test_health_check_creates_nothing(tmp_path, run):
    storage = JsonStorage(tmp_path / "a" / "b")
    assert run(storage.health_check()) is True
    assert list(tmp_path.iterdir()) == []
