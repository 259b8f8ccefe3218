"""The routes the web app uses beside the turns: its files, titles and system
prompts (PATCH), search, the trash and forks up to a message."""

from __future__ import annotations

import pytest

from .servers import run_cli, turn


def test_the_app_files_are_served_with_etags_and_a_strict_policy(http):
    page = http.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "default-src 'self'" in policy
    script = http.get("/app/app.js")
    assert script.headers["content-type"].startswith("text/javascript")
    assert 'from "./api.js"' in script.text
    again = http.get("/app/app.js", headers={"if-none-match": script.headers["etag"]})
    assert again.status_code == 304 and again.content == b""
    assert http.get("/app/app.css").headers["content-type"].startswith("text/css")
    for missing in ("/app/nothing.js", "/app/..%2Fpage.py", "/app/page.py", "/app/.hidden.js"):
        assert http.get(missing).status_code == 404, missing


def test_with_keys_the_files_need_none_and_the_api_does(start_server, tmp_path):
    import httpx2 as httpx

    keys = tmp_path / "keys.toml"
    keys.write_text('[keys]\n"k1" = "u1"\n')
    keys.chmod(0o600)
    server = start_server("--api-keys", str(keys))
    assert httpx.get(server.url + "/app/api.js").status_code == 200
    assert httpx.get(server.url + "/").status_code == 200
    assert httpx.get(server.url + "/v1/search?q=x").status_code == 401
    assert httpx.patch(server.url + "/v1/sessions/s", json={"title": "t"}).status_code == 401


def test_title_and_system_prompt(http, server):
    turn(http, "titled", "hello")
    changed = http.patch(
        "/v1/sessions/titled", json={"title": "  My \n notes ", "system_prompt": "Be brief."}
    )
    assert changed.json() == {
        "session_id": "titled",
        "title": "My notes",
        "system_prompt": "Be brief.",
    }
    rows = {row["session_id"]: row for row in http.get("/v1/sessions").json()["data"]}
    assert rows["titled"]["title"] == "My notes"
    dry = run_cli(server.home, "chat", "-s", "titled", "--dry-run", "next")
    assert b"Be brief." in dry.stdout
    cleared = http.patch("/v1/sessions/titled", json={"system_prompt": None, "title": ""})
    assert cleared.json() == {"session_id": "titled", "title": None, "system_prompt": None}
    assert len(http.get("/v1/sessions/titled").json()["messages"]) == 2  # the history is kept


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({}, 400, "send title or system_prompt"),
        ({"name": "x"}, 400, "unknown field 'name'"),
        ({"title": 3}, 400, "title must be a string or null"),
        ({"title": "x" * 201}, 400, "title is over 200 characters"),
    ],
)
def test_bad_settings(http, body, status, fragment):
    turn(http, "settings-bad")
    response = http.patch("/v1/sessions/settings-bad", json=body)
    assert response.status_code == status and fragment in response.json()["error"]["message"]


def test_settings_of_an_unknown_session_and_a_foreign_page(http):
    assert http.patch("/v1/sessions/nobody-here", json={"title": "x"}).status_code == 404
    foreign = http.patch(
        "/v1/sessions/nobody-here",
        content=b'{"title": "x"}',
        headers={"content-type": "text/plain", "origin": "http://evil.example"},
    )
    assert foreign.status_code == 403


def test_search_finds_messages_with_their_session_titles(http):
    turn(http, "searched", "the quokka smiles")
    http.patch("/v1/sessions/searched", json={"title": "Animals"})
    found = http.get("/v1/search", params={"q": "quokka"}).json()
    assert found["unreadable"] == []
    hits = found["data"]  # the message and the echo of it: equal scores, so by time
    assert sorted((hit["session_id"], hit["seq"], hit["title"]) for hit in hits) == [
        ("searched", 0, "Animals"),
        ("searched", 1, "Animals"),
    ]
    for hit in hits:
        start, end = hit["matches"][0]
        assert hit["snippet"][start:end] == "quokka"
    assert http.get("/v1/search", params={"q": " "}).status_code == 400
    assert http.get("/v1/search", params={"q": '"open'}).status_code == 400
    assert http.get("/v1/search", params={"q": "x", "limit": 0}).status_code == 400


def test_delete_restore_and_fork_up_to_a_message(http):
    turn(http, "binned", "one")
    turn(http, "binned", "two")
    assert http.delete("/v1/sessions/binned").json()["in_trash"] is True
    listed = http.get("/v1/trash").json()
    entry = next(row for row in listed["data"] if row["session_id"] == "binned")
    assert entry["reason"] == "delete" and entry["message_count"] == 4 and listed["keep_ms"] > 0
    restored = http.post("/v1/trash/binned/restore").json()
    assert restored == {"restored": entry["id"], "session_id": "binned", "as": "binned"}
    assert len(http.get("/v1/sessions/binned").json()["messages"]) == 4
    assert http.post("/v1/trash/binned/restore").status_code == 404  # nothing left to restore
    forked = http.post("/v1/sessions/binned/fork", json={"to": "binned-2", "upto": 3}).json()
    assert [m["content"] for m in forked["messages"]] == ["one", "one", "two"]
    bad = http.post("/v1/sessions/binned/fork", json={"to": "binned-3", "upto": -1})
    assert bad.status_code == 400 and "upto" in bad.json()["error"]["message"]
    rows = {row["session_id"]: row for row in http.get("/v1/sessions").json()["data"]}
    assert rows["binned-2"]["forked_from"] == "binned"  # the list nests it under its origin
    assert rows["binned"]["forked_from"] is None


def test_a_turn_keeps_the_model_as_it_was_picked(start_server, tmp_path):
    import httpx2 as httpx

    config = tmp_path / "config.toml"
    config.write_text('[models.quick]\nmodel = "echo"\n')
    server = start_server(env={"FOLIKO_CONFIG": str(config), "FOLIKO_MODEL": "quick"})

    def first_of_turn(body: dict) -> dict:
        url = f"{server.url}/v1/sessions/picked/turns"
        with httpx.stream("POST", url, json={"message": "hi", **body}, timeout=30) as answer:
            assert answer.status_code == 200
            done = [line for line in answer.iter_lines() if '"done"' in line]
        assert len(done) == 1
        messages = httpx.get(f"{server.url}/v1/sessions/picked").json()["messages"]
        assert messages[-1]["model"] == "echo"  # the model's own name on the reply
        return messages[-2]

    assert first_of_turn({"model": "quick", "create": True})["model_alias"] == "quick"
    assert first_of_turn({"model": "echo"})["model_alias"] == "echo"
    assert first_of_turn({})["model_alias"] == "quick"  # the server's default, by its name
    regenerated = first_of_turn({"message": None, "regenerate": True, "model": "echo"})
    assert regenerated["model_alias"] == "echo" and regenerated["content"] == "hi"
