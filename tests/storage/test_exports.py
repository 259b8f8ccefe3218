"""Every export format round-trips, on every backend.

- foliko (and its NDJSON form): export, import into an empty store, export
  again gives the same bytes, for a session holding everything and for any
  record hypothesis draws;
- chatgpt: foliko's ChatGPT importer reads the export back to the same
  messages (what the format carries), and a second round is a fixed point;
- openai: the items are the openai SDK's input item types, and what foliko
  serve makes of them exports to the same items;
- markdown: the transcript after a round trip is the transcript before.

The source is a memory store; the store under test is the empty one each
export is imported into, and exported from again.
"""

from __future__ import annotations

import base64

import orjson
import pytest
from click.testing import CliRunner
from full_session import IMAGE, T0, chatgpt_view, full_record
from hypothesis import given

from foliko_cli.cli.main import cli
from foliko_cli.formats.exporters import FORMATS, writer
from foliko_cli.formats.importers.reading import read
from foliko_cli.messages.public import record_to_dict
from foliko_cli.messages.record import SessionRecord, filled_metadata, new_metadata
from foliko_cli.service import AsyncFoliko
from foliko_cli.storage.memory import MemoryStorage

from .test_roundtrip import PROPERTY, records

DAY = 86_400_000


@pytest.fixture
def service(storage, tmp_path):
    """A service over each backend; the ``storage`` fixture closes the adapter."""
    return AsyncFoliko(storage, "echo", home=tmp_path / "target")


@pytest.fixture
def source(tmp_path, run):
    """A memory store holding the full session, a plain one and an empty one
    (with no metadata: an import fills it in)."""
    service = AsyncFoliko(MemoryStorage(), "echo", home=tmp_path / "source")
    plain = SessionRecord(
        "plain", [{"role": "user", "content": "hi"}], metadata=new_metadata(T0), saved_at=T0
    )
    for record in (full_record(), plain, SessionRecord("empty", saved_at=T0 + 1)):
        run(service.storage.save(record))
    return service


def export(service: AsyncFoliko, fmt: str, run, session_ids: list[str] | None = None) -> bytes:
    """What ``sessions export ID... --format FMT`` writes."""

    async def scenario() -> bytes:
        ids = session_ids or sorted(await service.storage.session_ids())
        found = [await service.get_session(session_id) for session_id in ids]
        return "".join(line + "\n" for line in writer(fmt)(found)).encode()

    return run(scenario())


def import_(service: AsyncFoliko, data: bytes, run):
    """What ``sessions import -`` does with ``data`` (its format told from it)."""
    imported = read("-", stdin=data)
    assert imported.unreadable == []
    return imported, run(service.import_sessions(imported.records))


def stored(record: SessionRecord) -> dict:
    """Everything a session holds, its metadata filled in as an import fills it."""
    metadata = filled_metadata(record.metadata, record.saved_at, len(record.messages))
    return {**record_to_dict(record), "metadata": metadata}


@pytest.mark.parametrize("fmt", ["foliko", "ndjson"])
def test_a_foliko_export_imports_into_an_empty_store_and_exports_the_same_bytes(
    source, service, run, fmt
):
    first = export(source, fmt, run)

    _, report = import_(service, first, run)

    assert sorted(report.imported) == ["empty", "plain", "trip ✓ 1"]
    assert export(service, fmt, run) == first
    for session_id in report.imported:
        original = run(source.get_session(session_id))
        assert stored(run(service.get_session(session_id))) == stored(original)
    again = run(service.import_sessions(read("-", stdin=first).records))
    assert sorted(again.unchanged) == sorted(report.imported)


def test_the_foliko_export_holds_everything_the_session_does(source, run):
    (exported,) = orjson.loads(export(source, "foliko", run, ["trip ✓ 1"]))
    original = full_record()

    assert exported["messages"] == original.messages
    assert exported["variables"] == original.variables
    assert exported["metadata"] == original.metadata
    assert exported["compression_state"] == original.compression_state
    assert exported["saved_at"] == original.saved_at
    assert exported["usage"] == {
        "input_tokens": 120,
        "output_tokens": 21,
        "cached_tokens": 24,
        "replies": 3,
        "cost": pytest.approx(0.00126),
    }
    assert export(source, "json", run) == export(source, "foliko", run)


@PROPERTY
@given(record=records())
def test_any_record_round_trips_byte_for_byte(service, storage, run, record):
    run(storage.delete(record.session_id))  # an id drawn before
    first = "".join(line + "\n" for line in writer("foliko")([record])).encode()

    _, report = import_(service, first, run)

    assert report.imported == [record.session_id]
    assert export(service, "foliko", run, [record.session_id]) == first


def test_a_chatgpt_export_reads_back_to_the_same_messages(source, service, run):
    first = export(source, "chatgpt", run)

    imported, report = import_(service, first, run)

    assert imported.format == "chatgpt"
    assert sorted(report.imported) == ["plain", "trip ✓ 1"]  # an empty one is left out
    assert imported.left_out == {
        "hidden, reasoning or unsupported item(s)": 5,
        "empty conversation(s)": 1,
    }
    trip = run(service.get_session("trip ✓ 1"))
    assert trip.messages == chatgpt_view(full_record())
    assert trip.metadata["title"] == "Tokyo trip"
    assert trip.metadata["created_at"] == T0
    assert trip.metadata["last_active"] == T0 + 7
    assert trip.metadata["imported_from"] == "chatgpt"
    second = export(service, "chatgpt", run)
    assert import_(service, second, run)[1].unchanged == report.imported
    run(service.storage.delete("trip ✓ 1"))
    run(service.storage.delete("plain"))
    import_(service, second, run)
    assert export(service, "chatgpt", run) == second


def test_the_chatgpt_export_has_the_shape_of_chatgpts(source, run):
    (conversation,) = orjson.loads(export(source, "chatgpt", run, ["trip ✓ 1"]))
    mapping = conversation["mapping"]

    assert conversation["id"] == conversation["conversation_id"] == "trip ✓ 1"
    assert (conversation["create_time"], conversation["update_time"]) == (
        T0 / 1000,
        (T0 + 7) / 1000,
    )
    assert conversation["default_model_slug"] == "anthropic:claude-sonnet-4"
    line, node = [], "client-created-root"
    while node is not None:
        assert mapping[node]["id"] == node
        line.append(mapping[node]["message"])
        children = mapping[node]["children"]
        assert all(mapping[child]["parent"] == node for child in children)
        node = children[0] if children else None
    assert len(line) == len(mapping) and line[0] is None
    assert mapping[conversation["current_node"]]["children"] == []
    shown = [
        (m["author"]["role"], m["author"]["name"], m["recipient"], m["content"]["content_type"])
        for m in line[1:]
    ]
    assert shown == [
        ("system", None, "all", "text"),
        ("user", None, "all", "text"),
        ("assistant", None, "search", "code"),
        ("assistant", None, "weather", "code"),
        ("tool", "search", "all", "text"),
        ("tool", "weather", "all", "text"),
        ("assistant", None, "all", "text"),
        ("user", None, "all", "text"),
        ("assistant", None, "all", "text"),
    ]
    user = line[2]
    assert user["create_time"] == (T0 + 1) / 1000
    assert user["metadata"]["attachments"] == [
        {
            "id": f"file-{IMAGE['sha256'][:24]}",
            "name": "map.png",
            "size": IMAGE["size"],
            "mime_type": "image/png",
        },
        {"id": f"file-{'0' * 24}", "name": "notes.md", "size": 11, "mime_type": "text/markdown"},
    ]
    assert line[3]["content"]["text"] == '{"q":"Tokyo","n":3}'
    assert line[-1]["metadata"] == {"model_slug": "anthropic:claude-sonnet-4"}
    assert export(source, "chatgpt", run, ["trip ✓ 1"]) == export(
        source, "chatgpt", run, ["trip ✓ 1"]
    )


def sdk_checked(kind, value):
    """``value`` as the openai SDK's type ``kind`` validates it (pydantic), every
    lazily checked iterable drained: equal to ``value`` only when it is of that
    type with no key the type does not have."""
    import pydantic

    def drained(found):
        if isinstance(found, dict):
            return {key: drained(item) for key, item in found.items()}
        if isinstance(found, str | int | float | bool) or found is None:
            return found
        return [drained(item) for item in found]

    return drained(pydantic.TypeAdapter(kind).validate_python(value))


def test_the_openai_items_are_the_sdks_input_items(source, run):
    from openai.types.responses import (
        ResponseFunctionToolCallParam,
        ResponseInputParam,
        ResponseOutputMessageParam,
    )
    from openai.types.responses.response_input_item_param import FunctionCallOutput, Message

    (session,) = orjson.loads(export(source, "openai", run, ["trip ✓ 1"]))
    items = session["input"]

    assert session["metadata"] == {"session_id": "trip ✓ 1"}
    assert sdk_checked(ResponseInputParam, items) == items
    kinds = {
        "user": Message,
        "system": Message,
        "assistant": ResponseOutputMessageParam,
        "function_call": ResponseFunctionToolCallParam,
        "function_call_output": FunctionCallOutput,
    }
    for item in items:
        assert sdk_checked(kinds[item.get("role", item["type"])], item) == item
    assert [(i["type"], i.get("role"), i.get("call_id")) for i in items] == [
        ("message", "system", None),
        ("message", "user", None),
        ("function_call", None, "call_a"),
        ("function_call", None, "call_b"),
        ("function_call_output", None, "call_a"),
        ("function_call_output", None, "call_b"),
        ("message", "assistant", None),
        ("message", "user", None),
        ("message", "assistant", None),
    ]
    text, image = items[1]["content"]
    assert text["text"].startswith("Plan a trip, see notes.md:")
    assert image == {
        "type": "input_image",
        "image_url": f"data:image/png;base64,{IMAGE['data']}",
        "detail": "auto",
    }
    assert items[2]["arguments"] == '{"q":"Tokyo","n":3}'
    assert items[6]["content"] == [
        {"type": "output_text", "text": "Here is a plan:\n\n1. Asakusa\n", "annotations": []}
    ]


def test_what_foliko_serve_makes_of_the_openai_items_exports_to_them(source, service, run):
    from foliko_cli.serve.items import input_messages, name_tool_outputs
    from foliko_cli.serve.openai_types import Input
    from foliko_cli.serve.schema import convert

    import_(service, export(source, "foliko", run), run)
    (session,) = orjson.loads(export(service, "openai", run, ["trip ✓ 1"]))

    messages = input_messages(convert(session["input"], Input))
    name_tool_outputs(messages, [])
    run(service.create_session("replayed", messages=messages))

    (replayed,) = orjson.loads(export(service, "openai", run, ["replayed"]))
    assert replayed["input"] == session["input"]


def test_an_image_kept_by_path_is_read_for_the_openai_items(service, run, tmp_path):
    picture = tmp_path / "big.png"
    picture.write_bytes(base64.b64decode(IMAGE["data"]))
    by_path = {k: v for k, v in IMAGE.items() if k != "data"} | {"path": str(picture)}
    gone = by_path | {"name": "gone.png", "path": str(tmp_path / "gone.png")}
    user = {"role": "user", "content": "", "attachments": [by_path, gone]}
    run(service.create_session("pictures", messages=[user]))

    (session,) = orjson.loads(export(service, "openai", run, ["pictures"]))

    assert session["input"][0]["content"] == [
        {
            "type": "input_image",
            "image_url": f"data:image/png;base64,{IMAGE['data']}",
            "detail": "auto",
        },
        {
            "type": "input_text",
            "text": f"[image gone.png is not available: {gone['path']} is missing or changed]",
        },
    ]


def test_the_transcript_after_a_round_trip_is_the_transcript_before(source, service, run):
    shown = ["trip ✓ 1", "plain"]
    before = export(source, "markdown", run, shown)

    import_(service, export(source, "foliko", run), run)

    after = export(service, "markdown", run, shown)
    assert after == before
    text = after.decode()
    assert "# Session Tokyo trip (trip ✓ 1)" in text
    assert "## 8. Assistant · anthropic:claude-sonnet-4" in text
    assert "## 5. Tool · weather (error)" in text
    assert text.count("\n---\n") == 1


def test_a_restored_export_is_as_old_as_it_was_and_another_tools_history_is_new(
    source, service, run
):
    import_(service, export(source, "foliko", run, ["trip ✓ 1"]), run)
    chatgpt = orjson.loads(export(source, "chatgpt", run, ["plain"]))
    chatgpt[0]["id"] = chatgpt[0]["conversation_id"] = "from chatgpt"
    import_(service, orjson.dumps(chatgpt), run)

    report = run(service.prune(DAY))

    assert report.deleted == ["trip ✓ 1"]
    assert [summary.session_id for summary in run(service.list_sessions())] == ["from chatgpt"]


def test_every_format_is_the_same_from_every_store_through_the_cli(storage_url, tmp_path):
    """The CLI itself: the default SQLite store's sessions exported, imported
    into the store at ``storage_url`` and exported from there, in every format."""
    cli_runner = CliRunner()

    def invoke(*args: str, input: bytes | None = None):
        result = cli_runner.invoke(cli, list(args), input=input, catch_exceptions=False)
        assert result.exit_code == 0, result.stderr
        return result

    backup = tmp_path / "full.json"
    backup.write_bytes(orjson.dumps([record_to_dict(full_record())]))
    invoke("sessions", "import", str(backup))
    invoke("chat", "-s", "tools", "-n", '/tool set_variable {"key": "k", "value": [1]}')
    invoke("chat", "-s", "tools", "-n", "and then?", "--system", "S")

    first = invoke("sessions", "export", "--all").stdout_bytes
    invoke("--storage", storage_url, "sessions", "import", "-", input=first)

    for fmt in sorted(set(FORMATS) - {"json"}):
        here = invoke("sessions", "export", "--all", "--format", fmt).stdout_bytes
        there = invoke("--storage", storage_url, "sessions", "export", "--all", "--format", fmt)
        assert there.stdout_bytes == here, fmt
    assert invoke("--storage", storage_url, "sessions", "export", "--all").stdout_bytes == first
    assert [session["session_id"] for session in orjson.loads(first)] == ["tools", "trip ✓ 1"]
