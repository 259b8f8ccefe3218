"""`foliko keys`: a key store in llm's format, owner-only, read by the providers
when neither the environment nor the config gives a key; a key is printed by
`keys get` and nowhere else."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from models.fake_servers import FakeServer, openai_message

from foliko_cli.common.keys import NOTE, KeyStore, key_name, variable_for

SECRET = "sk-test-0123456789abcdef"


@pytest.fixture(autouse=True)
def no_keys_in_the_environment(monkeypatch):
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "DEEPSEEK_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server():
    fake = FakeServer().start()
    yield fake
    fake.stop()


def store_file(home: Path) -> Path:
    return home / "keys.json"


def test_set_get_list_and_path(invoke, foliko_home):
    stored = invoke("keys", "set", "openai", input=SECRET + "\n")
    assert stored.exit_code == 0, stored.stderr
    assert stored.stdout == "" and SECRET not in stored.stderr
    assert "'openai' stored in" in stored.stderr

    assert invoke("keys", "get", "openai").stdout == SECRET + "\n"
    listed = invoke("keys", "list")
    assert listed.stdout.splitlines() == ["name\tvariable", "openai\tOPENAI_API_KEY"]
    assert SECRET not in listed.stdout + listed.stderr
    assert orjson.loads(invoke("keys", "list", "--json").stdout) == [
        {"name": "openai", "variable": "OPENAI_API_KEY"}
    ]
    assert invoke("keys", "path").stdout == f"{store_file(foliko_home)}\n"


def test_the_file_is_owner_only_and_in_llms_format(invoke, foliko_home):
    assert invoke("keys", "set", "openai", "--value", SECRET).exit_code == 0
    assert invoke("keys", "set", "anthropic", "--value", "sk-ant").exit_code == 0
    path = store_file(foliko_home)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(foliko_home.stat().st_mode) == 0o700
    data = json.loads(path.read_text())
    assert data == {
        NOTE: "This file stores secret API credentials. Do not share!",
        "openai": SECRET,
        "anthropic": "sk-ant",
    }


def test_a_key_set_again_is_replaced_and_the_others_kept(invoke, foliko_home):
    invoke("keys", "set", "a", "--value", "one")
    invoke("keys", "set", "b", "--value", "two")
    invoke("keys", "set", "a", "--value", "three")
    assert KeyStore(foliko_home) == {"a": "three", "b": "two"}


def test_llms_own_file_is_read_as_it_is(invoke, foliko_home):
    foliko_home.mkdir()
    store_file(foliko_home).write_text(
        '{\n  "// Note": "This file stores secret API credentials. Do not share!",\n'
        '  "openai": "sk-from-llm"\n}\n'
    )
    assert invoke("keys", "get", "openai").stdout == "sk-from-llm\n"
    assert invoke("keys", "list", "-q").stdout == "openai\n"


def test_a_store_linked_to_llms_file_stays_linked(invoke, foliko_home, tmp_path):
    llm_file = tmp_path / "llm" / "keys.json"
    llm_file.parent.mkdir()
    llm_file.write_text('{"// Note": "x", "openai": "old"}')
    foliko_home.mkdir()
    store_file(foliko_home).symlink_to(llm_file)
    assert invoke("keys", "set", "anthropic", "--value", "sk-ant").exit_code == 0
    assert store_file(foliko_home).is_symlink()
    assert json.loads(llm_file.read_text()) == {
        "// Note": "x",
        "openai": "old",
        "anthropic": "sk-ant",
    }


def test_an_empty_store_lists_nothing_and_says_so(invoke):
    listed = invoke("keys", "list", "-q")
    assert listed.exit_code == 0 and listed.stdout == ""
    assert "no keys are stored" in listed.stderr


def test_get_of_a_key_not_stored_is_exit_2_naming_those_there_are(invoke):
    invoke("keys", "set", "openai", "--value", SECRET)
    missing = invoke("keys", "get", "anthropic")
    assert missing.exit_code == 2 and missing.stdout == ""
    assert "no key 'anthropic' is stored" in missing.stderr
    assert "(stored: openai)" in missing.stderr and "foliko keys set anthropic" in missing.stderr
    assert SECRET not in missing.stderr


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (("bad name", "--value", "x"), None, "'bad name' cannot name a key"),
        (("openai",), "", "the key is empty"),
        (("openai",), "  \n", "the key is empty"),
        (("openai", "--value", "sk\nmore"), None, "a line break or another control character"),
        (("openai",), b"\xff\xfe", "not UTF-8"),
    ],
)
def test_a_bad_name_or_key_is_exit_2_and_stores_nothing(invoke, foliko_home, args, stdin, message):
    result = invoke("keys", "set", *args, input=stdin)
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not store_file(foliko_home).exists()


@pytest.mark.slow
def test_a_closed_or_empty_stdin_is_exit_2(foliko_home):
    foliko = str(Path(sys.executable).with_name("foliko"))
    empty = subprocess.run(
        [foliko, "keys", "set", "openai"], stdin=subprocess.DEVNULL, capture_output=True
    )
    assert empty.returncode == 2 and b"the key is empty" in empty.stderr
    closed = subprocess.run(
        [foliko, "keys", "set", "openai"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        preexec_fn=lambda: os.close(0),
    )
    assert closed.returncode == 2 and b"no key given: stdin is closed" in closed.stderr
    assert not store_file(foliko_home).exists()


@pytest.mark.parametrize(
    "text", ["{not json", '["openai"]', '{"openai": 3}'], ids=["not-json", "list", "not-a-string"]
)
def test_a_broken_store_is_named_and_never_written_over(invoke, foliko_home, text):
    foliko_home.mkdir()
    store_file(foliko_home).write_text(text)
    for args in (("get", "openai"), ("list",), ("set", "openai", "--value", SECRET)):
        result = invoke("keys", *args)
        assert result.exit_code == 2, (args, result.stderr)
        assert f"the key store {store_file(foliko_home)}" in result.stderr
        assert "move it away" in result.stderr
    assert store_file(foliko_home).read_text() == text


def test_an_unreadable_store_is_exit_3(invoke, foliko_home):
    store_file(foliko_home).mkdir(parents=True)  # a directory where the file should be
    result = invoke("keys", "get", "openai")
    assert result.exit_code == 3 and "cannot read the key store" in result.stderr


def test_a_home_that_cannot_hold_the_store_is_exit_3(invoke, tmp_path):
    (tmp_path / "a-file").write_text("")
    home = tmp_path / "a-file" / "home"
    result = invoke("keys", "set", "openai", "--value", SECRET, env={"FOLIKO_HOME": str(home)})
    assert result.exit_code == 3
    assert "cannot write the key store" in result.stderr and "Not a directory" in result.stderr


def test_a_full_disk_is_exit_3_and_the_store_is_kept(invoke, foliko_home, monkeypatch):
    invoke("keys", "set", "openai", "--value", SECRET)
    before = store_file(foliko_home).read_text()

    def full(descriptor: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    result = invoke("keys", "set", "anthropic", "--value", "sk-ant")
    monkeypatch.undo()
    assert result.exit_code == 3, result.stderr
    assert "No space left on device" in result.stderr and "nothing was changed" in result.stderr
    assert store_file(foliko_home).read_text() == before
    assert [p.name for p in foliko_home.iterdir() if p.name.endswith(".tmp")] == []


def test_key_names_stand_in_for_variables():
    assert key_name("OPENAI_API_KEY") == "openai"
    assert key_name("DEEPSEEK_API_KEY") == "deepseek"
    assert key_name("MY_TOKEN") is None and key_name("_API_KEY") is None
    assert variable_for("openai") == "OPENAI_API_KEY"
    assert variable_for("OpenAI") is None and variable_for("a.b") is None


def test_a_turn_uses_the_stored_key_when_the_environment_has_none(invoke, server):
    invoke("keys", "set", "openai", "--value", SECRET)
    server.queue(openai_message("from the server"))
    env = {"OPENAI_BASE_URL": f"{server.url}/v1"}
    result = invoke("chat", "-s", "k", "-m", "openai:some-model", "hi", env=env)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "from the server\n"
    (request,) = server.requests
    assert request.headers["authorization"] == f"Bearer {SECRET}"


def test_the_environment_wins_over_the_store(invoke, server):
    invoke("keys", "set", "openai", "--value", SECRET)
    server.queue(openai_message("ok"))
    env = {"OPENAI_BASE_URL": f"{server.url}/v1", "OPENAI_API_KEY": "sk-env"}
    assert invoke("chat", "-s", "k", "-m", "openai:some-model", "hi", env=env).exit_code == 0
    assert server.requests[0].headers["authorization"] == "Bearer sk-env"


def test_an_alias_with_its_own_variable_reads_the_key_of_that_name(invoke, server, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(
        f'[models.ds]\nmodel = "openai:deepseek-chat"\nbase_url = "{server.url}/v1"\n'
        'api_key_env = "DEEPSEEK_API_KEY"\n'
    )
    invoke("keys", "set", "deepseek", "--value", "sk-ds")
    server.queue(openai_message("ok"))
    result = invoke("chat", "-s", "k", "-m", "ds", "hi", env={"FOLIKO_CONFIG": str(config)})
    assert result.exit_code == 0, result.stderr
    assert server.requests[0].headers["authorization"] == "Bearer sk-ds"


def test_no_key_anywhere_says_how_to_store_one(invoke):
    result = invoke("chat", "-s", "k", "-m", "openai:gpt-4o", "hi")
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "foliko: error: model 'openai:gpt-4o' needs an API key: OPENAI_API_KEY is not set "
        "and no key 'openai' is stored; export OPENAI_API_KEY (or set api_key_env for this "
        "model in the config), or store the key as 'openai' (foliko keys set NAME)"
    )


def test_models_list_counts_a_stored_key(invoke):
    invoke("keys", "set", "anthropic", "--value", "sk-ant")
    rows = {row["name"]: row for row in orjson.loads(invoke("models", "list", "--json").stdout)}
    assert rows["anthropic:MODEL"]["key"] == "stored as 'anthropic'"
    assert rows["anthropic:MODEL"]["key_present"] is True
    assert rows["openai:MODEL"]["key"] == "OPENAI_API_KEY missing"
    assert "sk-ant" not in str(rows)


def test_llm_reads_the_keys_foliko_stores_and_foliko_those_llm_stores(invoke, foliko_home):
    llm_cli = pytest.importorskip("llm.cli")
    from click.testing import CliRunner

    llm = CliRunner()
    env = {"LLM_USER_PATH": str(foliko_home)}
    invoke("keys", "set", "openai", "--value", SECRET)
    assert llm.invoke(llm_cli.cli, ["keys", "get", "openai"], env=env).output == SECRET + "\n"
    assert (
        llm.invoke(llm_cli.cli, ["keys", "path"], env=env).output == invoke("keys", "path").stdout
    )
    stored = llm.invoke(llm_cli.cli, ["keys", "set", "anthropic", "--value", "sk-ant"], env=env)
    assert stored.exit_code == 0, stored.output
    assert invoke("keys", "get", "anthropic").stdout == "sk-ant\n"
    assert invoke("keys", "get", "openai").stdout == SECRET + "\n"


@pytest.mark.slow
def test_on_a_terminal_the_key_is_asked_for_hidden(foliko_home):
    pexpect = pytest.importorskip("pexpect")
    foliko = str(Path(sys.executable).with_name("foliko"))
    child = pexpect.spawn(foliko, ["keys", "set", "openai"], encoding="utf-8", timeout=30)
    child.expect_exact("Enter the key for openai: ")
    child.sendline(SECRET)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert SECRET not in child.before  # not echoed
    assert KeyStore(foliko_home)["openai"] == SECRET

    child = pexpect.spawn(foliko, ["keys", "set", "anthropic"], encoding="utf-8", timeout=30)
    child.expect_exact("Enter the key for anthropic: ")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 2 and "no key was typed; nothing stored" in child.before
    assert "anthropic" not in KeyStore(foliko_home)


def test_a_dry_run_shows_the_stored_key_hidden(invoke):
    invoke("keys", "set", "anthropic", "--value", SECRET)
    dry = invoke("chat", "-s", "k", "-m", "anthropic:claude-x", "--dry-run", "hi")
    assert dry.exit_code == 0, dry.stderr
    assert orjson.loads(dry.stdout)["request"]["headers"]["x-api-key"] == "***"
    assert SECRET not in dry.stdout + dry.stderr
