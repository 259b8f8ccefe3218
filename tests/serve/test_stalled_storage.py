"""A frozen Redis connection behind ``foliko serve`` holds only the request on it:
the worker's other requests run over the pool's other connections."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from storage.services import fresh_prefix, require_redis
from storage.stallproxy import stalling_proxy, through

from foliko_cli.storage.redis import hash_tag

STALL_TIMEOUT_S = 3
BOUND_S = 2.0  # what the other requests may take: milliseconds when nothing blocks them
HANG = 60


def turn(http, conversation: str, text: str):
    return http.post(
        "/v1/responses", json={"model": "echo", "input": text, "conversation": conversation}
    )


@pytest.mark.services
def test_a_frozen_redis_connection_holds_only_the_turn_on_it(start_server):
    import httpx2 as httpx

    url = require_redis()
    with fresh_prefix(url) as prefix, stalling_proxy(url) as proxy:
        storage = through(url, proxy) + f"?prefix={prefix}&socket_timeout={STALL_TIMEOUT_S}"
        server = start_server(storage=storage)
        with httpx.Client(base_url=server.url, timeout=HANG) as http:
            frozen, other = (http.post("/v1/conversations", json={}).json()["id"] for _ in "ab")
            for conversation in (frozen, other):
                assert turn(http, conversation, "before").status_code == 200
            proxy.freeze_on(hash_tag(frozen).encode())
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
