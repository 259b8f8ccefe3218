"""A session damaged behind the server's back, even one it holds in memory, is a
500 whose code says so, on every request that reads or writes it; nothing is
written to it; the listing marks it."""

from __future__ import annotations

import pytest
from storage import damage

from .servers import turn
from .test_errors import assert_error


@pytest.mark.parametrize(
    ("backend", "hole"),
    [("sqlite", "message-lost"), ("sqlite", "count-changed"), ("json", "count-changed")],
)
def test_a_damaged_session_is_a_500_session_damaged_and_is_never_written(
    start_server, foliko_home, backend, hole
):
    import httpx2 as httpx

    url = f"{backend}:///{foliko_home}/{'sessions.db' if backend == 'sqlite' else 'sessions'}"
    server = start_server(storage=url)
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for text in ("one", "two"):
            turn(http, "victim", text)  # the server now holds the session in memory
        turn(http, "intact", "fine")
        left = damage.damage_at(url, foliko_home, "victim", hole)

        shown = http.get("/v1/sessions/victim")
        error = assert_error(shown, 500, "session_damaged")
        assert error["message"].startswith("session 'victim' is damaged (")
        assert shown.headers["x-should-retry"] == "false"
        chatted = http.post(
            "/v1/chat/completions",
            json={"model": "echo", "messages": [{"role": "user", "content": "lost"}]},
            headers={"X-Session-Id": "victim"},
        )
        assert_error(chatted, 500, "session_damaged")
        forked = http.post("/v1/sessions/victim/fork", json={"to": "forked"})
        assert_error(forked, 500, "session_damaged")

        rows = {row["session_id"]: row for row in http.get("/v1/sessions").json()["data"]}
        assert "damaged" not in rows["intact"]
        if backend == "json":  # a SQL listing reads no message (SPEC §5, P3)
            assert rows["victim"]["damaged"] is True
        assert http.get("/v1/sessions/intact").status_code == 200
    assert server.stop() == 0

    assert damage.snapshot_at(url, foliko_home, "victim") == left
