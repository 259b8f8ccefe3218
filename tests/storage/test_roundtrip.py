"""Arbitrary records survive every backend, and migration there and back, unchanged.

Property-based (hypothesis): unicode, large content, tool calls and variables
of every JSON type. Then a fixed set of awkward records goes through the real
CLI along sqlite -> postgresql -> redis -> json -> sqlite.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
from pathlib import Path

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from foliko_cli.messages.public import record_to_dict
from foliko_cli.messages.record import SessionRecord
from foliko_cli.messages.stored import content_hash
from foliko_cli.storage.jsonfile import JsonStorage
from foliko_cli.storage.migrate import migrate
from foliko_cli.storage.sqlite import SQLiteStorage

from . import services

FOLIKO = Path(sys.executable).with_name("foliko")
T0 = 1_700_000_000_000

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
session_ids = (
    st.text(
        st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Zl", "Zp")), min_size=1, max_size=60
    )
    .map(str.strip)
    .filter(bool)
)
texts = st.text(max_size=200) | st.text(alphabet="ab€\x00", min_size=3000, max_size=5000)


@st.composite
def messages(draw) -> list[dict]:
    out = []
    for index in range(draw(st.integers(min_value=0, max_value=6))):
        role = draw(st.sampled_from(["user", "assistant", "tool", "system"]))
        message = {
            "role": role,
            "content": draw(texts),
            "created_at": T0 + index,
            "request_id": draw(st.text(max_size=16)),
            "trace_id": "f" * 32,
        }
        if role == "assistant" and draw(st.booleans()):
            message["tool_calls"] = [
                {
                    "id": f"call_{index}",
                    "name": draw(st.text(min_size=1, max_size=20)),
                    "arguments": draw(
                        st.dictionaries(st.text(max_size=8), json_values, max_size=3)
                    ),
                }
            ]
        if role == "tool":
            message.update(tool_call_id=f"call_{index}", name="t", is_error=draw(st.booleans()))
        out.append(message)
    return out


@st.composite
def records(draw) -> SessionRecord:
    return SessionRecord(
        draw(session_ids),
        messages=draw(messages()),
        variables=draw(st.dictionaries(st.text(max_size=12), json_values, max_size=5)),
        metadata={"created_at": T0, "last_active": T0 + 9, "compression_count": 0},
        compression_state={},
        saved_at=T0 + 10,
    )


def same(a: SessionRecord, b: SessionRecord) -> bool:
    return (
        a.session_id == b.session_id
        and a.messages == b.messages
        and a.variables == b.variables
        and content_hash(a) == content_hash(b)
    )


PROPERTY = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
        HealthCheck.too_slow,
    ],
)


@PROPERTY
@given(record=records())
def test_any_record_round_trips_through_every_backend(storage, run, record):
    run(storage.save(record))
    loaded = run(storage.load(record.session_id))
    assert loaded is not None and same(record, loaded)
    run(storage.delete(record.session_id))


@PROPERTY
@given(batch=st.lists(records(), min_size=1, max_size=4, unique_by=lambda r: r.session_id))
def test_migration_there_and_back_changes_nothing(tmp_path_factory, batch):
    work = tmp_path_factory.mktemp("roundtrip")
    start, middle, end = (
        JsonStorage(work / "a"),
        SQLiteStorage(work / "b.db"),
        JsonStorage(work / "c"),
    )

    async def scenario():
        await start.save_many(batch)
        there = await migrate(start, middle)
        back = await migrate(middle, end)
        assert there.ok and back.ok
        assert len(there.copied) == len(back.copied) == len(batch)
        for record in batch:
            assert same(record, await end.load(record.session_id))
        for adapter in (start, middle, end):
            await adapter.close()

    asyncio.run(scenario())


def test_cli_migration_chain_through_every_server_backend_changes_nothing(tmp_path):
    postgres = services.require_postgres()
    redis = services.require_redis()
    env = {**os.environ, "FOLIKO_HOME": str(tmp_path / "home")}
    first = f"sqlite:///{tmp_path}/first.db"
    last = f"sqlite:///{tmp_path}/last.db"
    originals = services.sample_records()

    async def seed():
        storage = SQLiteStorage(tmp_path / "first.db")
        await storage.save_many(originals)
        await storage.close()

    asyncio.run(seed())
    with services.fresh_schema(postgres) as schema, services.fresh_prefix(redis) as prefix:
        chain = [
            first,
            f"{postgres}?schema={schema}",
            f"{redis}?prefix={prefix}",
            f"json:///{tmp_path}/json",
            last,
        ]
        for source, target in itertools.pairwise(chain):
            step = subprocess.run(
                [str(FOLIKO), "storage", "migrate", source, target, "--json"],
                capture_output=True,
                env=env,
                stdin=subprocess.DEVNULL,
                timeout=120,
            )
            assert step.returncode == 0, step.stderr.decode()
            summary = orjson.loads(step.stdout)
            assert summary["copied"] == len(originals) and summary["failed"] == []

    for record in originals:
        shown = {}
        for url in (first, last):
            result = subprocess.run(
                [str(FOLIKO), "--storage", url, "sessions", "show", record.session_id, "--json"],
                capture_output=True,
                env=env,
                stdin=subprocess.DEVNULL,
                timeout=60,
            )
            assert result.returncode == 0, result.stderr.decode()
            shown[url] = orjson.loads(result.stdout)
        assert shown[first] == shown[last]
        original = orjson.loads(orjson.dumps(record_to_dict(record)))
        assert shown[last]["messages"] == original["messages"]
        assert shown[last]["variables"] == original["variables"]
