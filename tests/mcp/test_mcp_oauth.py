"""OAuth for remote MCP servers, end to end: the installed foliko against a
server written with the ``mcp`` package that requires OAuth, with a small
authorization server beside it (oauth_server.py) and a stand-in browser
(oauth_browser.py, through BROWSER) that follows the redirects."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest
from mcp_support import write_config
from oauth_support import OAuthServer, browser_environment, visited

LOGIN_LINE = "run foliko mcp login safe"


@pytest.fixture
def oauth(tmp_path: Path, run_foliko, foliko_home: Path):
    """``start(options, **table)``: the test server, and foliko.toml naming it as
    ``safe``; returns the server. ``oauth.run(*args)`` runs foliko with the
    stand-in browser and the echo model."""
    servers: list[OAuthServer] = []
    browser_log = tmp_path / "browser.log"

    class Harness:
        home = foliko_home
        token_file = foliko_home / "mcp-auth" / "safe.json"

        @staticmethod
        def start(options: dict | None = None, **table: object) -> OAuthServer:
            server = OAuthServer(options)
            servers.append(server)
            write_config(
                tmp_path / "foliko.toml",
                {"safe": {"url": server.url, "auth": "oauth", "approve": "always", **table}},
            )
            return server

        @staticmethod
        def run(*args: str, env: dict | None = None):
            environment = {
                "FOLIKO_MODEL": "echo",
                **browser_environment(browser_log),
                **(env or {}),
            }
            return run_foliko(*args, env=environment)

        @staticmethod
        def call(tool: str = "whoami", session: str = "s", env: dict | None = None):
            return Harness.run("chat", "-s", session, f"/tool safe__{tool} {{}}", env=env)

        @staticmethod
        def visited() -> list[dict[str, str]]:
            return visited(browser_log)

        @staticmethod
        def stored() -> dict:
            return json.loads(Harness.token_file.read_text(encoding="utf-8"))

        @staticmethod
        def expire_in(seconds: float) -> None:
            """Move the stored token's expiry (its server keeps the real one)."""
            data = Harness.stored()
            data["expires_at"] = time.time() + seconds
            Harness.token_file.write_text(json.dumps(data), encoding="utf-8")

    yield Harness
    for server in servers:
        server.stop()


def stopped_for_login(done, why: str) -> str:
    """A run that exits 2 with one line naming ``foliko mcp login safe``."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert why in lines[0] and LOGIN_LINE in lines[0], lines[0]
    return lines[0]


def logged_in(oauth) -> None:
    done = oauth.run("mcp", "login", "safe")
    assert done.returncode == 0, done.stderr
    assert "logged in to MCP server 'safe' (2 tools)" in done.stderr.decode()


def test_login_in_the_browser_then_a_chat_calls_the_protected_tool(oauth):
    server = oauth.start()
    stopped_for_login(oauth.call(), "needs a login")
    assert not server.log("register")  # nothing is registered without the user
    done = oauth.run("mcp", "login", "safe")
    assert done.returncode == 0, done.stderr
    (query,) = oauth.visited()
    assert f"or at: {server.base}/authorize?" in done.stderr.decode()  # the URL is printed too
    assert query["code_challenge_method"] == "S256" and len(query["code_challenge"]) == 43
    assert query["resource"] == server.url  # RFC 8707
    assert query["scope"] == "mcp"  # from the protected resource's metadata
    assert query["redirect_uri"].startswith("http://127.0.0.1:")  # RFC 8252 loopback
    assert query["redirect_uri"].endswith("/callback")
    (registration,) = server.log("register")  # RFC 7591: no client_id configured
    assert registration["body"]["token_endpoint_auth_method"] == "none"
    assert query["client_id"] == registration["client_id"]
    (exchange,) = server.log("token")
    assert exchange["grant_type"] == "authorization_code"
    assert exchange["resource"] == server.url

    assert stat.S_IMODE(oauth.token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(oauth.token_file.parent.stat().st_mode) == 0o700
    token = oauth.stored()["tokens"]["access_token"]
    assert token not in done.stdout.decode() + done.stderr.decode()

    called = oauth.call()
    assert called.returncode == 0, called.stderr
    assert b"hello from the protected server" in called.stdout
    assert token not in (called.stdout + called.stderr).decode()


@pytest.mark.parametrize(
    ("discovery", "paths"),
    [
        (
            "header",  # RFC 9728: the 401 names the resource metadata
            [
                "/.well-known/oauth-protected-resource/mcp",
                "/.well-known/oauth-authorization-server",
            ],
        ),
        (
            "root",  # no resource_metadata: the path-based URL, then the root one
            [
                "/.well-known/oauth-protected-resource/mcp",
                "/.well-known/oauth-protected-resource",
                "/.well-known/oauth-authorization-server",
            ],
        ),
        (
            "legacy",  # no protected-resource metadata: the 2025-03-26 fallback to the origin
            [
                "/.well-known/oauth-protected-resource/mcp",
                "/.well-known/oauth-protected-resource",
                "/.well-known/oauth-authorization-server",
            ],
        ),
        (
            "oidc",  # the authorization server publishes OpenID Connect discovery only
            [
                "/.well-known/oauth-protected-resource/mcp",
                "/.well-known/oauth-authorization-server",
                "/.well-known/openid-configuration",
            ],
        ),
    ],
)
def test_the_authorization_server_is_discovered(oauth, discovery: str, paths: list[str]):
    server = oauth.start({"discovery": discovery})
    logged_in(oauth)
    assert [entry["path"] for entry in server.log("discovery")] == paths
    assert oauth.visited()[0]["resource"] == server.url
    called = oauth.call()
    assert called.returncode == 0, called.stderr
    assert b"hello from the protected server" in called.stdout


def test_a_token_about_to_expire_is_refreshed_before_use(oauth):
    server = oauth.start()
    logged_in(oauth)
    before = oauth.stored()["tokens"]
    oauth.expire_in(10)  # as if most of its hour had passed
    called = oauth.call()
    assert called.returncode == 0, called.stderr
    assert b"hello from the protected server" in called.stdout
    refreshes = [entry for entry in server.log("token") if entry["grant_type"] == "refresh_token"]
    assert refreshes and refreshes[0]["resource"] == server.url
    after = oauth.stored()["tokens"]
    assert after["access_token"] != before["access_token"]
    assert after["refresh_token"] != before["refresh_token"]
    assert stat.S_IMODE(oauth.token_file.stat().st_mode) == 0o600


def test_a_process_takes_the_tokens_another_one_refreshed(oauth):
    """Two processes, one token file: the second refreshes (the pair rotates),
    the first then uses the new pair instead of failing with its spent one."""
    import asyncio

    from foliko_cli.mcp.connection import ServerConnection
    from foliko_cli.mcp.server_config import server_config

    server = oauth.start()
    logged_in(oauth)
    config = server_config("safe", {"url": server.url, "auth": "oauth"})

    async def both() -> str:
        first = ServerConnection(config, home=oauth.home)
        second = ServerConnection(config, home=oauth.home)
        try:
            assert await first.start(), first.error
            oauth.expire_in(10)
            assert await second.start(), second.error
            return await first.call("whoami", {})
        finally:
            await first.aclose()
            await second.aclose()

    assert asyncio.run(both()) == "hello from the protected server"
    grants = [entry["grant_type"] for entry in server.log("token")]
    assert grants == ["authorization_code", "refresh_token"]


def test_an_expired_token_that_cannot_be_refreshed_stops_a_piped_turn(oauth):
    oauth.start({"refresh": False})
    logged_in(oauth)
    token = oauth.stored()["tokens"]["access_token"]
    oauth.expire_in(-10)
    line = stopped_for_login(oauth.call(), "expired or was revoked")
    assert token not in line
    stopped_for_login(oauth.call(), "needs a login")  # the refused tokens are gone


def test_a_revoked_token_stops_the_turn_that_uses_the_server_only(oauth):
    server = oauth.start()
    logged_in(oauth)
    assert oauth.call().returncode == 0
    server.revoke()
    plain = oauth.run("chat", "-s", "plain", "hello")  # its tool list is cached: no start
    assert plain.returncode == 0, plain.stderr
    assert plain.stderr == b""
    stopped_for_login(oauth.call(), "expired or was revoked")
    listed = oauth.run("mcp", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert row["state"] == "failed" and LOGIN_LINE in row["error"]
    logged_in(oauth)
    assert oauth.call().returncode == 0


def test_a_server_no_turn_uses_needs_no_login(oauth):
    oauth.start(enabled=False)
    plain = oauth.run("chat", "-s", "plain", "hello")
    assert plain.returncode == 0, plain.stderr


def test_logout_forgets_the_tokens(oauth):
    oauth.start()
    logged_in(oauth)
    done = oauth.run("mcp", "logout", "safe")
    assert done.returncode == 0, done.stderr
    assert "logged out of MCP server 'safe'" in done.stderr.decode()
    assert not oauth.token_file.exists()
    stopped_for_login(oauth.call(), "needs a login")
    again = oauth.run("mcp", "logout", "safe")
    assert again.returncode == 0 and b"had no login to forget" in again.stderr


def test_step_up_on_insufficient_scope(oauth):
    server = oauth.start()
    logged_in(oauth)
    stopped_for_login(oauth.call("admin"), "needs more scope (mcp admin)")
    assert len(server.log("step-up")) == 1
    assert oauth.call().returncode == 0  # the token it has still serves the other tool
    logged_in(oauth)
    assert oauth.visited()[-1]["scope"] == "mcp admin"
    called = oauth.call("admin")
    assert called.returncode == 0, called.stderr
    assert b"admin done" in called.stdout


def test_step_up_the_server_never_grants_stops_after_one_retry(oauth):
    server = oauth.start({"grant_admin": False})
    logged_in(oauth)
    stopped_for_login(oauth.call("admin"), "needs more scope")
    logged_in(oauth)
    stopped_for_login(oauth.call("admin"), "needs more scope")
    assert len(server.log("step-up")) == 2  # once per run: no loop


@pytest.mark.parametrize(
    ("supported", "table", "method"),
    [
        (["client_secret_basic", "client_secret_post"], {}, "client_secret_basic"),
        (["client_secret_post"], {}, "client_secret_post"),
        (
            ["client_secret_basic", "client_secret_post"],
            {"token_endpoint_auth_method": "client_secret_post"},
            "client_secret_post",
        ),
    ],
    ids=["basic-by-default", "post-from-metadata", "post-configured"],
)
def test_a_pre_registered_client_authenticates_as_the_server_supports(
    oauth, supported, table, method
):
    server = oauth.start(
        {
            "clients": {"pre": {"secret": "s3cret-value", "method": method}},
            "auth_methods": supported,
        },
        client_id="pre",
        client_secret_env="SAFE_SECRET",
        **table,
    )
    env = {"SAFE_SECRET": "s3cret-value"}
    done = oauth.run("mcp", "login", "safe", env=env)
    assert done.returncode == 0, done.stderr
    assert oauth.visited()[0]["client_id"] == "pre"
    assert not server.log("register")
    assert [entry["method"] for entry in server.log("token")] == [method]
    assert "s3cret-value" not in oauth.token_file.read_text(encoding="utf-8")
    called = oauth.call(env=env)
    assert called.returncode == 0, called.stderr


def test_a_client_id_metadata_document_is_the_client_id(oauth):
    document = "https://client.example/foliko.json"
    server = oauth.start({"cimd": True}, client_metadata_url=document)
    logged_in(oauth)
    assert oauth.visited()[0]["client_id"] == document
    assert not server.log("register")
    assert oauth.call().returncode == 0


def test_the_client_credentials_grant_needs_no_login(oauth):
    server = oauth.start(
        {"clients": {"robot": {"secret": "robot-secret", "method": "client_secret_basic"}}},
        grant="client_credentials",
        client_id="robot",
        client_secret_env="ROBOT_SECRET",
    )
    called = oauth.call(env={"ROBOT_SECRET": "robot-secret"})
    assert called.returncode == 0, called.stderr
    assert b"hello from the protected server" in called.stdout
    assert b"robot-secret" not in called.stdout + called.stderr
    (exchange,) = server.log("token")
    assert (exchange["grant_type"], exchange["method"]) == (
        "client_credentials",
        "client_secret_basic",
    )
    assert exchange["resource"] == server.url
    assert not oauth.visited()
    assert stat.S_IMODE(oauth.token_file.stat().st_mode) == 0o600


def test_a_client_secret_that_is_not_set_is_one_line(oauth):
    oauth.start(
        {"clients": {"robot": {"secret": "robot-secret"}}},
        grant="client_credentials",
        client_id="robot",
        client_secret_env="ROBOT_SECRET_UNSET",
    )
    stopped = oauth.call()
    assert stopped.returncode == 2, stopped.stderr
    (line,) = stopped.stderr.decode().strip().splitlines()
    assert "$ROBOT_SECRET_UNSET" in line and "export it" in line


def test_a_wrong_client_secret_fails_without_showing_it(oauth):
    oauth.start(
        {"clients": {"robot": {"secret": "robot-secret"}}},
        grant="client_credentials",
        client_id="robot",
        client_secret_env="ROBOT_SECRET",
    )
    done = oauth.run("mcp", "login", "safe", env={"ROBOT_SECRET": "not-the-secret"})
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.decode().strip().splitlines()
    assert "login to MCP server 'safe' failed" in line
    assert "not-the-secret" not in line


SECRET = "s3cr+t/é&=x"  # changes under URL and JSON encoding


def secret_forms(client_id: str, secret: str) -> list[bytes]:
    import base64
    from urllib.parse import quote, quote_plus

    basic = [f"{client_id}:{secret}", f"{quote(client_id, safe='')}:{quote(secret, safe='')}"]
    forms = [secret, quote(secret, safe=""), quote_plus(secret), json.dumps(secret)[1:-1]]
    forms += [base64.b64encode(pair.encode()).decode() for pair in basic]
    return [form.encode() for form in forms]


@pytest.mark.parametrize("method", ["client_secret_basic", "client_secret_post"])
def test_a_token_endpoint_that_echoes_the_request_shows_no_secret(oauth, method):
    """Was: the secret appeared base64-encoded (HTTP Basic) in 4 of 5 commands' output."""
    oauth.start(
        {"clients": {"robot": {"secret": SECRET, "method": method}}, "echo": True},
        grant="client_credentials",
        client_id="robot",
        client_secret_env="ROBOT_SECRET",
        token_endpoint_auth_method=method,
    )
    env = {"ROBOT_SECRET": SECRET}
    for words in (
        ("mcp", "login", "safe"),
        ("chat", "-s", "s", "/tool safe__whoami {}"),
        ("mcp", "list"),
        ("mcp", "tools"),
        ("tools", "list"),
    ):
        done = oauth.run(*words, env=env)
        shown = done.stdout + done.stderr
        assert b"echo" in shown or b"***" in shown or done.returncode != 0, (words, shown)
        for form in secret_forms("robot", SECRET):
            assert form not in shown, (words, form, shown)


def test_a_token_revoked_while_the_server_runs_stops_the_next_call(oauth):
    from foliko_cli.errors import MCPLoginError
    from foliko_cli.service.facade import Foliko

    server = oauth.start()
    logged_in(oauth)
    table = {"url": server.url, "auth": "oauth", "approve": "always"}
    with Foliko("memory", "echo", home=oauth.home, mcp_servers={"safe": table}) as facade:
        first = facade.chat("s", "/tool safe__whoami {}")
        assert first.message == "safe__whoami returned: hello from the protected server"
        kept = len(facade.get_session("s").messages)
        server.revoke()
        with pytest.raises(MCPLoginError, match=r"expired or was revoked.*run foliko mcp login"):
            facade.chat("s", "/tool safe__whoami {}")
        assert len(facade.get_session("s").messages) == kept  # the stopped turn is not saved


def test_a_refused_authorization_is_one_line(oauth):
    oauth.start({"deny": True})
    done = oauth.run("mcp", "login", "safe")
    assert done.returncode == 1, done.stderr
    line = done.stderr.decode().strip().splitlines()[-1]
    assert line == (
        "foliko: error: login to MCP server 'safe' failed: "
        "AuthorizationDenied: access_denied: the user said no"
    )
    assert not oauth.stored().get("tokens")


def test_the_redirect_port_can_be_fixed(oauth):
    from oauth_support import free_port

    port = free_port()
    oauth.start(redirect_port=port)
    logged_in(oauth)
    assert oauth.visited()[0]["redirect_uri"] == f"http://127.0.0.1:{port}/callback"
