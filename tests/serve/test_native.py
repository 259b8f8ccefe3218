"""The native /v1/sessions API: the CLI's JSON shapes over HTTP."""

from __future__ import annotations

import json

from .servers import run_cli, turn


def test_list_pages_like_the_cli(http, server):
    for name in ("page-a", "page-b", "page-c"):
        turn(http, name, f"in {name}")
    listed = run_cli(server.home, "sessions", "list", "--json")
    cli_rows = json.loads(listed.stdout)
    everything = http.get("/v1/sessions", params={"limit": 1000}).json()["data"]
    assert [row.pop("forked_from") for row in everything] == [None] * len(everything)
    assert [row["title"] for row in everything] == [None] * len(everything)
    assert everything == cli_rows  # the title too
    first = http.get("/v1/sessions", params={"limit": 2}).json()
    assert first["has_more"] and len(first["data"]) == 2
    rest = http.get("/v1/sessions", params={"limit": 1000, "after": first["last_id"]}).json()
    assert [
        {k: v for k, v in row.items() if k != "forked_from"} for row in first["data"] + rest["data"]
    ] == everything


def test_show_matches_sessions_show_json(http, server):
    turn(http, "shown", "hello")
    over_http = http.get("/v1/sessions/shown").json()
    cli = json.loads(run_cli(server.home, "sessions", "show", "shown", "--json").stdout)
    assert over_http == cli
    assert http.get("/v1/sessions/shown/export").json() == [cli]


def test_rename_fork_clear_delete(http):
    turn(http, "orig", "x")
    renamed = http.post("/v1/sessions/orig/rename", json={"to": "moved"})
    assert renamed.status_code == 200 and renamed.json()["session_id"] == "moved"
    assert http.get("/v1/sessions/orig").status_code == 404
    forked = http.post("/v1/sessions/moved/fork", json={"to": "copy"})
    assert forked.json()["metadata"]["forked_from"] == "moved"
    assert len(http.get("/v1/sessions/copy").json()["messages"]) == 2
    cleared = http.post("/v1/sessions/copy/clear")
    assert cleared.json()["messages"] == []
    deleted = {"session_id": "copy", "deleted": True, "in_trash": True}
    assert http.delete("/v1/sessions/copy").json() == deleted
    assert http.delete("/v1/sessions/copy").status_code == 404
    assert http.post("/v1/sessions/moved/fork", json={"to": "moved"}).status_code == 400


def test_variables(http):
    assert http.put("/v1/sessions/vars-s/vars", json={"a": 1}).status_code == 404
    turn(http, "vars-s")
    assert http.put("/v1/sessions/vars-s/vars", json={"a": 1, "b": "two"}).json() == {
        "a": 1,
        "b": "two",
    }
    assert http.put("/v1/sessions/vars-s/vars/c", json=[1, 2]).json() == {
        "key": "c",
        "value": [1, 2],
    }
    assert http.get("/v1/sessions/vars-s/vars/c").json()["value"] == [1, 2]
    assert http.delete("/v1/sessions/vars-s/vars/a").json() == {"key": "a", "deleted": True}
    assert http.get("/v1/sessions/vars-s/vars").json() == {"b": "two", "c": [1, 2]}
    assert http.get("/v1/sessions/vars-s/vars/a").status_code == 404
    assert http.delete("/v1/sessions/vars-s/vars/a").status_code == 404
    assert http.delete("/v1/sessions/vars-s/vars").json() == {}


def test_ids_with_a_slash_and_unicode(http, server):
    """An id is one path segment, its ``/`` sent as ``%2F``; an unencoded slash is
    another segment, so it never reaches a shorter id's sub-resource."""
    assert run_cli(server.home, "chat", "-s", "team/Grüße", "hi").returncode == 0
    assert run_cli(server.home, "chat", "-s", "team", "hi").returncode == 0
    assert http.put("/v1/sessions/team%2FGrüße/vars", json={"k": 1}).status_code == 200
    assert http.get("/v1/sessions/team%2FGrüße").json()["session_id"] == "team/Grüße"
    assert len(http.get("/v1/sessions/team%2FGrüße/export").json()) == 1
    assert http.get("/v1/sessions/team%2FGrüße/vars").json() == {"k": 1}
    assert http.get("/v1/sessions/team/Grüße").status_code == 404
    assert http.put("/v1/sessions/team/vars", json={"v": 2}).status_code == 200
    assert http.delete("/v1/sessions/team%2Fvars").status_code == 404
    assert http.get("/v1/sessions/team/vars").json() == {"v": 2}
    percent = http.put("/v1/sessions/a%25b/vars", json={"k": 1})
    assert percent.status_code == 404  # the session "a%b" does not exist
    assert run_cli(server.home, "chat", "-s", "a%2Fb", "hi").returncode == 0
    assert http.get("/v1/sessions/a%252Fb").json()["session_id"] == "a%2Fb"


def trashed(home) -> dict[str, str]:
    listed = run_cli(home, "sessions", "trash", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    return {row["session_id"]: row["reason"] for row in json.loads(listed.stdout)}


def test_a_session_deleted_or_cleared_over_http_is_in_the_trash(http, server):
    turn(http, "binned", "keep me")
    turn(http, "wiped", "me too")
    assert http.delete("/v1/sessions/binned").status_code == 200
    assert http.post("/v1/sessions/wiped/clear").json()["messages"] == []
    assert {"binned": "delete", "wiped": "clear"}.items() <= trashed(server.home).items()
    assert run_cli(server.home, "sessions", "restore", "binned").returncode == 0
    assert [m["content"] for m in http.get("/v1/sessions/binned").json()["messages"]] == [
        "keep me",
        "keep me",
    ]
    restored = run_cli(server.home, "sessions", "restore", "wiped", "--as", "wiped-before")
    assert restored.returncode == 0, restored.stderr
    assert len(http.get("/v1/sessions/wiped-before").json()["messages"]) == 2
    ids = [row["session_id"] for row in http.get("/v1/sessions").json()["data"]]
    assert not any(session_id.startswith(".foliko/") for session_id in ids)
