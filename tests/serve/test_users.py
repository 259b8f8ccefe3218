"""API keys: each user sees only their own sessions; the CLI reaches them with --user."""

from __future__ import annotations

import json
import signal
import subprocess

import pytest

from .servers import FOLIKO_BIN, foliko_env, run_cli

KEYS = '[keys]\n"key-alice" = "alice"\n"key-bob" = "bob"\n'


@pytest.fixture
def keys_file(tmp_path):
    path = tmp_path / "keys.toml"
    path.write_text(KEYS)
    path.chmod(0o600)
    return path


@pytest.fixture
def keyed_server(start_server, keys_file):
    return start_server("--api-keys", str(keys_file))


def openai_for(server, key):
    from openai import OpenAI

    return OpenAI(base_url=server.base_url, api_key=key, max_retries=0)


def test_users_are_isolated(keyed_server, foliko_home):
    import openai

    alice, bob = openai_for(keyed_server, "key-alice"), openai_for(keyed_server, "key-bob")
    conversation = alice.conversations.create()
    reply = alice.responses.create(model="echo", input="secret", conversation=conversation.id)
    assert reply.output_text == "secret"

    with pytest.raises(openai.NotFoundError):
        bob.conversations.retrieve(conversation.id)
    with pytest.raises(openai.NotFoundError):
        bob.conversations.items.list(conversation.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.create(model="echo", input="x", conversation=conversation.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(reply.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.create(model="echo", input="x", previous_response_id=reply.id)
    with pytest.raises(openai.NotFoundError):
        bob.conversations.delete(conversation.id)
    # The same name in bob's space is bob's own session.
    bob.chat.completions.create(
        model="echo",
        messages=[{"role": "user", "content": "bob's"}],
        extra_headers={"X-Session-Id": conversation.id},
    )
    alices = alice.conversations.items.list(conversation.id).data
    assert [item.content[0].text for item in alices] == ["secret", "secret"]

    import httpx2 as httpx

    def listed(key):
        rows = httpx.get(
            keyed_server.url + "/v1/sessions", headers={"Authorization": f"Bearer {key}"}
        ).json()["data"]
        return [(row["session_id"], row["message_count"]) for row in rows]

    assert listed("key-alice") == [(conversation.id, 2)]
    assert listed("key-bob") == [(conversation.id, 2)]

    as_alice = run_cli(foliko_home, "--user", "alice", "sessions", "list", "--json")
    assert [row["session_id"] for row in json.loads(as_alice.stdout)] == [conversation.id]
    shown = run_cli(foliko_home, "--user", "bob", "sessions", "show", conversation.id, "--json")
    assert [m["content"] for m in json.loads(shown.stdout)["messages"]] == ["bob's", "bob's"]
    carol = run_cli(foliko_home, "--user", "carol", "sessions", "list", "--json")
    assert carol.stdout.strip() == b"[]"


def test_missing_or_wrong_key_is_401(keyed_server):
    import httpx2 as httpx
    import openai

    with pytest.raises(openai.AuthenticationError):
        openai_for(keyed_server, "key-mallory").models.list()
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic a2V5"}):
        response = httpx.get(keyed_server.url + "/v1/sessions", headers=headers)
        assert response.status_code == 401
        assert response.json()["error"]["type"] == "authentication_error"
        assert response.headers["www-authenticate"] == "Bearer"
    assert httpx.get(keyed_server.url + "/healthz").status_code == 200
    assert httpx.get(keyed_server.url + "/").status_code == 200
    assert keyed_server.stop() == 0
    assert "key-alice" not in keyed_server.stderr and "nope" not in keyed_server.stderr


def serve_exit(home, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(FOLIKO_BIN), "serve", "--port", "0", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=foliko_env(home),
        timeout=60,
    )


def test_a_key_file_others_can_read_is_refused(keys_file, foliko_home):
    keys_file.chmod(0o644)
    result = serve_exit(foliko_home, "--api-keys", str(keys_file))
    assert result.returncode == 2
    assert b"chmod 600" in result.stderr and b"Traceback" not in result.stderr
    assert b"key-alice" not in result.stderr


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("not = [toml", b"not valid TOML"),
        ("[other]\n", b"no [keys] table"),
        ('[keys]\n"k" = 1\n', b"user name"),
    ],
)
def test_a_malformed_key_file_is_refused(tmp_path, foliko_home, text, fragment):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    path.chmod(0o600)
    result = serve_exit(foliko_home, "--api-keys", str(path))
    assert result.returncode == 2 and fragment in result.stderr, result.stderr


def test_no_keys_means_loopback_only(foliko_home):
    result = serve_exit(foliko_home, "--host", "0.0.0.0")
    assert result.returncode == 2
    assert b"--api-keys" in result.stderr and b"Traceback" not in result.stderr
    missing = serve_exit(foliko_home, "--api-keys", str(foliko_home / "none.toml"))
    assert missing.returncode == 2


def test_sigint_stops_the_server_with_0(start_server):
    server = start_server()
    assert server.stop(signal.SIGINT) == 0
