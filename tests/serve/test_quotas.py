"""Quotas per user ([users.NAME] in the key file), counted in the shared storage:
two ``foliko serve`` processes on one SQLite file (one of them with two
workers) count every turn of a user together."""

from __future__ import annotations

import datetime
import json
import subprocess
import time
from collections.abc import Iterator

import pytest

from .servers import FOLIKO_BIN, ServeProcess, foliko_env, run_cli
from .test_websocket import Raw

MINUTE_USERS = ("minute1", "minute2", "minute3")
BURST_USERS = ("burst1", "burst2", "burst3")
TURNS_PER_MINUTE = 3
TOKENS_PER_DAY = 40
KEYS = "\n".join(
    [
        "[keys]",
        *(f'"key-{user}" = "{user}"' for user in (*MINUTE_USERS, *BURST_USERS, "daily", "free")),
        *(
            f"[users.{user}]\nmax_turns_per_minute = {TURNS_PER_MINUTE}"
            for user in (*MINUTE_USERS, *BURST_USERS)
        ),
        f"[users.daily]\nmax_tokens_per_day = {TOKENS_PER_DAY}",
        "",
    ]
)
# The tests on the two servers run in one worker, which starts them once.
SHARED = pytest.mark.xdist_group("serve-quotas")


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("quota-home")


@pytest.fixture(scope="module")
def servers(home) -> Iterator[tuple[ServeProcess, ServeProcess]]:
    """Two servers on the SQLite storage of one home: two workers, and one."""
    keys = home / "keys.toml"
    keys.write_text(KEYS)
    keys.chmod(0o600)
    args = ["--api-keys", str(keys)]
    started = [
        ServeProcess([*args, "--workers", "2"], foliko_env(home), [], home=home),
        ServeProcess(args, foliko_env(home), [], home=home),
    ]
    try:
        yield started[0].wait_ready(), started[1].wait_ready()
    finally:
        for server in started:
            server.kill()


def post(server: ServeProcess, user: str, path: str, body: dict):
    """One request on a connection of its own."""
    import httpx2 as httpx

    headers = {"Authorization": f"Bearer key-{user}"}
    return httpx.post(server.url + path, json=body, headers=headers, timeout=30)


def turn(server: ServeProcess, user: str, text: str = "hello"):
    return post(server, user, "/v1/responses", {"model": "echo", "input": text})


def chat(server: ServeProcess, user: str, **extra):
    messages = [{"role": "user", "content": "hello"}]
    return post(
        server, user, "/v1/chat/completions", {"model": "echo", "messages": messages, **extra}
    )


def minute() -> int:
    return int(time.time() // 60)


def refusals(servers, user: str) -> dict:
    """Every kind of turn, refused: its status and what the client saw."""
    import openai

    one, other = servers
    seen = {}
    plain = turn(other, user)
    seen["plain"] = plain
    sdk = openai.OpenAI(base_url=one.base_url, api_key=f"key-{user}", max_retries=0)
    try:  # checked by the caller: a new minute may have begun meanwhile
        seen["sdk"] = sdk.responses.create(model="echo", input="hello")
    except openai.RateLimitError as refused:
        seen["sdk"] = refused
    seen["chat_stream"] = chat(other, user, stream=True).status_code
    seen["background"] = post(
        one, user, "/v1/responses", {"model": "echo", "input": "x", "background": True}
    ).status_code
    socket = Raw(one, {"Authorization": f"Bearer key-{user}"})
    try:
        socket.send({"type": "response.create", "model": "echo", "input": "hello"})
        seen["socket"] = socket.until_done()[-1]
    finally:
        socket.close()
    return seen


@SHARED
def test_turns_a_minute_are_counted_across_servers_and_workers(servers, home):
    import openai

    one, other = servers
    for user in MINUTE_USERS:  # a window that ends mid-test is tried again with another user
        start = minute()
        answers = [
            turn(one, user),
            chat(other, user),
            post(one, user, "/v1/responses", {"model": "echo", "input": "hi", "stream": True}),
        ]
        seen = refusals(servers, user)
        if minute() == start:
            break
    else:
        pytest.fail("every try crossed a minute boundary")
    assert [answer.status_code for answer in answers] == [200] * TURNS_PER_MINUTE
    plain = seen["plain"]
    assert plain.status_code == 429
    assert plain.json()["error"] | {"message": ""} == {
        "message": "",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }
    assert f"{TURNS_PER_MINUTE} a minute" in plain.json()["error"]["message"]
    assert 1 <= int(plain.headers["retry-after"]) <= 60
    assert 1 <= int(plain.headers["retry-after-ms"]) <= 60_000
    assert "x-should-retry" not in plain.headers
    assert isinstance(seen["sdk"], openai.RateLimitError), seen["sdk"]
    assert seen["sdk"].status_code == 429 and seen["sdk"].code == "rate_limit_exceeded"
    assert seen["chat_stream"] == 429 and seen["background"] == 429
    frame = seen["socket"]
    assert frame["type"] == "error" and frame["status"] == 429
    assert frame["error"]["code"] == "rate_limit_exceeded"

    counters = run_cli(home, "sessions", "show", f".foliko/quota/{user}", "--json")
    assert json.loads(counters.stdout)["variables"] == {"minute": start, "turns": 3}
    listed = run_cli(home, "sessions", "list", "--json")
    assert ".foliko" not in listed.stdout.decode()


@SHARED
def test_turns_sent_at_once_to_both_servers_are_admitted_up_to_the_limit(servers):
    from concurrent.futures import ThreadPoolExecutor

    sent = 4 * TURNS_PER_MINUTE
    for user in BURST_USERS:
        start = minute()
        with ThreadPoolExecutor(sent) as pool:
            answers = pool.map(turn, [servers[n % 2] for n in range(sent)], [user] * sent)
            statuses = [answer.status_code for answer in answers]
        if minute() == start:
            break
    else:
        pytest.fail("every try crossed a minute boundary")
    assert sorted(statuses) == [200] * TURNS_PER_MINUTE + [429] * (sent - TURNS_PER_MINUTE)


@SHARED
def test_tokens_a_day_are_counted_after_each_turn(servers):
    today = datetime.datetime.now(datetime.UTC).date()
    used, refused = [], None
    for count in range(20):
        answer = turn(servers[count % 2], "daily", "count these few words please")
        if answer.status_code != 200:
            refused = answer
            break
        used.append(answer.json()["usage"]["total_tokens"])
    if datetime.datetime.now(datetime.UTC).date() != today:
        pytest.skip("the UTC day ended during the test")
    assert refused is not None and refused.status_code == 429, used
    # Each turn was admitted under the limit; the one that went over completed.
    assert sum(used[:-1]) < TOKENS_PER_DAY <= sum(used)
    error = refused.json()["error"]
    assert error["type"] == "tokens" and error["code"] == "rate_limit_exceeded"
    assert f"{sum(used):,} tokens today" in error["message"]
    assert 60 < int(refused.headers["retry-after"]) <= 86_400
    assert refused.headers["x-should-retry"] == "false"


@SHARED
def test_a_user_without_quotas_is_never_refused(servers, home):
    statuses = [
        (turn if count % 2 else chat)(servers[count % 2], "free").status_code
        for count in range(2 * TURNS_PER_MINUTE + 2)
    ]
    assert statuses == [200] * len(statuses)
    missing = run_cli(home, "sessions", "show", ".foliko/quota/free", "--json")
    assert missing.returncode != 0


@pytest.mark.parametrize(
    ("users", "fragment"),
    [
        ("[users.alice]\nmax_turns_per_minute = 0\n", b"[users.alice] max_turns_per_minute = 0"),
        ('[users.alice]\nmax_tokens_per_day = "lots"\n', b"max_tokens_per_day = 'lots'"),
        ("[users.alice]\nmax_turns = 5\n", b"unknown setting 'max_turns'"),
        ("[users.carol]\nmax_turns_per_minute = 5\n", b"[users.carol] names no user"),
        ("[users]\nalice = 5\n", b"[users.alice] must be a table"),
    ],
)
def test_a_bad_quota_is_refused_at_start(tmp_path, foliko_home, users, fragment):
    path = tmp_path / "keys.toml"
    path.write_text('[keys]\n"key-alice" = "alice"\n' + users)
    path.chmod(0o600)
    result = subprocess.run(
        [str(FOLIKO_BIN), "serve", "--port", "0", "--api-keys", str(path)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=foliko_env(foliko_home),
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and fragment.decode() in lines[0], result.stderr
    assert "key-alice" not in lines[0]
