"""A frozen database connection behind ``foliko serve`` holds only the request
on it: the worker's other requests run over the pool's other connections
(PostgreSQL through psycopg's async connections, Redis through redis.asyncio)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from storage.services import fresh_prefix, fresh_schema, require_postgres, require_redis
from storage.stallproxy import stalling_proxy, through

from foliko_cli.storage.redis import hash_tag

STALL_TIMEOUT_S = 3
BOUND_S = 2.0  # what the other requests may take: milliseconds when nothing blocks them
HANG = 60


def turn(http, conversation: str, text: str):
    return http.post(
        "/v1/responses", json={"model": "echo", "input": text, "conversation": conversation}
    )


@contextlib.contextmanager
def proxied_storage(backend: str) -> Iterator[tuple[str, object]]:
    """A storage URL of ``backend`` through a stalling proxy, with a short bound."""
    if backend == "redis":
        url = require_redis()
        scope, option = fresh_prefix(url), "prefix={}&socket_timeout={}"
    else:
        url = require_postgres()
        scope, option = fresh_schema(url), "schema={}&operation_timeout={}"
    with scope as namespace, stalling_proxy(url) as proxy:
        yield through(url, proxy) + "?" + option.format(namespace, STALL_TIMEOUT_S), proxy


def marker(backend: str, conversation: str) -> bytes:
    """Bytes only the frozen conversation's queries carry."""
    return (hash_tag(conversation) if backend == "redis" else conversation).encode()


@pytest.mark.services
@pytest.mark.parametrize("backend", ["redis", "postgres"])
def test_a_frozen_database_connection_holds_only_the_turn_on_it(start_server, backend):
    import httpx2 as httpx

    with proxied_storage(backend) as (storage, proxy):
        server = start_server(storage=storage)
        with httpx.Client(base_url=server.url, timeout=HANG) as http:
            frozen, other = (http.post("/v1/conversations", json={}).json()["id"] for _ in "ab")
            for conversation in (frozen, other):
                assert turn(http, conversation, "before").status_code == 200
            proxy.freeze_on(marker(backend, frozen))
            with ThreadPoolExecutor(1) as pool:
                stalled = pool.submit(turn, http, frozen, "stalled")
                assert proxy.frozen.wait(HANG)
                with httpx.Client(base_url=server.url, timeout=BOUND_S) as quick:
                    assert quick.get("/healthz").json() == {"status": "ok"}
                    assert quick.get("/v1/models").status_code == 200
                    reply = turn(quick, other, "during the stall")
                    assert reply.status_code == 200, reply.text
                    assert reply.json()["output"][0]["content"][0]["text"] == "during the stall"
                assert not stalled.done(), "the other requests waited for the frozen one"
                failed = stalled.result(timeout=HANG)
            assert failed.status_code == 503, failed.text
            assert failed.json()["error"]["code"] == "storage_error"
            assert turn(http, frozen, "after").status_code == 200
        assert server.stop() == 0
