"""What needs only the end of a long history reads the end (``session_tail``):
a transcript's last turns and the last reply mean what they meant when the
whole history was read, however the windows fall."""

from __future__ import annotations

import asyncio

import pytest

from foliko_cli import Foliko
from foliko_cli.formats import transcript
from foliko_cli.messages.record import SessionRecord
from foliko_cli.messages.turns import turn_starts
from foliko_cli.storage import open_storage

TURNS = 120


def _history() -> list[dict]:
    """Turns of one to five messages: some with a tool loop, one with no reply."""
    messages: list[dict] = []
    for turn in range(TURNS):
        messages.append({"role": "user", "content": f"q{turn}", "created_at": 1})
        if turn % 4 == 1:
            call = {"id": f"c{turn}", "name": "f", "arguments": {}}
            messages.append(
                {"role": "assistant", "content": "", "tool_calls": [call], "created_at": 1}
            )
            messages.append(
                {"role": "tool", "tool_call_id": f"c{turn}", "content": "r", "created_at": 1}
            )
        if turn % 7 != 3:
            messages.append({"role": "assistant", "content": f"a{turn}", "created_at": 1})
    return messages


@pytest.fixture
def saved(tmp_path, monkeypatch):
    """``saved(messages)``: a facade over a SQLite store holding them as session ``s``."""
    monkeypatch.setattr("foliko_cli.service.managing.TAIL_WINDOW", 3)  # windows that grow
    url = f"sqlite:///{tmp_path / 's.db'}"
    opened: list[Foliko] = []

    def save(messages: list[dict]) -> Foliko:
        async def write() -> None:
            storage = open_storage(url, tmp_path)
            try:
                await storage.save(SessionRecord("s", messages=messages))
            finally:
                await storage.close()

        asyncio.run(write())
        opened.append(Foliko(url, "echo"))
        return opened[-1]

    yield save
    for facade in opened:
        facade.close()


def test_the_last_turns_are_those_of_the_whole_history(saved):
    messages = _history()
    foliko = saved(messages)
    starts = turn_starts(messages)
    for turns in range(1, len(starts) + 2):
        first = starts[-turns] if turns < len(starts) else 0
        whole = foliko.get_session("s")
        whole.messages = whole.messages[first:]
        expected = "\n".join(transcript.markdown(whole, first_seq=first)) + "\n"
        assert foliko.transcript("s", turns) == expected, turns


def test_the_last_reply_is_found_however_far_back(saved):
    messages = _history()
    messages += [{"role": "user", "content": f"unanswered {n}", "created_at": 1} for n in range(50)]
    foliko = saved(messages)
    tail = foliko.session_tail("s", lambda m: any(x["role"] == "assistant" for x in m))
    assert tail.messages == messages[tail.first_seq :]
    assert tail.first_seq > 0
    assert [m for m in tail.messages if m["role"] == "assistant"][-1]["content"] == "a119"


def test_a_tail_of_a_short_or_missing_session(saved):
    from foliko_cli.errors import SessionNotFoundError

    foliko = saved([{"role": "user", "content": "only", "created_at": 1}])
    tail = foliko.session_tail("s", lambda m: False)
    assert (tail.first_seq, [m["content"] for m in tail.messages]) == (0, ["only"])
    with pytest.raises(SessionNotFoundError):
        foliko.session_tail("nobody", lambda m: True)
