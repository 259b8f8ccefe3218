"""The access log of ``foliko serve``: one line per request on stderr, in text or JSON."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import threading
import time
import uuid

import httpx2 as httpx
import pytest
from models.fake_servers import OPENAI_KEY, Reply, openai_stream_events

from .servers import FOLIKO_BIN, foliko_env, wait_until

pytestmark = pytest.mark.process  # reads the server's own stderr

JSON_KEYS = {
    "time",
    "method",
    "route",
    "status",
    "duration_ms",
    "user",
    "request_id",
    "session_id",
    "outcome",
}
_VALUE = r'("(?:[^"\\]|\\.)*"|\S+)'
TEXT_LINE = re.compile(
    r"(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (?P<method>[A-Z]+) (?P<route>\S+)"
    r" (?P<status>\d{3}|-) (?P<ms>\d+\.\d)ms user=" + _VALUE + " request_id=" + _VALUE + ""
    r" session_id=" + _VALUE + r"(?: (?P<outcome>disconnected|incomplete))?\n"
)
KEYS = '[keys]\n"key-alice-7f3a" = "alice"\n'


def _unquoted(value: str) -> str | None:
    return None if value == "-" else json.loads(value) if value.startswith('"') else value


def text_lines(server) -> dict[str, dict]:
    """The server's access lines by request id (other stderr lines are left out)."""
    lines = {}
    for raw in list(server.stderr_lines):
        found = TEXT_LINE.fullmatch(raw)
        if found:
            user, request_id, session = (_unquoted(v) for v in found.groups()[5:8])
            lines[request_id] = {**found.groupdict(), "user": user, "session_id": session}
    return lines


def json_lines(server) -> dict[str, dict]:
    lines = {}
    for raw in list(server.stderr_lines):
        if raw.startswith("{"):
            record = json.loads(raw)
            lines[record["request_id"]] = record
    return lines


def logged(server, request_id: str, parse=text_lines) -> dict:
    """The line of ``request_id``: it is written once the response has ended."""
    wait_until(lambda: request_id in parse(server), what=f"the access line of {request_id}")
    return parse(server)[request_id]


def send(http, method: str, path: str, **kwargs) -> tuple[str, httpx.Response]:
    """The request's answer and the request id the server gave it."""
    response = http.request(method, path, **kwargs)
    return response.headers["x-request-id"], response


def test_text_lines_name_the_route_template_status_and_session(server, http):
    made_id, made = send(http, "POST", "/v1/conversations", json={})
    conversation = made.json()["id"]
    items_id, items = send(http, "GET", f"/v1/conversations/{conversation}/items?limit=1")
    missing_id, missing = send(http, "GET", f"/v1/sessions/{conversation}-gone")
    unrouted_id, unrouted = send(http, "GET", f"/v1/nothing/{conversation}")
    bad_id, bad = send(
        http,
        "POST",
        "/v1/responses",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    wrong_id, wrong = send(http, "PUT", "/v1/responses")
    chat_id, _ = send(
        http,
        "POST",
        "/v1/chat/completions",
        json={"model": "echo", "messages": [{"role": "user", "content": "hi"}]},
        headers={"X-Session-Id": "named by header"},
    )
    assert [items.status_code, missing.status_code, unrouted.status_code] == [200, 404, 404]
    assert [bad.status_code, wrong.status_code] == [400, 405]

    first = logged(server, made_id)
    assert (first["method"], first["route"], first["status"]) == (
        "POST",
        "/v1/conversations",
        "200",
    )
    assert first["user"] is None and first["session_id"] is None and first["outcome"] is None
    assert float(first["ms"]) >= 0
    line = logged(server, items_id)
    assert line["route"] == "/v1/conversations/{conversation_id}/items"
    assert line["session_id"] == conversation
    line = logged(server, missing_id)
    assert (line["route"], line["status"]) == ("/v1/sessions/{session_id}", "404")
    assert line["session_id"] == f"{conversation}-gone"
    assert (logged(server, unrouted_id)["route"], logged(server, unrouted_id)["status"]) == (
        "-",
        "404",
    )
    assert logged(server, bad_id)["status"] == "400"
    assert (logged(server, wrong_id)["route"], logged(server, wrong_id)["status"]) == (
        "/v1/responses",
        "405",
    )
    assert logged(server, chat_id)["session_id"] == "named by header"

    routes = [line["route"] for line in text_lines(server).values()]
    assert not [route for route in routes if conversation in route], "an id leaked into a route"
    assert "limit=1" not in server.stderr


def test_a_generated_request_id_is_the_one_sent_back(server, http):
    response = http.get("/healthz")
    request_id = response.headers["x-request-id"]
    line = logged(server, request_id)
    assert (line["method"], line["route"], line["status"]) == ("GET", "/healthz", "200")


@pytest.fixture
def keyed_json_server(start_server, tmp_path):
    path = tmp_path / "keys.toml"
    path.write_text(KEYS)
    path.chmod(0o600)
    return start_server("--api-keys", str(path), "--log-format", "json", "--workers", "2")


def test_json_lines_with_users_from_several_workers_keep_no_secret(keyed_json_server):
    server = keyed_json_server
    marker = f"marker-{uuid.uuid4().hex}"
    alice = {"Authorization": "Bearer key-alice-7f3a"}
    with httpx.Client(base_url=server.url, timeout=30) as http:
        turn_id, turn = send(
            http,
            "POST",
            f"/v1/responses?api_key=query-{marker}",
            json={"model": "echo", "input": f"{marker} key-alice-7f3a"},
            headers=alice,
        )
        assert turn.status_code == 200 and marker in turn.text
        conversation = turn.json()["conversation"]["id"]
        anonymous_id, anonymous = send(http, "GET", f"/v1/conversations/{conversation}")
        wrong_id, wrong = send(
            http, "GET", "/v1/sessions", headers={"Authorization": f"Bearer {marker}"}
        )
        assert anonymous.status_code == wrong.status_code == 401

        many: list[str] = []

        def list_items() -> None:
            answer = http.get(f"/v1/conversations/{conversation}/items", headers=alice)
            many.append(answer.headers["x-request-id"])

        threads = [threading.Thread(target=list_items) for _ in range(24)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    wait_until(lambda: set(many) <= set(json_lines(server)), what="every access line")
    records = json_lines(server)
    assert all(set(record) == JSON_KEYS for record in records.values())
    assert {records[one]["user"] for one in many} == {"alice"}
    assert {records[one]["status"] for one in many} == {200}
    line = records[turn_id]
    assert (line["method"], line["route"], line["status"]) == ("POST", "/v1/responses", 200)
    assert line["user"] == "alice" and line["outcome"] == "complete"
    assert isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["time"])
    refused = records[anonymous_id]
    assert (refused["route"], refused["status"], refused["user"]) == (
        "/v1/conversations/{conversation_id}",
        401,
        None,
    )
    assert refused["session_id"] == conversation
    assert records[wrong_id]["status"] == 401 and records[wrong_id]["user"] is None

    assert server.stop() == 0
    assert marker not in server.stderr and "key-alice-7f3a" not in server.stderr
    assert "Bearer" not in server.stderr


def test_a_stream_is_logged_when_it_ends_and_a_disconnect_is_marked(start_server, model_server):
    held, dropped = threading.Event(), threading.Event()
    events = openai_stream_events(["one", " two"])
    model_server.queue(
        Reply(events=events, stall=held, stall_after=1),
        Reply(events=events, stall=dropped, stall_after=1),
    )
    env = {"OPENAI_BASE_URL": f"{model_server.url}/v1", "OPENAI_API_KEY": OPENAI_KEY}
    server = start_server(env=env)
    body = {
        "model": "openai:some-model",
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    with httpx.Client(base_url=server.url, timeout=30) as http:
        headers = {"X-Session-Id": "streamed"}
        with http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
            whole = response.headers["x-request-id"]
            lines = response.iter_lines()
            assert next(lines).startswith("data: ")
            began = time.monotonic()
            assert model_server.wait_for_requests(1)
            assert whole not in text_lines(server), "logged before the stream ended"
            streamed_for = time.monotonic() - began  # the server's stream is open all along
            held.set()
            rest = list(lines)
        assert "data: [DONE]" in rest

        with http.stream("POST", "/v1/chat/completions", json=body) as response:
            cut = response.headers["x-request-id"]
            assert next(response.iter_lines()).startswith("data: ")
        # leaving the block closed the connection half-way

    line = logged(server, whole)
    assert (line["route"], line["status"], line["outcome"]) == ("/v1/chat/completions", "200", None)
    assert line["session_id"] == "streamed"
    assert float(line["ms"]) >= streamed_for * 1000 - 0.05
    line = logged(server, cut)
    assert (line["status"], line["outcome"]) == ("200", "disconnected")
    dropped.set()


def test_no_access_log(start_server):
    server = start_server("--no-access-log")
    found = httpx.get(server.url + "/v1/models")
    assert found.is_success and httpx.get(server.url + "/nothing").is_error
    assert server.stop() == 0
    assert found.headers["x-request-id"] not in server.stderr
    assert [line for line in server.stderr_lines if "listening on" not in line] == []


def test_an_unknown_log_format_exits_2(foliko_home):
    result = subprocess.run(
        [str(FOLIKO_BIN), "serve", "--port", "0", "--log-format", "xml"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=foliko_env(foliko_home),
        timeout=60,
    )
    assert result.returncode == 2
    errors = result.stderr.decode().splitlines()
    assert len(errors) == 1 and errors[0].startswith("foliko: error: "), errors
    assert "--log-format" in errors[0] and "'xml'" in errors[0], errors
    assert "text" in errors[0] and "json" in errors[0]
    assert b"listening on" not in result.stderr and b"Traceback" not in result.stderr


# the middleware alone, around apps that fail


def run_logged(
    app, *, format: str = "text", state: dict | None = None, metrics=None, socket=False
) -> list[bytes]:
    from foliko_cli.serve.access_log import AccessLogMiddleware

    written: list[bytes] = []
    logged_app = AccessLogMiddleware(app, format=format, write=written.append, metrics=metrics)
    scope = {"type": "http", "method": "POST", "path": "/x", "headers": [], "state": state or {}}
    if socket:
        del scope["method"]
        scope["type"] = "websocket"

    async def receive() -> dict:
        return {"type": "http.request", "body": b""}

    async def send(message: dict) -> None:
        return None

    async def main() -> None:
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await logged_app(scope, receive, send)

    asyncio.run(main())
    return written


async def fails_before_answering(scope, receive, send) -> None:
    raise RuntimeError("a bug")


async def fails_half_way(scope, receive, send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"a", "more_body": True})
    raise RuntimeError("a bug")


async def is_cancelled(scope, receive, send) -> None:
    raise asyncio.CancelledError


@pytest.mark.parametrize(
    ("app", "status", "outcome"),
    [(fails_before_answering, 500, "incomplete"), (fails_half_way, 200, "incomplete")],
)
def test_a_failing_app_still_gets_its_line(app, status, outcome):
    (line,) = run_logged(app, format="json")
    record = json.loads(line)
    assert (record["status"], record["outcome"], record["route"]) == (status, outcome, None)


def test_a_cancelled_request_that_sent_nothing_has_no_status():
    (line,) = run_logged(is_cancelled)
    assert re.search(rb" POST - - \d+\.\dms .* incomplete\n\Z", line), line


def test_a_session_named_by_the_route_is_logged_quoted_when_not_one_word():
    async def answers(scope, receive, send) -> None:
        scope["state"]["log_session"] = 'two words\nand "a line"'
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    (line,) = run_logged(answers)
    assert line.count(b"\n") == 1
    assert line.endswith(b' session_id="two words\\nand \\"a line\\""\n')
    (record,) = run_logged(answers, format="json")
    assert json.loads(record)["session_id"] == 'two words\nand "a line"'


class CountedRequests:
    def __init__(self) -> None:
        self.seen: list[int | None] = []

    def request(self, scope: dict, status: int | None) -> None:
        self.seen.append(status)


async def accepts_then_talks(scope, receive, send) -> None:
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.send", "text": "hi"})
    await send({"type": "websocket.close", "code": 1000})


async def closes_before_accepting(scope, receive, send) -> None:
    await send({"type": "websocket.close", "code": 1008})


async def denies_with_a_response(scope, receive, send) -> None:
    await send({"type": "websocket.http.response.start", "status": 401, "headers": []})
    await send({"type": "websocket.http.response.body", "body": b"{}"})


@pytest.mark.parametrize(
    ("app", "status"),
    [
        (accepts_then_talks, 101),
        (closes_before_accepting, 403),
        (denies_with_a_response, 401),
        (fails_before_answering, 500),
    ],
)
def test_a_websocket_session_is_counted_at_its_handshake_and_logged_when_it_ends(app, status):
    metrics = CountedRequests()
    (line,) = run_logged(app, format="json", metrics=metrics, socket=True)
    record = json.loads(line)
    assert (record["method"], record["status"], record["outcome"]) == ("GET", status, "closed")
    assert metrics.seen == [status]
