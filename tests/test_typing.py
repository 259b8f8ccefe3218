"""A user's code that calls ``Foliko``/``AsyncFoliko`` type-checks under
``mypy --strict`` and sees foliko's real types, not ``Any`` (``py.typed``).

mypy runs as a user's would: on their script alone, foliko's own modules
followed but not reported on (as for an installed package).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mypy")

ROOT = Path(__file__).resolve().parents[1]

USER_CODE = """\
    import asyncio

    from foliko_cli import (
        AsyncFoliko,
        Foliko,
        SessionRecord,
        SessionSummary,
        TurnRequest,
        TurnResult,
    )


    def sync_use() -> str:
        with Foliko(storage="memory", model="echo") as foliko:
            result = foliko.chat("s1", "hi")
            reveal_type(result)
            summaries = foliko.list_sessions(sort="name")
            reveal_type(summaries)
            record = foliko.get_session("s1")
            reveal_type(record)
            reveal_type(foliko.storage)
            reveal_type(foliko.request(5))
            return f"{result.message} {summaries[0].session_id} {len(record.messages)}"


    async def async_use() -> TurnResult:
        async with AsyncFoliko(storage="memory", model="echo") as foliko:
            result = await foliko.chat("s1", "hi")
            reveal_type(result)
            turn = TurnRequest("s1", "again", options={"temperature": 0})
            reveal_type(await foliko.chat(turn))
            reveal_type(foliko.chat_stream(turn._replace(message="and again")))
            summaries: list[SessionSummary] = await foliko.list_sessions()
            reveal_type(await foliko.list_sessions())
            record: SessionRecord = await foliko.get_session("s1")
            reveal_type(await foliko.get_session("s1"))
            print(summaries, record.revision)
            return result


    asyncio.run(async_use())
"""

MISUSE = """\
    from foliko_cli import Foliko

    with Foliko(storage="memory", model="echo") as foliko:
        foliko.chat(1, "hi")
        foliko.list_sessions(sort=3)
        count: int = foliko.get_session("s1")
        foliko.chat("s1", "hi", modle="echo")
        foliko.dry_run("s1", "hi", turns="2")
    Foliko("memory", "echo", hom="/tmp")
"""

REVEALED = re.compile(r'^(?P<file>[\w.]+):(?P<line>\d+): note: Revealed type is "(?P<type>.*)"$')
ERROR = re.compile(r"^(?P<file>[\w.]+):(?P<line>\d+): error: (?P<message>.*)$")


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    where = tmp_path_factory.mktemp("user-code")
    (where / "user.py").write_text(textwrap.dedent(USER_CODE))
    (where / "misuse.py").write_text(textwrap.dedent(MISUSE))
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--follow-imports=silent",
            "--no-error-summary",
            "--hide-error-context",
            "--no-pretty",
            "--cache-dir",
            str(ROOT / ".mypy_cache" / "user-code"),
            "user.py",
            "misuse.py",
        ],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.stdout.splitlines()


def test_user_code_type_checks_strictly(mypy_output: list[str]) -> None:
    errors = [m for line in mypy_output if (m := ERROR.match(line)) and m["file"] == "user.py"]
    assert errors == [], "\n".join(mypy_output)


def test_user_code_sees_real_types(mypy_output: list[str]) -> None:
    revealed = [
        m["type"] for line in mypy_output if (m := REVEALED.match(line)) and m["file"] == "user.py"
    ]
    assert len(revealed) == 10, "\n".join(mypy_output)
    assert all(shown != "Any" for shown in revealed), revealed
    turn_sync, summaries, record, storage, request, turn_async, again, stream = revealed[:8]
    summaries_async, record_async = revealed[8:]
    assert storage == "foliko_cli.storage.base.SessionStorageAdapter"
    assert request == "foliko_cli.context.request.RequestContext"
    for turn in (turn_sync, turn_async, again):
        assert turn.endswith("fallback=foliko_cli.engine.turn.TurnResult]"), turn
    assert stream == "foliko_cli.engine.stream.TurnStream"
    for listing in (summaries, summaries_async):
        assert listing.startswith("list[") and "SessionSummary" in listing, listing
    assert record == record_async == "foliko_cli.messages.record.SessionRecord"


def test_misuse_is_caught(mypy_output: list[str]) -> None:
    errors = {
        int(m["line"]): m["message"]
        for line in mypy_output
        if (m := ERROR.match(line)) and m["file"] == "misuse.py"
    }
    assert sorted(errors) == [4, 5, 6, 7, 8, 9], "\n".join(mypy_output)
    assert 'Argument 1 has incompatible type "int"; expected "str | TurnRequest"' in errors[4]
    assert '"sort" has incompatible type "int"; expected "str"' in errors[5]
    assert '"SessionRecord", variable has type "int"' in errors[6]
    assert 'Unexpected keyword argument "modle"' in errors[7]
    assert '"turns" has incompatible type "str"; expected "int | None"' in errors[8]
    assert 'Unexpected keyword argument "hom" for "Foliko"' in errors[9]
