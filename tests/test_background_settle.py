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
