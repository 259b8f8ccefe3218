"""API keys with a scope: every operation of ``/openapi.json`` called with a
read-only key of some sessions writes nothing, answers of a session outside
its scope exactly as of a missing one (status, body, counts, search hits),
refuses a change with a 403 naming the scope, and is in the audit log."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from foliko_cli.serve.ids import scope_of

HIDDEN_WORD = "kumquat"
KEYS = """[keys]
"k-owner" = "ann"
"k-viewer" = {user = "ann", name = "viewer", scope = "read", sessions = ["proj-*"]}
"""
OWNER = {"Authorization": "Bearer k-owner"}
VIEWER = {"Authorization": "Bearer k-viewer"}


@pytest.fixture
def app_client(foliko_home: Path, tmp_path: Path, monkeypatch):
    from starlette.testclient import TestClient

    from foliko_cli.serve.app import ServeOptions, create_app

    monkeypatch.setenv("FOLIKO_MODEL", "echo")
    keys = tmp_path / "keys.toml"
    keys.write_text(KEYS)
    keys.chmod(0o600)
    app = create_app(ServeOptions(access_log=None, api_keys=str(keys)))
    with TestClient(app, base_url="http://127.0.0.1:8000") as client:
        yield client


def _seed(client) -> dict[str, dict[str, str]]:
    """proj-a (in the viewer's scope), secret-x (not); the ids of each variant."""
    for session_id, text in (("proj-a", "the plan"), ("secret-x", f"{HIDDEN_WORD} plan")):
        answer = client.post(
            f"/v1/sessions/{session_id}/turns", json={"message": text}, headers=OWNER
        )
        assert answer.status_code == 200
    client.post("/v1/sessions/secret-old/turns", json={"message": HIDDEN_WORD}, headers=OWNER)
    assert client.delete("/v1/sessions/secret-old", headers=OWNER).status_code == 200
    stored = client.post(
        "/v1/chat/completions",
        json={"model": "echo", "store": True, "messages": [{"role": "user", "content": "x"}]},
        headers=OWNER,
    ).json()["id"]
    variants = {}
    for name, session_id, completion in (
        ("secret", "secret-x", stored),
        ("missing", "never-x", "chatcmpl-0123456789abcdef01234567"),
        ("in scope", "proj-a", "chatcmpl-0123456789abcdef01234567"),
    ):
        scope = scope_of(session_id)
        variants[name] = {
            "session": session_id,
            "completion": completion,
            "response": f"resp_1_{scope}",
            "item": f"msg_1_{scope}",
            "scope": scope,
            "completion_scope": scope_of(completion),
        }
    return variants


def _request(operation: tuple[str, str, dict], ids: dict[str, str]):
    """The method, the path with its parameters, the query and a body naming ``ids``."""
    method, path, spec = operation
    values = {
        "session_id": ids["session"],
        "conversation_id": ids["session"],
        "name": ids["session"],
        "response_id": ids["response"],
        "item_id": ids["item"],
        "completion_id": ids["completion"],
        "turn_id": "t1",
        "key": "k",
        "model": "echo",
    }
    filled = re.sub(r"\{(\w+)\}", lambda m: values[m[1]], path)
    query = {"q": HIDDEN_WORD, "limit": 1} if path == "/v1/search" else {}
    body = {
        "model": "echo",
        "input": "hi",
        "messages": [{"role": "user", "content": "hi"}],
        "conversation": ids["session"],
        "previous_response_id": ids["response"],
        "message": "hi",
        "to": "proj-new",
        "as": "proj-new",
        "metadata": {"a": "b"},
        "items": [{"type": "message", "role": "user", "content": "hi"}],
        "title": "t",
        "variables": {},
    }
    properties = spec.get("properties", {})
    sent = {name: value for name, value in body.items() if name in properties}
    if method in ("PUT",) and "vars" in path:
        sent = {"k": 1} if path.endswith("vars") else 1
    headers = {**VIEWER, "X-Session-Id": ids["session"]}
    return method, filled, query, sent if method != "GET" else None, headers


def _operations(client) -> list[tuple[str, str, dict]]:
    document = client.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    found = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if path in ("/mcp", "/metrics"):
                continue  # its tools: tests/mcp/test_mcp_scopes.py; counters: no session
            content = operation.get("requestBody", {}).get("content", {})
            schema = content.get("application/json", {}).get("schema", {})
            if "$ref" in schema:
                schema = schemas[schema["$ref"].rsplit("/", 1)[1]]
            found.append((method.upper(), path, schema))
    return found


def _snapshot(client) -> dict:
    """Every session of the store (every user's, the trash too): its revision."""
    import asyncio

    from foliko_cli.storage.sqlite import SQLiteStorage

    storage = client.app.state.services.base.storage
    assert isinstance(storage, SQLiteStorage)

    async def revisions():
        return {sid: await storage.revision(sid) for sid in await storage.session_ids()}

    return asyncio.run(revisions())


def _shown(answer, ids: dict[str, str]) -> tuple[int, str]:
    text = answer.text
    for name in ("completion", "session", "response", "item", "completion_scope", "scope"):
        text = text.replace(ids[name], "ID")
    return answer.status_code, re.sub(r'"(created|created_at)":\d+', "", text)


def test_a_read_only_key_of_some_sessions_through_every_route(app_client):
    client = app_client
    variants = _seed(client)
    before = _snapshot(client)
    operations = _operations(client)
    assert len(operations) > 40
    answers = {}
    for operation in operations:
        for name, ids in variants.items():
            method, path, query, body, headers = _request(operation, ids)
            answer = client.request(method, path, params=query, json=body, headers=headers)
            answers[(method, operation[1], name)] = _shown(answer, ids)
    assert _snapshot(client) == before  # nothing any route did wrote anything
    for method, path, _ in operations:
        if method == "GET":  # a read of a session in scope is never refused
            assert answers[(method, path, "in scope")][0] != 403, (method, path)
        secret = answers[(method, path, "secret")]
        assert secret == answers[(method, path, "missing")], (method, path)
        assert HIDDEN_WORD not in secret[1] and "secret" not in secret[1], (method, path)

    listed = client.get("/v1/sessions", headers=VIEWER).json()
    assert [row["session_id"] for row in listed["data"]] == ["proj-a"]
    assert (
        client.get("/v1/search", params={"q": "plan"}, headers=VIEWER).json()["data"][0][
            "session_id"
        ]
        == "proj-a"
    )
    assert client.get("/v1/trash", headers=VIEWER).json()["data"] == []
    assert client.get("/v1/sessions/proj-a", headers=VIEWER).status_code == 200

    refused = client.delete("/v1/sessions/proj-a", headers=VIEWER)
    error = refused.json()["error"]
    assert refused.status_code == 403
    assert (error["type"], error["code"]) == ("permission_error", "insufficient_scope")
    assert "scope is 'read'" in error["message"] and "'write'" in error["message"]
    assert (
        client.post("/v1/sessions/proj-a/turns", json={"message": "x"}, headers=VIEWER).status_code
        == 403
    )
    assert _snapshot(client) == before


def test_api_key_requests_are_audited_by_key_name_without_content(app_client):
    client = app_client
    client.post("/v1/sessions/proj-a/turns", json={"message": HIDDEN_WORD}, headers=OWNER)
    shown = client.get("/v1/sessions/proj-a", headers=VIEWER)
    client.get("/v1/sessions/secret-x", headers=VIEWER)
    client.get("/healthz")
    services = client.app.state.services

    async def entries():
        return await services.base.audit_entries()

    client.portal.call(services.base.audit.flush)
    found = client.portal.call(entries)
    calls = [(e.client, e.call, e.session_ids, e.outcome) for e in found]
    owner = [c for c in calls if c[0].startswith("key:ann/")]
    assert owner and owner[0][1:] == ("POST /v1/sessions/{session_id}/turns", ("proj-a",), "ok")
    assert ("key:viewer", "GET /v1/sessions/{session_id}", ("proj-a",), "ok") in calls
    assert not [c for c in calls if "secret-x" in c[2]]  # out of scope: it touched nothing
    import hashlib

    read = next(e for e in found if e.client == "key:viewer")
    assert read.result_sha256 == hashlib.sha256(shown.content).hexdigest()
    assert HIDDEN_WORD not in repr(found)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('"k" = {user = "ann", scope = "admin"}', "scope = 'admin' is neither 'read' nor 'write'"),
        ('"k" = {user = "ann", sessions = "proj-*"}', "sessions must be a list of patterns"),
        ('"k" = {user = "ann", colour = "red"}', "unknown setting 'colour'"),
        ('"k" = {user = "ann", sessions = ["since:soon"]}', "'soon' is not a date"),
        ('"k" = {scope = "read"}', 'is not "KEY" = "user"'),
    ],
)
def test_a_bad_key_scope_is_one_line_naming_the_entry(tmp_path, text, problem):
    from foliko_cli.errors import UsageError
    from foliko_cli.serve.auth import load_keys

    path = tmp_path / "keys.toml"
    path.write_text("[keys]\n" + text + "\n")
    path.chmod(0o600)
    with pytest.raises(UsageError) as refused:
        load_keys(path)
    message = str(refused.value)
    assert problem in message and "\n" not in message and "entry 1" in message


def test_a_plain_key_keeps_full_access_and_a_table_key_its_limits(tmp_path):
    from foliko_cli.serve.auth import load_keys

    path = tmp_path / "keys.toml"
    path.write_text(KEYS + '"k-all" = {user = "bob", name = "ci"}\n')
    path.chmod(0o600)
    keys = load_keys(path)
    owner = keys.grant_for("Bearer k-owner")
    assert (
        owner.scope is None and owner.user == "ann" and re.fullmatch(r"ann/[0-9a-f]{8}", owner.name)
    )
    viewer = keys.grant_for("Bearer k-viewer")
    assert (viewer.name, viewer.scope.write, viewer.scope.sessions) == (
        "viewer",
        False,
        ("proj-*",),
    )
    assert keys.grant_for("Bearer k-all") == ("bob", "ci", None)
    assert orjson.dumps(owner.name).decode().count("k-owner") == 0  # never the key itself


MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-06-18",
}


def _mcp(client, key: dict, method: str, params: dict | None = None) -> dict:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, **({"params": params} if params else {})}
    answer = client.post("/mcp", json=body, headers={**MCP_HEADERS, **key})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_mcp_of_serve_holds_each_key_to_its_scope_and_audits_it(app_client):
    client = app_client
    _seed(client)
    listed = {
        name: [tool["name"] for tool in _mcp(client, key, "tools/list")["result"]["tools"]]
        for name, key in (("owner", OWNER), ("viewer", VIEWER))
    }
    assert listed == {
        "owner": ["list_sessions", "search_sessions", "read_session", "chat"],
        "viewer": ["list_sessions", "search_sessions", "read_session"],
    }
    answers = [
        _mcp(client, VIEWER, "tools/call", {"name": "read_session", "arguments": {"session_id": s}})
        for s in ("secret-x", "never-x")
    ]
    assert answers[0] == orjson.loads(orjson.dumps(answers[1]).replace(b"never-x", b"secret-x"))
    assert answers[0]["result"]["isError"] is True
    read = _mcp(
        client,
        VIEWER,
        "tools/call",
        {"name": "read_session", "arguments": {"session_id": "proj-a"}},
    )
    assert "the plan" in read["result"]["content"][0]["text"]
    base = client.app.state.services.base
    client.portal.call(base.audit.flush)
    found = client.portal.call(base.audit_entries)
    mcp_calls = [(e.client, e.call, e.session_ids) for e in found if e.call.startswith("tools/")]
    assert ("key:viewer", "tools/list", ()) in mcp_calls
    assert ("key:viewer", "tools/call read_session", ("proj-a",)) in mcp_calls
    assert not [c for c in mcp_calls if "secret-x" in c[2]]


def test_mcp_serve_over_http_reads_only_by_default_and_sees_only_its_sessions(
    foliko_home, monkeypatch
):
    from starlette.testclient import TestClient

    from foliko_cli.serve.app import ServeOptions, create_app

    monkeypatch.setenv("FOLIKO_MODEL", "echo")
    app = create_app(ServeOptions(access_log=None, mcp_only=True, sessions=("proj-*",)))
    with TestClient(app, base_url="http://127.0.0.1:8000") as client:
        services = client.app.state.services
        for session_id in ("proj-a", "secret-x"):
            client.portal.call(services.base.chat, session_id, HIDDEN_WORD)
        tools = _mcp(client, {}, "tools/list")["result"]["tools"]
        assert [tool["name"] for tool in tools] == [
            "list_sessions",
            "search_sessions",
            "read_session",
        ]
        listed = _mcp(client, {}, "tools/call", {"name": "list_sessions", "arguments": {}})
        assert [row["session_id"] for row in listed["result"]["structuredContent"]["sessions"]] == [
            "proj-a"
        ]
        hits = _mcp(
            client,
            {},
            "tools/call",
            {"name": "search_sessions", "arguments": {"query": HIDDEN_WORD}},
        )
        found = {hit["session_id"] for hit in hits["result"]["structuredContent"]["hits"]}
        assert found == {"proj-a"}
