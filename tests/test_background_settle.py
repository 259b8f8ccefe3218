"""A background response whose server died after saving its turn, but before
streaming all of it, is settled as completed by the next server that reads
it; the events it adds finish the stream, so that its deltas add up to the
response's text (the multi-host harness found streams that ended on
``response.completed`` with deltas missing: a host killed just after its
turn's write, or cut from the store while it wrote)."""

from __future__ import annotations

from foliko_cli.serve.background import _unstreamed

ITEM = "msg_1_abc"
TEXT = "n1:t1 | n1:t0"


def response() -> dict:
    part = {"type": "output_text", "text": TEXT, "annotations": [], "logprobs": []}
    item = {"type": "message", "id": ITEM, "status": "completed", "role": "assistant"}
    return {"id": "resp_bgX_S", "status": "completed", "output": [{**item, "content": [part]}]}


def opening() -> list[dict]:
    events = [{"type": "response.created"}, {"type": "response.in_progress"}]
    events += [
        {"type": "response.output_item.added", "output_index": 0, "item": {"id": ITEM}},
        {"type": "response.content_part.added", "item_id": ITEM, "output_index": 0},
    ]
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


def delta(text: str, number: int) -> dict:
    return {
        "type": "response.output_text.delta",
        "sequence_number": number,
        "item_id": ITEM,
        "output_index": 0,
        "content_index": 0,
        "delta": text,
    }


def streamed_text(events: list[dict]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


def test_the_rest_of_a_half_streamed_text_is_added():
    events = [*opening(), delta("n1:t1 ", 4), delta("| ", 5)]
    added = _unstreamed(events, response())
    assert streamed_text(events + added) == TEXT
    assert [e["sequence_number"] for e in added] == list(range(6, 6 + len(added)))
    assert [e["type"] for e in added] == [
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert added[1]["text"] == TEXT and added[-1]["item"]["id"] == ITEM


def test_a_message_never_streamed_is_added_whole():
    events = opening()[:2]
    added = _unstreamed(events, response())
    kinds = [e["type"] for e in added]
    assert kinds[:2] == ["response.output_item.added", "response.content_part.added"]
    assert added[0]["item"]["status"] == "in_progress" and added[0]["item"]["content"] == []
    assert streamed_text(events + added) == TEXT
    assert kinds[-1] == "response.output_item.done"


def test_a_finished_stream_gets_nothing_more():
    done = {"type": "response.output_item.done", "sequence_number": 9, "item": {"id": ITEM}}
    events = [*opening(), delta(TEXT, 4), done]
    assert _unstreamed(events, response()) == []


def test_a_client_that_saw_more_than_the_journal_kept_still_gets_the_end():
    """Its server streamed events 0–4 to it and died having written 0–1; the
    next server settled the journal (failed, as event 2): resuming after 4
    ends with that event, renumbered 5, not with nothing."""
    import asyncio

    from foliko_cli.serve.background import _journal_events

    failed = {"id": "resp_bgX_S", "status": "failed"}
    ending = {"type": "response.failed", "sequence_number": 2, "response": failed}
    variables = {"response": failed, "events": [*opening()[:2], ending], "revision": 3}

    async def replay(after: int) -> list[dict]:
        return [e async for e in _journal_events(None, "resp_bgX_S", variables, after, None)]

    assert asyncio.run(replay(4)) == [{**ending, "sequence_number": 5}]
    assert asyncio.run(replay(1)) == [ending]
    # it saw an event 2 of its own (one never written): the ending still comes
    assert asyncio.run(replay(2)) == [{**ending, "sequence_number": 3}]
