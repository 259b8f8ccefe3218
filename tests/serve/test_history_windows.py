"""What reads a window of a long history instead of all of it: a conversation's
items, paged (every page means what the page of the whole list means, whatever
the order, limit and ``after``, also after a rewrite moved the item numbers),
one item, the conversation itself, adding items, and continuing the latest
response."""

from __future__ import annotations

import itertools

import pytest


def _items(n: int) -> list[dict]:
    """Messages, and function calls with their outputs (one message holding two
    calls: three items)."""
    out: list[dict] = []
    for i in range(n):
        out.append({"type": "message", "role": "user", "content": f"q{i}"})
        if i % 3 == 1:
            for c in ("a", "b"):
                call = {"call_id": f"c{i}{c}", "name": "f", "arguments": "{}"}
                out.append({"type": "function_call", **call})
            for c in ("a", "b"):
                out.append({"type": "function_call_output", "call_id": f"c{i}{c}", "output": "r"})
        out.append({"type": "message", "role": "assistant", "content": f"a{i}"})
    return out


def _all(http, conversation: str) -> list[str]:
    answer = http.get(f"/v1/conversations/{conversation}/items?order=asc&limit=100")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert not body["has_more"]
    return [item["id"] for item in body["data"]]


def _check_every_page(http, conversation: str, everything: list[str]) -> None:
    for order, limit in itertools.product(("asc", "desc"), (1, 2, 3, 7)):
        ordered = everything if order == "asc" else everything[::-1]
        for after in (None, *ordered):
            rest = ordered[ordered.index(after) + 1 :] if after else ordered
            query = {"order": order, "limit": limit, **({"after": after} if after else {})}
            answer = http.get(f"/v1/conversations/{conversation}/items", params=query)
            assert answer.status_code == 200, answer.text
            body = answer.json()
            got = ([item["id"] for item in body["data"]], body["has_more"])
            assert got == (rest[:limit], len(rest) > limit), query


@pytest.fixture
def conversation(http) -> str:
    answer = http.post("/v1/conversations", json={"items": _items(6)})
    assert answer.status_code == 200, answer.text
    return answer.json()["id"]


def test_every_page_of_a_conversation_is_the_page_of_the_whole_list(
    http, conversation, monkeypatch
):
    """... and is read from a window: the whole history is never loaded."""
    everything = _all(http, conversation)

    def whole(*args):
        raise AssertionError("a page read the whole history")

    monkeypatch.setattr("foliko_cli.service.managing.SessionsMixin.get_session", whole)
    assert len(everything) == len(set(everything)) == len(_items(6))
    _check_every_page(http, conversation, everything)
    for wanted in everything:
        answer = http.get(f"/v1/conversations/{conversation}/items/{wanted}")
        assert (answer.status_code, answer.json()["id"]) == (200, wanted)
    shown = http.get(f"/v1/conversations/{conversation}")
    assert (shown.status_code, shown.json()["id"]) == (200, conversation)


def test_pages_keep_their_meaning_after_items_are_deleted(http, conversation):
    """Deleting pins each message's number and moves the item offset: a page then
    finds ``after`` by another path, with the same answer."""
    everything = _all(http, conversation)
    for gone in (everything[1], everything[3], everything[2]):
        answer = http.delete(f"/v1/conversations/{conversation}/items/{gone}")
        assert answer.status_code == 200, answer.text
        everything.remove(gone)
    added = http.post(
        f"/v1/conversations/{conversation}/items",
        json={"items": [{"type": "message", "role": "user", "content": "later"}]},
    )
    assert added.status_code == 200, added.text
    everything.append(added.json()["data"][0]["id"])
    assert _all(http, conversation) == everything
    _check_every_page(http, conversation, everything)
    gone = http.get(f"/v1/conversations/{conversation}/items/{everything[0][:-1]}x")
    assert gone.status_code == 404


def test_a_function_output_answers_a_call_made_long_before(http):
    """Adding an output looks for its call near the end first, then in the whole
    history: a call further back than that is still found."""
    from foliko_cli.serve.stored import RECENT_CALLS

    call = {"type": "function_call", "call_id": "early", "name": "f", "arguments": "{}"}
    made = http.post("/v1/conversations", json={"items": [call]})
    assert made.status_code == 200, made.text
    conversation = made.json()["id"]
    filler = {"items": [{"type": "message", "role": "user", "content": "x"}] * 20}
    for _ in range(RECENT_CALLS // 20 + 1):
        added = http.post(f"/v1/conversations/{conversation}/items", json=filler)
        assert added.status_code == 200, added.text
    output = {"type": "function_call_output", "call_id": "early", "output": "done"}
    added = http.post(f"/v1/conversations/{conversation}/items", json={"items": [output]})
    assert added.status_code == 200, added.text
    unknown = {**output, "call_id": "nobody"}
    refused = http.post(f"/v1/conversations/{conversation}/items", json={"items": [unknown]})
    assert refused.status_code == 400
    assert "no function call 'nobody' is waiting for output" in refused.text


def test_paging_a_missing_conversation_or_after_a_foreign_item_says_so(http, conversation):
    missing = http.get("/v1/conversations/conv_missing/items")
    assert missing.status_code == 404
    other = http.post("/v1/conversations", json={"items": _items(1)}).json()["id"]
    foreign = _all(http, other)[0]
    answer = http.get(f"/v1/conversations/{conversation}/items", params={"after": foreign})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "after"


def test_continuing_the_latest_response_reads_its_turn_not_the_history(http, monkeypatch):
    """``previous_response_id`` naming a session's latest turn reads from that turn
    on (the turn itself reads what it sends); an earlier one still forks."""

    def respond(previous: str | None, text: str) -> dict:
        body = {"model": "echo", "input": text}
        answer = http.post("/v1/responses", json={**body, "previous_response_id": previous})
        assert answer.status_code == 200, answer.text
        return answer.json()

    first = respond(None, "one")
    with monkeypatch.context() as patched:

        def whole(*args):
            raise AssertionError("continuing the latest response read the whole history")

        patched.setattr("foliko_cli.service.managing.SessionsMixin.get_session", whole)
        second = respond(first["id"], "two")
        third = respond(second["id"], "three")
    conversation = first["conversation"]["id"]
    assert second["conversation"]["id"] == third["conversation"]["id"] == conversation
    items = http.get(f"/v1/conversations/{conversation}/items", params={"order": "asc"}).json()
    texts = [item["content"][0]["text"] for item in items["data"]]
    assert texts == ["one", "one", "two", "two", "three", "three"]
    forked = respond(first["id"], "other")
    assert forked["conversation"]["id"] != conversation
    branch = forked["conversation"]["id"]
    items = http.get(f"/v1/conversations/{branch}/items", params={"order": "asc"}).json()
    assert [item["content"][0]["text"] for item in items["data"]] == [
        "one",
        "one",
        "other",
        "other",
    ]


WEATHER = [
    {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


@pytest.mark.parametrize("chained_by", ["conversation", "previous_response_id"])
def test_a_function_output_continues_the_turn_without_the_whole_history(
    http, monkeypatch, chained_by
):
    """The client's tool loop: the output's call is found near the end; an output
    that answers no call is still refused after the whole history is read."""
    conversation = http.post("/v1/conversations", json={"items": _items(6)}).json()["id"]

    def respond(**body) -> dict:
        answer = http.post("/v1/responses", json={"model": "echo", "tools": WEATHER, **body})
        assert answer.status_code == 200, answer.text
        return answer.json()

    asked = respond(input='/tool get_weather {"city": "Paris"}', conversation=conversation)
    [call] = asked["output"]
    output = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
    place = {"conversation": conversation} if chained_by == "conversation" else {}
    if chained_by == "previous_response_id":
        place = {"previous_response_id": asked["id"]}
    with monkeypatch.context() as patched:

        def whole(*args):
            raise AssertionError("a function output read the whole history")

        patched.setattr("foliko_cli.service.managing.SessionsMixin.get_session", whole)
        answered = respond(input=[output], **place)
    assert answered["output"][0]["content"][0]["text"] == "get_weather returned: sunny"
    assert answered["conversation"]["id"] == conversation
    stray = http.post(
        "/v1/responses",
        json={"model": "echo", "input": [{**output, "call_id": "call_nope"}], **place},
    )
    assert stray.status_code == 400
    assert "no function call 'call_nope' is waiting for output" in stray.text


def test_a_stored_response_is_read_from_its_first_message_on(http, monkeypatch):
    """GET a response, its input items, cancel and delete it: read in windows from
    its first message (growing where its turn is longer), the same answers as
    from the whole history."""
    conversation = http.post("/v1/conversations", json={"items": _items(6)}).json()["id"]
    made = []
    for text in ('/tool get_weather {"city": "Paris"}', "after the call", "last"):
        answer = http.post(
            "/v1/responses",
            json={"model": "echo", "input": text, "tools": WEATHER, "conversation": conversation},
        )
        assert answer.status_code == 200, answer.text
        made.append(answer.json()["id"])

    def read_all() -> list:
        return [
            (
                http.get(f"/v1/responses/{rid}").json(),
                http.get(f"/v1/responses/{rid}/input_items").json(),
                http.post(f"/v1/responses/{rid}/cancel").json(),
            )
            for rid in made
        ]

    with monkeypatch.context() as whole_only:
        whole_only.setattr("foliko_cli.serve.stored._windowed", _none)
        expected = read_all()
    with monkeypatch.context() as windowed:
        windowed.setattr("foliko_cli.serve.stored.RESPONSE_WINDOW", 1)
        windowed.setattr("foliko_cli.service.managing.SessionsMixin.get_session", _whole)
        assert read_all() == expected
        assert http.delete(f"/v1/responses/{made[0]}").status_code == 200
        assert http.get(f"/v1/responses/{made[0]}").status_code == 404
    assert [e[0]["id"] for e in expected] == made


async def _none(*args):
    return None


def _whole(*args):
    raise AssertionError("the whole history was read")
