"""Many concurrent turns lose nothing; SIGTERM under load leaves only whole turns."""

from __future__ import annotations

import asyncio
import json
import signal
import threading

import pytest

from .servers import run_cli, wait_until

CONVERSATIONS = 5
TURNS = 60


def whole_turns(messages: list[dict]) -> bool:
    """Each turn is a user message and its reply, nothing half-written."""
    pairs = zip(messages[::2], messages[1::2], strict=False)
    return len(messages) % 2 == 0 and all(
        u["role"] == "user" and a["role"] == "assistant" and u["content"] == a["content"]
        for u, a in pairs
    )


def test_concurrent_turns_on_five_conversations_lose_nothing(server):
    from openai import AsyncOpenAI

    async def main() -> tuple[list[str], list[str]]:
        async with AsyncOpenAI(base_url=server.base_url, api_key="none", timeout=60) as client:
            ids = [(await client.conversations.create()).id for _ in range(CONVERSATIONS)]
            replies = await asyncio.gather(
                *(
                    client.responses.create(
                        model="echo", input=f"turn {n}", conversation=ids[n % CONVERSATIONS]
                    )
                    for n in range(TURNS)
                )
            )
            return ids, [r.output_text for r in replies]

    ids, texts = asyncio.run(main())
    assert texts == [f"turn {n}" for n in range(TURNS)]
    for index, conversation in enumerate(ids):
        stored = json.loads(run_cli(server.home, "sessions", "show", conversation, "--json").stdout)
        messages = stored["messages"]
        assert whole_turns(messages)
        expected = {f"turn {n}" for n in range(index, TURNS, CONVERSATIONS)}
        assert {m["content"] for m in messages if m["role"] == "user"} == expected


def test_sigterm_under_load_leaves_only_whole_turns(start_server, foliko_home):
    import httpx2 as httpx

    server = start_server("--grace", "5")
    answered: list[int] = []
    stop = threading.Event()

    def hammer(worker: int) -> None:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            n = 0
            while not stop.is_set():
                try:
                    response = http.post(
                        "/v1/chat/completions",
                        json={"messages": [{"role": "user", "content": f"w{worker} n{n}"}]},
                        headers={"X-Session-Id": f"load-{worker % 3}"},
                    )
                except httpx.HTTPError:
                    return
                if response.status_code == 200:
                    answered.append(worker)
                n += 1

    workers = [threading.Thread(target=hammer, args=(w,)) for w in range(6)]
    for worker in workers:
        worker.start()
    try:
        wait_until(lambda: len(answered) >= 30, what="30 answered turns")
        assert server.stop(signal.SIGTERM) == 0
    finally:
        stop.set()
        for worker in workers:
            worker.join(30)
    total = 0
    for session in range(3):
        shown = run_cli(foliko_home, "sessions", "show", f"load-{session}", "--json")
        messages = json.loads(shown.stdout)["messages"]
        assert whole_turns(messages)
        total += len(messages) // 2
    assert total >= len(answered)


def test_a_turn_still_running_after_the_grace_is_cancelled_unsaved(start_server, foliko_home):
    import httpx2 as httpx

    from .servers import StubModelServer

    stub = StubModelServer(stall=True)
    try:
        server = start_server(
            "--grace", "0.5", env={"OPENAI_BASE_URL": stub.url, "OPENAI_API_KEY": "k"}
        )
        outcome: list[object] = []

        def call() -> None:
            try:
                outcome.append(
                    httpx.post(
                        server.url + "/v1/chat/completions",
                        json={
                            "model": "openai:gpt-4o",
                            "messages": [{"role": "user", "content": "slow"}],
                        },
                        headers={"X-Session-Id": "cut-off"},
                        timeout=30,
                    ).status_code
                )
            except httpx.HTTPError as exc:
                outcome.append(exc)

        caller = threading.Thread(target=call)
        caller.start()
        wait_until(lambda: stub.requests > 0, what="the turn to reach the model")
        assert server.stop(signal.SIGTERM, timeout=20) == 0
        caller.join(30)
    finally:
        stub.stop()
    assert outcome and outcome[0] != 200
    shown = run_cli(foliko_home, "sessions", "show", "cut-off", "--json")
    assert shown.returncode == 2 and b"not found" in shown.stderr
    assert "Traceback" not in server.stderr and "Exception in ASGI" not in server.stderr


def test_several_workers_serve_and_stop(start_server):
    import httpx2 as httpx

    server = start_server("--workers", "2")
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for n in range(6):
            response = http.post(
                "/v1/chat/completions",
                json={"messages": [{"role": "user", "content": f"w {n}"}]},
                headers={"X-Session-Id": "workers"},
            )
            assert response.status_code == 200, response.text
        assert len(http.get("/v1/sessions/workers").json()["messages"]) == 12
    assert server.stop(signal.SIGTERM) == 0


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_a_stream_cut_by_shutdown_ends_with_an_error_and_done(start_server, api):
    import httpx2 as httpx

    from .servers import StubModelServer

    stub = StubModelServer(stall=True)
    try:
        server = start_server(
            "--grace", "0.3", env={"OPENAI_BASE_URL": stub.url, "OPENAI_API_KEY": "k"}
        )
        if api == "responses":
            path, body = "/v1/responses", {"input": "slow"}
        else:
            path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}
        body = {**body, "model": "openai:gpt-4o", "stream": True}
        lines: list[str] = []
        with httpx.stream("POST", server.url + path, json=body, timeout=30) as answer:
            assert answer.status_code == 200
            stream = answer.iter_lines()
            for line in stream:
                lines.append(line)
                if api == "chat" or "response.in_progress" in line:
                    break
            wait_until(lambda: stub.requests > 0, what="the turn to reach the model")
            stopped = threading.Thread(target=server.stop, args=(signal.SIGTERM, 20))
            stopped.start()
            lines += list(stream)
            stopped.join(30)
    finally:
        stub.stop()
    data = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    error = json.loads(data[-2])
    assert (error.get("code") or error["error"]["code"]) == "shutting_down"
    assert server.proc.returncode == 0
    assert "Traceback" not in server.stderr, server.stderr  # was: two for every stream cut
