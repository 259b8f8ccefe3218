"""Secrets stay hidden: a URL's credentials and token parameters wherever a
URL is shown (foliko_cli/common/redaction.py), and API-key file entries read as
meant (spaces around a key or user are not part of it)."""

from __future__ import annotations

import orjson
import pytest

from foliko_cli.common.redaction import redact_url

from .test_config import places, shown  # noqa: F401 - the fixture and its reader

SECRETS = ("tok3n", "s3cret", "zzkey", "sig9", "ghp_abc")


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        ("https://mcp.example/sse?token=tok3n", "https://mcp.example/sse?token=***"),
        (
            "https://mcp.example/x?v=2&api_key=zzkey&Access_Token=tok3n#top",
            "https://mcp.example/x?v=2&api_key=***&Access_Token=***#top",
        ),
        (
            "https://s.example/f?X-Amz-Signature=sig9&a=1",
            "https://s.example/f?X-Amz-Signature=***&a=1",
        ),
        ("https://ghp_abc@git.example/r", "https://***@git.example/r"),
        ("http://user:s3cret@host:8080/v1", "http://user:***@host:8080/v1"),
        (
            "postgresql://alice@db/foliko?sslmode=require",
            "postgresql://alice@db/foliko?sslmode=require",
        ),
        ("redis://:s3cret@cache:6379/0?password=s3cret", "redis://:***@cache:6379/0?password=***"),
        ("not a url ?token=x", "not a url ?token=x"),
    ],
)
def test_redact_url_hides_credentials_and_token_parameters(url, redacted):
    assert redact_url(url) == redacted


def test_config_show_hides_an_mcp_url_token_and_its_headers(invoke, places):  # noqa: F811
    places["user"].write_text(
        '[mcp_servers.remote]\nurl = "https://mcp.example/sse?token=tok3n&v=2"\n'
        'headers = {Authorization = "Bearer s3cret", "X-Trace" = "on"}\n'
        '[models.local]\nmodel = "openai:m"\n'
        'base_url = "http://ghp_abc@127.0.0.1:1/v1?api_key=zzkey"\n'
    )
    rows = shown(invoke)
    assert rows["mcp_servers.remote.url"][0] == "https://mcp.example/sse?token=***&v=2"
    assert rows["mcp_servers.remote.headers"][0] == {"Authorization": "***", "X-Trace": "on"}
    assert rows["models.local.base_url"][0] == "http://***@127.0.0.1:1/v1?api_key=***"
    for fmt in ("json", "tsv", "table"):
        result = invoke("config", "show", "--format", fmt)
        assert result.exit_code == 0, result.stderr
        for secret in SECRETS:
            assert secret not in result.stdout + result.stderr, (fmt, secret)


def test_models_list_hides_a_base_url_s_credentials(invoke, places):  # noqa: F811
    places["user"].write_text(
        '[models.local]\nmodel = "openai:m"\n'
        'base_url = "http://ghp_abc@127.0.0.1:1/v1?api_key=zzkey"\n'
    )
    result = invoke("models", "list", "--json")
    assert result.exit_code == 0, result.stderr
    rows = {row["name"]: row for row in orjson.loads(result.stdout)}
    assert rows["local"]["base_url"] == "http://***@127.0.0.1:1/v1?api_key=***"
    for secret in SECRETS:
        assert secret not in result.stdout + result.stderr


def _key_file(tmp_path, text: str):
    path = tmp_path / "keys.toml"
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_spaces_around_a_key_and_its_user_are_stripped(tmp_path):
    from foliko_cli.serve.auth import load_keys

    keys = load_keys(_key_file(tmp_path, '[keys]\n" key-sam " = " sam "\n"key-al" = "al"\n'))
    assert keys.user_for("Bearer key-sam") == "sam"
    assert keys.user_for("Bearer key-al") == "al"
    assert keys.user_for("Bearer  key-sam ") == "sam"
    assert keys.user_for("Bearer key-sa") is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('[keys]\n"   " = "ann"\n', "entry 1 of [keys] (user 'ann')"),
        ('[keys]\n"k1" = "bo"\n"k2" = " "\n', "entry 2 of [keys] (user '')"),
        ('[keys]\n"k1" = "bo"\n" k1" = "cy"\n', "users 'bo' and 'cy' have the same key"),
    ],
)
def test_a_key_file_entry_empty_after_stripping_exits_2(invoke, tmp_path, text, fragment):
    result = invoke("serve", "--api-keys", str(_key_file(tmp_path, text)))
    assert result.exit_code == 2
    assert fragment in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "k1" not in result.stderr
