"""Two ``foliko serve`` processes on one PostgreSQL or Redis share every session:
turns on one conversation from both are serialised, none lost, none torn."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from storage.services import fresh_prefix, fresh_schema, require_postgres, require_redis

from .servers import run_cli
from .test_load import whole_turns

TURNS_PER_SERVER = 8


def hammer(servers, conversation: str) -> list[str]:
    import httpx2 as httpx

    def one(n: int) -> str:
        server = servers[n % len(servers)]
        with httpx.Client(base_url=server.url, timeout=60) as http:
            response = http.post(
                "/v1/responses",
                json={"model": "echo", "input": f"turn {n}", "conversation": conversation},
            )
        assert response.status_code == 200, response.text
        return response.json()["output"][0]["content"][0]["text"]

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, range(TURNS_PER_SERVER * len(servers))))


@pytest.fixture(params=["postgresql", "redis"])
def shared_url(request):
    if request.param == "postgresql":
        url = require_postgres()
        with fresh_schema(url) as schema:
            yield f"{url}?schema={schema}"
    else:
        url = require_redis()
        with fresh_prefix(url) as prefix:
            yield f"{url}?prefix={prefix}"


@pytest.mark.services
def test_two_servers_on_one_store_share_a_conversation(start_server, shared_url, foliko_home):
    import httpx2 as httpx

    servers = [start_server(storage=shared_url), start_server(storage=shared_url)]
    conversation = httpx.post(servers[0].url + "/v1/conversations", json={}).json()["id"]
    assert httpx.get(f"{servers[1].url}/v1/conversations/{conversation}").status_code == 200
    replies = hammer(servers, conversation)
    assert replies == [f"turn {n}" for n in range(len(replies))]
    for server in servers:
        assert server.stop() == 0
    shown = run_cli(
        foliko_home, "--storage", shared_url, "sessions", "show", conversation, "--json"
    )
    messages = json.loads(shown.stdout)["messages"]
    assert whole_turns(messages)
    assert sorted(m["content"] for m in messages if m["role"] == "user") == sorted(
        f"turn {n}" for n in range(len(replies))
    )
