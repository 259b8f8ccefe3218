"""Compaction and the fork tree in the native API of ``foliko serve``, on every
backend: the answers are what the CLI prints with --json, and a fork made by
``previous_response_id`` is in the tree like any other."""

from __future__ import annotations

import json

import pytest
from storage import services

from .servers import run_cli, turn

BACKENDS = ("memory", "json", "sqlite", "postgres", "redis")


@pytest.fixture(params=BACKENDS)
def served(request, start_server, tmp_path):
    """A server on a fresh store of each backend, and the store's URL (None: memory)."""
    import httpx2 as httpx

    if request.param == "memory":
        server, url = start_server(storage="memory"), None
        with httpx.Client(base_url=server.url, timeout=30) as http:
            yield server, http, url
        return
    with services.backend_url(request.param, tmp_path) as url:
        server = start_server(storage=url)
        with httpx.Client(base_url=server.url, timeout=30) as http:
            yield server, http, url


def cli_json(server, url, *args: str):
    done = run_cli(server.home, "--storage", url, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_compact_compactions_uncompact(served):
    server, http, url = served
    for text in ("first", "second", "third"):
        turn(http, "s1", text)
    compacted = http.post("/v1/sessions/s1/compact", json={"keep": 1})
    assert compacted.status_code == 200, compacted.text
    entry = compacted.json()
    assert (entry["covered"], entry["turns"], entry["trigger"], entry["status"]) == (
        4,
        [1, 2],
        "manual",
        "active",
    )
    listed = http.get("/v1/sessions/s1/compactions").json()
    assert listed == {"object": "list", "data": [entry]}
    if url is not None:
        assert cli_json(server, url, "sessions", "show", "s1", "--compactions", "--json") == [entry]
    assert http.get("/v1/sessions/s1").json()["compression_state"]["covered"] == 4

    undone = http.post("/v1/sessions/s1/uncompact")
    assert undone.json() == {"uncompacted": "s1", "messages": 6}
    assert [e["status"] for e in http.get("/v1/sessions/s1/compactions").json()["data"]] == [
        "undone"
    ]
    assert "covered" not in http.get("/v1/sessions/s1").json()["compression_state"]

    errors = [
        (http.post("/v1/sessions/nope/compact"), 404, "not found"),
        (http.post("/v1/sessions/s1/compact", json={"keep": 3}), 400, "nothing to compact"),
        (http.post("/v1/sessions/s1/compact", json={"keep": -1}), 400, "keep must be"),
        (http.post("/v1/sessions/s1/compact", json={"keep": "1"}), 400, "wrong type"),
        (http.post("/v1/sessions/s1/compact", json={"model": "no-such"}), 404, "no-such"),
        (http.post("/v1/sessions/s1/uncompact"), 400, "is not compacted"),
        (http.get("/v1/sessions/nope/compactions"), 404, "not found"),
        (http.get("/v1/sessions/nope/tree"), 404, "not found"),
    ]
    for answer, status, fragment in errors:
        assert answer.status_code == status, answer.text
        assert fragment in answer.json()["error"]["message"]


def test_the_tree_holds_previous_response_id_forks(served):
    server, http, url = served
    first = http.post("/v1/responses", json={"model": "echo", "input": "pick a colour"}).json()
    base = first["conversation"]["id"]
    http.post(
        "/v1/responses",
        json={"model": "echo", "input": "why blue?", "previous_response_id": first["id"]},
    )
    branched = http.post(
        "/v1/responses",
        json={"model": "echo", "input": "why red?", "previous_response_id": first["id"]},
    ).json()
    fork = branched["conversation"]["id"]
    assert fork != base
    http.post("/v1/sessions/" + base + "/fork", json={"to": "copy"})

    family = http.get(f"/v1/sessions/{fork}/tree").json()["data"]
    shape = [(r["session_id"], r["parent"], r["turn"], r["message"], r["depth"]) for r in family]
    assert shape == [(base, None, None, None, 0), (fork, base, 1, 2, 1), ("copy", base, 2, 4, 1)]
    everything = http.get("/v1/tree").json()
    assert everything == {"object": "list", "data": family}
    if url is not None:
        assert cli_json(server, url, "sessions", "tree", fork, "--json") == family
