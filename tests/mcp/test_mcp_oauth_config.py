"""The OAuth keys of [mcp_servers.NAME]: each mistake exits 2 with one line
naming the table, the key and the fix; login/logout of a server without OAuth."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from mcp_support import stdio_server, write_config

from foliko_cli.cli.main import cli
from foliko_cli.mcp.server_config import server_config

URL = "http://127.0.0.1:9/mcp"


def invoke(*args: str, env: dict | None = None):
    environment = {"FOLIKO_MODEL": "echo", **(env or {})}
    return CliRunner().invoke(cli, list(args), env=environment, catch_exceptions=False)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"auth": "oauth2"}, "'auth' must be \"oauth\""),
        ({"client_id": "c"}, "'client_id' applies only with auth = \"oauth\""),
        ({"auth": "oauth", "grant": "password"}, "'grant' must be \"authorization_code\" or"),
        ({"auth": "oauth", "client_id": ""}, "'client_id' must be a non-empty string"),
        (
            {"auth": "oauth", "client_id": "c", "client_secret_env": "hunter 2"},
            "'client_secret_env' must name an environment variable",
        ),
        ({"auth": "oauth", "client_secret_env": "S"}, "'client_secret_env' needs 'client_id'"),
        (
            {"auth": "oauth", "client_metadata_url": "http://c.example/doc.json"},
            "'client_metadata_url' must be an https:// URL with a path",
        ),
        (
            {"auth": "oauth", "client_metadata_url": "https://c.example/"},
            "'client_metadata_url' must be an https:// URL with a path",
        ),
        (
            {"auth": "oauth", "client_id": "c", "client_metadata_url": "https://c.example/d"},
            "'client_metadata_url' cannot be combined with 'client_id'",
        ),
        ({"auth": "oauth", "scopes": "mcp"}, "'scopes' must be a list of strings"),
        ({"auth": "oauth", "scopes": ["a b"]}, "'scopes' must be a list of scopes, each one word"),
        (
            {"auth": "oauth", "token_endpoint_auth_method": "private_key_jwt"},
            "'token_endpoint_auth_method' must be \"client_secret_basic\"",
        ),
        (
            {"auth": "oauth", "client_id": "c", "token_endpoint_auth_method": "client_secret_post"},
            "'client_secret_post' needs a 'client_secret_env'",
        ),
        (
            {
                "auth": "oauth",
                "client_id": "c",
                "client_secret_env": "S",
                "token_endpoint_auth_method": "none",
            },
            "'none' needs no 'client_secret_env'",
        ),
        ({"auth": "oauth", "redirect_port": 70000}, "'redirect_port' must be a port number"),
        ({"auth": "oauth", "redirect_port": "8080"}, "'redirect_port' must be a port number"),
        (
            {"auth": "oauth", "grant": "client_credentials", "client_id": "c"},
            "\"client_credentials\" needs 'client_id' and 'client_secret_env'",
        ),
        (
            {
                "auth": "oauth",
                "grant": "client_credentials",
                "client_id": "c",
                "client_secret_env": "S",
                "redirect_port": 8080,
            },
            "'redirect_port' applies only to grant = \"authorization_code\"",
        ),
        (
            {"auth": "oauth", "issuer": "https://as.example"},
            "'issuer' applies only to grant = \"client_credentials\"",
        ),
        (
            {
                "auth": "oauth",
                "grant": "client_credentials",
                "client_id": "c",
                "client_secret_env": "S",
                "issuer": "as.example",
            },
            "'issuer' must be the authorization server's http(s) URL",
        ),
    ],
)
def test_a_bad_oauth_table_exits_2_naming_table_and_key(tmp_path: Path, table: dict, message):
    write_config(tmp_path / "foliko.toml", {"bad": {"url": URL, **table}})
    result = invoke("chat", "-s", "s1", "hello")
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert message in line and "[mcp_servers.bad]" in line


def test_oauth_keys_apply_only_to_a_server_with_a_url(tmp_path: Path):
    write_config(tmp_path / "foliko.toml", {"bad": stdio_server(auth="oauth")})
    result = invoke("chat", "-s", "s1", "hello")
    assert result.exit_code == 2
    assert "'auth' applies only to a server with 'url'" in result.stderr


def test_a_good_table_is_kept_as_written():
    config = server_config(
        "gh",
        {
            "url": "https://api.example/mcp",
            "auth": "oauth",
            "client_id": "foliko-app",
            "client_secret_env": "GH_SECRET",
            "scopes": ["repo", "read:org"],
            "token_endpoint_auth_method": "client_secret_post",
            "redirect_port": 8765,
        },
    )
    assert (config.auth, config.grant, config.client_id) == (
        "oauth",
        "authorization_code",
        "foliko-app",
    )
    assert config.client_secret_env == "GH_SECRET" and config.scopes == ("repo", "read:org")
    assert (config.token_endpoint_auth_method, config.redirect_port) == ("client_secret_post", 8765)


def test_config_show_names_the_secrets_variable_not_a_secret(tmp_path: Path):
    write_config(
        tmp_path / "foliko.toml",
        {"gh": {"url": URL, "auth": "oauth", "client_id": "c", "client_secret_env": "GH_SECRET"}},
    )
    shown = invoke("config", "show", env={"GH_SECRET": "the-real-secret"})
    assert shown.exit_code == 0, shown.stderr
    assert "GH_SECRET" in shown.stdout
    assert "the-real-secret" not in shown.stdout + shown.stderr


@pytest.mark.parametrize("command", ["login", "logout"])
def test_login_needs_a_configured_oauth_server(tmp_path: Path, command: str):
    write_config(tmp_path / "foliko.toml", {"plain": {"url": URL}})
    unknown = invoke("mcp", command, "nosuch")
    assert unknown.exit_code == 2
    assert "unknown MCP server 'nosuch' (known: plain)" in unknown.stderr
    plain = invoke("mcp", command, "plain")
    assert plain.exit_code == 2
    (line,) = plain.stderr.strip().splitlines()
    assert "does not use OAuth" in line and 'auth = "oauth"' in line
