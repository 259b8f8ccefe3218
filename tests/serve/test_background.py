"""Background responses (``background: true``) through the official SDK: they
run after the request returns, are polled, streamed and resumed from any
server sharing the storage, cancelled without saving anything, settled when
their server dies, and still resolve once their journal is pruned."""

from __future__ import annotations

import json
import threading

import openai
import pytest
from models.fake_servers import Reply, openai_stream_events

from foliko_cli.serve.background import JOURNAL_PREFIX
from foliko_cli.serve.ids import parse_background_id

from .servers import run_cli, wait_until

KEY = "sk-background-test"
RUNNING = ("queued", "in_progress")


def sdk(server):
    return openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0)


def upstream_servers(start_server, model_server, count: int = 1, **env):
    """``count`` servers on one SQLite store whose ``openai:`` models are the fake upstream."""
    extra = {"OPENAI_BASE_URL": f"{model_server.url}/v1", "OPENAI_API_KEY": KEY, **env}
    return [start_server(env=extra) for _ in range(count)]


def finished(client, response_id: str):
    found = []

    def done() -> bool:
        found[:] = [client.responses.retrieve(response_id)]
        return found[0].status not in RUNNING

    wait_until(done, what=f"{response_id} to finish")
    return found[0]


def listed(home) -> list[str]:
    rows = json.loads(run_cli(home, "sessions", "list", "--json").stdout)
    return [row["session_id"] for row in rows]


def journal_exists(home, response_id: str) -> bool:
    request_id, _ = parse_background_id(response_id)
    return run_cli(home, "sessions", "show", JOURNAL_PREFIX + request_id).returncode == 0


def stalled_stream(chunks: list[str], after: int | None = None) -> tuple[Reply, threading.Event]:
    """A streamed upstream reply that waits for the event before answering
    (or after ``after`` of its events)."""
    release = threading.Event()
    return Reply(events=openai_stream_events(chunks), stall=release, stall_after=after), release


def test_a_background_response_is_queued_then_polled_to_its_end(server, client):
    created = client.responses.create(
        model="echo", input="hello there", background=True, metadata={"k": "v"}
    )
    assert created.status == "queued" and created.background is True
    assert created.output == [] and created.metadata == {"k": "v"}
    done = finished(client, created.id)
    assert (done.id, done.status, done.background) == (created.id, "completed", True)
    assert done.output_text == "hello there" and done.metadata == {"k": "v"}
    inputs = client.responses.input_items.list(created.id)
    assert [i.content[0].text for i in inputs.data] == ["hello there"]
    later = client.responses.create(model="echo", input="next", previous_response_id=created.id)
    assert later.conversation.id == done.conversation.id
    items = client.conversations.items.list(done.conversation.id, order="asc")
    assert [i.content[0].text for i in items.data] == ["hello there"] * 2 + ["next"] * 2
    # cancelling a finished response returns it unchanged
    again = client.responses.cancel(created.id)
    assert (again.status, again.output_text) == ("completed", "hello there")
    assert done.conversation.id in listed(server.home)
    assert not any(name.startswith(".foliko/") for name in listed(server.home))


def test_forgetting_its_conversation_removes_the_journal_too(server, client):
    created = client.responses.create(model="echo", input="zebracorn", background=True)
    done = finished(client, created.id)
    assert journal_exists(server.home, created.id)
    forgot = run_cli(server.home, "sessions", "forget", done.conversation.id, "--yes", "--json")
    assert forgot.returncode == 0, forgot.stderr
    (entry,) = json.loads(forgot.stdout)["sessions"]
    assert (entry["session_id"], entry["server_records"]) == (done.conversation.id, 1)
    assert not journal_exists(server.home, created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)


def test_a_background_response_must_be_stored(client):
    with pytest.raises(openai.BadRequestError, match="store"):
        client.responses.create(model="echo", input="x", background=True, store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_bg0123abcd_" + "bm9wZQ")


def test_cancel_stops_the_model_call_and_saves_nothing(start_server, model_server):
    reply, release = stalled_stream(["never ", "saved"])
    model_server.queue(reply)
    (server,) = upstream_servers(start_server, model_server)
    client = sdk(server)
    created = client.responses.create(model="openai:m", input="slow", background=True)
    assert model_server.wait_for_requests(1)
    wait_until(lambda: client.responses.retrieve(created.id).status == "in_progress")
    cancelled = client.responses.cancel(created.id)
    assert (cancelled.id, cancelled.status, cancelled.usage) == (created.id, "cancelled", None)
    release.set()
    assert client.responses.retrieve(created.id).status == "cancelled"
    assert client.responses.cancel(created.id).status == "cancelled"
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(created.conversation.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(created.id)
    assert listed(server.home) == []


def test_a_stream_resumes_on_another_server_and_goes_on_live(start_server, model_server):
    # role chunk, keep-alive, "one ", "two ", then the reply stalls
    reply, release = stalled_stream(["one ", "two ", "three"], after=4)
    model_server.queue(reply)
    first, second = upstream_servers(start_server, model_server, 2)
    one, two = sdk(first), sdk(second)
    stream = one.responses.create(model="openai:m", input="count", background=True, stream=True)
    seen = []
    for event in stream:
        seen.append(event)
        if getattr(event, "delta", None) == "two ":
            break
    stream.close()  # the client goes away; the response goes on
    response_id = seen[0].response.id
    assert [e.sequence_number for e in seen] == list(range(len(seen)))
    cursor = next(e.sequence_number for e in seen if e.type == "response.output_text.delta")

    resumed = two.responses.retrieve(response_id, stream=True, starting_after=cursor)
    later = []
    for event in resumed:
        later.append(event)
        if getattr(event, "delta", None) == "two ":
            assert two.responses.retrieve(response_id).status == "in_progress"
            release.set()  # what follows arrives live
    assert later[0].sequence_number == cursor + 1
    assert [e.sequence_number for e in later] == list(range(cursor + 1, cursor + 1 + len(later)))
    assert later[-1].type == "response.completed"
    assert later[-1].response.id == response_id
    assert later[-1].response.output_text == "one two three"
    text = "one " + "".join(e.delta for e in later if e.type == "response.output_text.delta")
    assert text == "one two three"

    replay = [e.type for e in one.responses.retrieve(response_id, stream=True, starting_after=-1)]
    assert replay[0] == "response.created" and replay[-1] == "response.completed"
    assert one.responses.retrieve(response_id).output_text == "one two three"
    plain = one.responses.create(model="echo", input="x", background=True)
    finished(one, plain.id)
    with pytest.raises(openai.BadRequestError, match="stream: true"):
        one.responses.retrieve(plain.id, stream=True)


def test_a_cancel_on_another_server_reaches_the_running_one(start_server, model_server):
    reply, release = stalled_stream(["not ", "kept"])
    model_server.queue(reply)
    first, second = upstream_servers(start_server, model_server, 2)
    one, two = sdk(first), sdk(second)
    before = one.responses.create(model="echo", input="earlier")
    conversation = before.conversation.id
    created = one.responses.create(
        model="openai:m", input="slow", background=True, conversation=conversation
    )
    assert model_server.wait_for_requests(1)
    wait_until(lambda: two.responses.retrieve(created.id).status == "in_progress")
    with pytest.raises(openai.BadRequestError, match="still in_progress"):
        two.responses.input_items.list(created.id)
    assert two.responses.cancel(created.id).status == "cancelled"
    assert one.responses.retrieve(created.id).status == "cancelled"
    release.set()
    items = one.conversations.items.list(conversation, order="asc")
    assert [i.content[0].text for i in items.data] == ["earlier", "earlier"]
    with pytest.raises(openai.NotFoundError):
        one.responses.retrieve(created.id.replace("resp_bg", "resp_bgf"))


def test_a_response_whose_server_died_is_marked_failed(start_server, model_server):
    reply, _ = stalled_stream(["lost"])
    model_server.queue(reply)
    env = {"FOLIKO_SERVE_BACKGROUND_LEASE": "2"}
    first, second = upstream_servers(start_server, model_server, 2, **env)
    created = sdk(first).responses.create(model="openai:m", input="x", background=True)
    assert model_server.wait_for_requests(1)
    first.kill()
    failed = finished(sdk(second), created.id)
    assert failed.status == "failed" and "stopped" in failed.error.message


def test_a_pruned_journal_still_resolves_to_the_stored_turn(start_server):
    server = start_server(env={"FOLIKO_SERVE_BACKGROUND_RETENTION": "0"})
    client = sdk(server)
    created = client.responses.create(model="echo", input="kept", background=True)
    done = finished(client, created.id)
    assert journal_exists(server.home, created.id)

    def pruned() -> bool:
        """Each later background request prunes (a pass may meet the journal's last write)."""
        client.responses.create(model="echo", input="other", background=True)
        return not journal_exists(server.home, created.id)

    wait_until(pruned, what="the journal's pruning")
    again = client.responses.retrieve(created.id)
    assert (again.id, again.status, again.output_text) == (created.id, "completed", "kept")
    assert again.conversation.id == done.conversation.id
    assert [i.content[0].text for i in client.responses.input_items.list(created.id).data] == [
        "kept"
    ]
    follow = client.responses.create(model="echo", input="more", previous_response_id=created.id)
    assert follow.conversation.id == done.conversation.id
