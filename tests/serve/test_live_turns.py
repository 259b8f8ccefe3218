"""``POST /v1/sessions/{id}/turns``: the web app's streamed turns, their cancel,
and a turn that waits for a busy session."""

from __future__ import annotations

import base64
import contextlib
import json
import threading

import pytest
from models.fake_servers import Reply, openai_stream_events

from .servers import held, run_cli

KEY = "sk-live-turns"


def events_in(lines) -> list[dict]:
    return [json.loads(line[6:]) for line in lines if line.startswith("data: ")]


def next_event(lines) -> dict:
    return json.loads(next(line for line in lines if line.startswith("data: "))[6:])


def run_turn(http, session_id: str, **body) -> list[dict]:
    with http.stream("POST", f"/v1/sessions/{session_id}/turns", json=body) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return events_in(response.iter_lines())


def messages(http, session_id: str) -> list[dict]:
    return http.get(f"/v1/sessions/{session_id}").json()["messages"]


def test_a_turn_creates_its_session_titled_and_streams_what_is_stored(http):
    events = run_turn(http, "live-new", message="## Trip plans\nfor May", create=True)
    assert [e["type"] for e in events] == ["started", "delta", "done"]
    assert events[1]["text"] == "## Trip plans\nfor May"
    done = events[-1]
    stored = http.get("/v1/sessions/live-new").json()
    assert done["position"] == 0 and done["messages"] == stored["messages"]
    reply = done["messages"][1]
    assert reply["model"] == "echo" and reply["usage"] == done["usage"]
    assert isinstance(reply["duration_ms"], int) and isinstance(done["duration_ms"], int)
    assert reply["request_id"] == events[0]["turn_id"]
    assert stored["metadata"]["title"] == "Trip plans"
    listed = {row["session_id"]: row for row in http.get("/v1/sessions").json()["data"]}
    assert listed["live-new"]["title"] == "Trip plans"
    again = http.post("/v1/sessions/live-new/turns", json={"message": "x", "create": True})
    assert again.status_code == 409 and again.json()["error"]["code"] == "session_exists"


def test_regenerate_edit_system_prompt_and_attachments(http, server):
    run_turn(http, "live-edit", message="first", create=True, system="Be terse.")
    assert http.get("/v1/sessions/live-edit").json()["metadata"]["system_prompt"] == "Be terse."
    run_turn(http, "live-edit", message="second")
    before = messages(http, "live-edit")
    done = run_turn(http, "live-edit", regenerate=True)[-1]
    after = messages(http, "live-edit")
    assert done["position"] == 2 and len(after) == 4
    assert after[2]["content"] == "second" and after[3]["request_id"] != before[3]["request_id"]
    run_turn(http, "live-edit", message="second, edited", regenerate=True)
    assert [m["content"] for m in messages(http, "live-edit")] == [
        "first",
        "first",
        "second, edited",
        "second, edited",
    ]
    data = base64.b64encode(b"the attached words").decode()
    attached = [{"name": "a.txt", "data": data}]
    done = run_turn(http, "live-edit", message="see", attachments=attached)[-1]
    user = done["messages"][0]
    assert "the attached words" in user["content"]
    assert user["attachments"][0]["name"] == "a.txt"
    dry = run_cli(server.home, "chat", "-s", "live-edit", "--dry-run", "--json", "next")
    assert "Be terse." in json.loads(dry.stdout)["system"]


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({}, "message is required"),
        ({"message": 3}, "message has the wrong type"),
        ({"regenerate": True, "create": True}, "a new session has no turn to regenerate"),
        ({"message": "x", "attachments": "a.txt"}, "attachments must be a list"),
        ({"message": "x", "attachments": [{"name": "a"}]}, "needs its data"),
        ({"message": "x", "attachments": [{"name": "a", "data": "%%"}]}, "not base64"),
        ({"message": "x", "attachments": [{"data": "YQ=="}]}, "needs a name"),
    ],
)
def test_bad_input_is_one_400_and_writes_nothing(http, body, fragment):
    response = http.post("/v1/sessions/live-bad/turns", json=body)
    assert response.status_code == 400
    assert fragment in response.json()["error"]["message"]
    assert http.get("/v1/sessions/live-bad").status_code == 404


def test_a_failed_turn_is_an_error_event_and_saves_nothing(http):
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()
    body = {"message": "x", "create": True, "attachments": [{"name": "p.png", "data": png}]}
    events = run_turn(http, "live-image", **body)
    assert [e["type"] for e in events] == ["started", "error"]
    assert "echo does not take images" in events[1]["error"]["message"]
    assert http.get("/v1/sessions/live-image").status_code == 404


def test_cancel_closing_and_a_busy_session(start_server, model_server):
    """A cancel (or the client closing the stream) stops the turn and saves
    nothing; a turn waiting for a busy session says so first, then runs."""
    import httpx2 as httpx

    env = {"OPENAI_BASE_URL": f"{model_server.url}/v1", "OPENAI_API_KEY": KEY}
    server = start_server(env=env)
    client = httpx.Client(base_url=server.url, timeout=30)
    release = threading.Event()
    stalled = Reply(
        events=openai_stream_events(["partial ", "never"]), stall=release, stall_after=3
    )
    second_release = threading.Event()
    slow = Reply(
        events=openai_stream_events(["slow ", "answer"]), stall=second_release, stall_after=3
    )
    model_server.queue(stalled, stalled, slow)
    body = {"message": "slow", "model": "openai:m", "create": True}
    try:
        with client.stream("POST", "/v1/sessions/live-cancel/turns", json=body) as response:
            lines = response.iter_lines()
            first = next_event(lines)
            assert first["type"] == "started"
            assert next_event(lines) == {"type": "delta", "text": "partial "}
            path = f"/v1/sessions/live-cancel/turns/{first['turn_id']}/cancel"
            assert client.post(path).json() == {"turn_id": first["turn_id"], "cancelled": True}
            assert events_in(lines) == [{"type": "cancelled"}]
        assert client.get("/v1/sessions/live-cancel").status_code == 404
        gone = client.post(path)
        assert gone.status_code == 404 and "close its stream" in gone.json()["error"]["message"]

        with client.stream("POST", "/v1/sessions/live-close/turns", json=body) as response:
            assert next_event(response.iter_lines())["type"] == "started"
            assert model_server.wait_for_requests(2)
        # the stream closed: the turn stops and its session is never written
        release.set()
        assert client.get("/v1/sessions/live-close").status_code == 404

        assert run_cli(server.home, "chat", "-s", "live-busy", "first").returncode == 0
        with contextlib.ExitStack() as holding:
            holding.enter_context(held(server.home, "live-busy"))
            turn = {"message": "second"}
            with client.stream("POST", "/v1/sessions/live-busy/turns", json=turn) as response:
                assert response.status_code == 200
                lines = response.iter_lines()
                waiting = next_event(lines)
                assert waiting["type"] == "waiting" and waiting["holder"] == "pid 4242 on the-test"
                assert "another turn is running in this session" in waiting["message"]
                holding.close()  # the other turn ends: this one runs
                assert [e["type"] for e in events_in(lines)] == ["started", "delta", "done"]
        slow_turn = {"message": "slow one", "model": "openai:m"}
        with client.stream("POST", "/v1/sessions/live-busy/turns", json=slow_turn) as slow:
            slow_lines = slow.iter_lines()
            assert next_event(slow_lines)["type"] == "started"
            queued = {"message": "queued"}
            with client.stream("POST", "/v1/sessions/live-busy/turns", json=queued) as response:
                lines = response.iter_lines()
                assert next_event(lines)["holder"] == "another turn in this process"
                second_release.set()
                assert [e["type"] for e in events_in(lines)] == ["started", "delta", "done"]
            assert events_in(slow_lines)[-1]["type"] == "done"
        assert [m["content"] for m in messages(client, "live-busy")] == [
            *["first", "first", "second", "second"],
            *["slow one", "slow answer", "queued", "queued"],
        ]
    finally:
        release.set()
        second_release.set()
        client.close()
