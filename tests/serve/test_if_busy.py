"""A second message to a busy session: ``Foliko-If-Busy`` on every turn route
that names a session, ``foliko chat --if-busy``, across processes (the
library's door: tests/test_if_busy.py; the store's: the conformance suite)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import threading
from pathlib import Path

import openai
import pytest
from models.fake_servers import Reply, openai_message, openai_stream_events

from foliko_cli.storage.filelock import INTERRUPT_SUFFIX
from foliko_cli.storage.names import file_stem

from .servers import FOLIKO_BIN, foliko_env, held, run_cli, wait_until

HEADER = "Foliko-If-Busy"
KEY = "sk-if-busy"


def turn_routes(session_id: str) -> list[tuple[str, dict, dict]]:
    """Each turn route naming ``session_id``: path, body, headers."""
    return [
        (
            "/v1/chat/completions",
            {"model": "echo", "messages": [{"role": "user", "content": "x"}]},
            {"X-Session-Id": session_id},
        ),
        ("/v1/responses", {"model": "echo", "input": "x", "conversation": session_id}, {}),
        (f"/v1/sessions/{session_id}/turns", {"message": "x"}, {}),
    ]


def contents(home: Path, session_id: str) -> list[str]:
    shown = run_cli(home, "sessions", "show", session_id, "--json")
    assert shown.returncode == 0, shown.stderr
    return [m["content"] for m in json.loads(shown.stdout)["messages"]]


def test_a_bad_policy_is_a_400_naming_the_header_on_every_turn_route(http):
    for path, body, headers in turn_routes("busy-bad"):
        answer = http.post(path, json=body, headers={**headers, HEADER: "later"})
        assert answer.status_code == 400, (path, answer.text)
        error = answer.json()["error"]
        assert error["param"] == HEADER
        assert "Foliko-If-Busy must be wait, reject or interrupt, not 'later'" in error["message"]
    assert http.get("/v1/sessions/busy-bad").status_code == 404


def test_reject_is_a_409_at_once_on_every_turn_route(http, server):
    session_id = "busy-held"
    assert run_cli(server.home, "chat", "-s", session_id, "first").returncode == 0
    with held(server.home, session_id):
        for path, body, headers in turn_routes(session_id):
            for stream in (False, True):
                sent = {**body, "stream": True} if stream else body
                answer = http.post(path, json=sent, headers={**headers, HEADER: "reject"})
                assert answer.status_code == 409, (path, stream, answer.text)
                error = answer.json()["error"]
                assert (error["code"], error["type"]) == ("session_busy", "invalid_request_error")
                busy = f"session '{session_id}' is busy with another turn (pid 4242 on the-test)"
                assert busy in error["message"] and HEADER in error["message"]
    assert contents(server.home, session_id) == ["first", "first"]


def test_interrupt_asks_the_holder_through_the_store_then_runs(http, server):
    """The holder here is a bare lock (no turn that could stop): the request to
    stop is seen in the store while the turn waits, and withdrawn once it ran."""
    session_id = "busy-interrupt"
    assert run_cli(server.home, "chat", "-s", session_id, "first").returncode == 0
    marker = server.home / "sessions.db.locks" / (file_stem(session_id) + INTERRUPT_SUFFIX)
    answers = []
    with contextlib.ExitStack() as holding:
        holding.enter_context(held(server.home, session_id))
        path = f"/v1/sessions/{session_id}/turns"

        def send() -> None:
            headers = {HEADER: "interrupt"}
            answers.append(http.post(path, json={"message": "newer"}, headers=headers))

        sender = threading.Thread(target=send)
        sender.start()
        wait_until(marker.exists, what="the request to stop in the store")
        holding.close()
        sender.join(30)
    assert answers[0].status_code == 200, answers[0].text
    assert not marker.exists()
    assert contents(server.home, session_id) == ["first", "first", "newer", "newer"]


def test_openapi_declares_the_header_on_the_turn_routes(http):
    paths = http.get("/openapi.json").json()["paths"]
    for path in ("/v1/chat/completions", "/v1/responses", "/v1/sessions/{session_id}/turns"):
        declared = {p["name"]: p for p in paths[path]["post"].get("parameters", [])}
        assert declared[HEADER]["schema"]["enum"] == ["wait", "reject", "interrupt"], path


def upstream_env(model_server) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": f"{model_server.url}/v1",
        "OPENAI_API_KEY": KEY,
        "FOLIKO_CONTEXT_WINDOW": "8192",
    }


@pytest.mark.slow
def test_the_cli_rejects_or_interrupts_a_turn_of_another_process(tmp_path, model_server):
    """Two `foliko chat` processes on one SQLite store: the first is in its
    model call; the second is rejected (exit 4, one line), then interrupts it
    (the first exits 5 with one line, nothing of it saved)."""
    home = tmp_path / "home"
    release = threading.Event()
    model_server.queue(dataclasses.replace(openai_message("never saved"), stall=release))
    assert run_cli(home, "chat", "-s", "s", "first").returncode == 0
    argv = [str(FOLIKO_BIN), "chat", "-s", "s", "-m", "openai:m", "slow"]
    env = foliko_env(home, upstream_env(model_server))
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "stdin": subprocess.DEVNULL}
    holder = subprocess.Popen(argv, env=env, **pipes)
    try:
        assert model_server.wait_for_requests(1)
        rejected = run_cli(home, "chat", "-s", "s", "--if-busy", "reject", "not now")
        assert rejected.returncode == 4
        (line,) = rejected.stderr.decode().splitlines()
        assert "session 's' is busy with another turn (pid " in line
        assert "this message was not sent" in line and "--if-busy wait" in line
        newer = run_cli(home, "chat", "-s", "s", "--if-busy", "interrupt", "newer")
        assert (newer.returncode, newer.stdout.decode()) == (0, "newer\n"), newer.stderr
        _, err = holder.communicate(timeout=30)
        assert holder.returncode == 5
        (line,) = err.decode().splitlines()
        assert "the turn in session 's' was interrupted by a newer message" in line
        assert "nothing of it was saved" in line
    finally:
        release.set()
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert contents(home, "s") == ["first", "first", "newer", "newer"]


@pytest.mark.slow
def test_a_streamed_and_a_background_turn_of_a_server_are_interrupted_visibly(
    start_server, model_server
):
    """`foliko serve` runs the turns; the interrupting message comes from
    another process (the CLI) or another request: the stream ends with a
    turn_interrupted error, the background response fails with it."""
    import httpx2 as httpx

    env = upstream_env(model_server)
    server = start_server(env=env)
    release = threading.Event()
    stalled = Reply(
        events=openai_stream_events(["partial ", "never"]), stall=release, stall_after=3
    )
    model_server.queue(stalled, stalled)
    client = httpx.Client(base_url=server.url, timeout=30)
    try:
        assert run_cli(server.home, "chat", "-s", "live", "first").returncode == 0
        body = {"message": "slow", "model": "openai:m"}
        with client.stream("POST", "/v1/sessions/live/turns", json=body) as response:
            lines = response.iter_lines()
            assert json.loads(_first_data(lines))["type"] == "started"
            assert model_server.wait_for_requests(1)
            newer = run_cli(server.home, "chat", "-s", "live", "--if-busy", "interrupt", "newer")
            assert newer.returncode == 0, newer.stderr
            events = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
        error = events[-1]
        assert error["type"] == "error" and error["error"]["code"] == "turn_interrupted"
        assert contents(server.home, "live") == ["first", "first", "newer", "newer"]

        sdk = openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0)
        created = sdk.responses.create(
            model="openai:m", input="slow", background=True, conversation="live"
        )
        assert model_server.wait_for_requests(2)
        wait_until(lambda: sdk.responses.retrieve(created.id).status == "in_progress")
        interrupting = client.post(
            "/v1/responses",
            json={"model": "echo", "input": "newest", "conversation": "live"},
            headers={HEADER: "interrupt"},
        )
        assert interrupting.status_code == 200, interrupting.text
        running = ("queued", "in_progress")
        wait_until(lambda: sdk.responses.retrieve(created.id).status not in running)
        ended = sdk.responses.retrieve(created.id)
        assert ended.status == "failed" and ended.error.code == "turn_interrupted"
        assert contents(server.home, "live")[-2:] == ["newest", "newest"]
        assert len(contents(server.home, "live")) == 6
    finally:
        release.set()
        client.close()


def _first_data(lines) -> str:
    return next(line for line in lines if line.startswith("data: "))[6:]
