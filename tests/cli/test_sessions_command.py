"""`foliko sessions list|show` and the global options, through CliRunner."""

from __future__ import annotations

import orjson

from foliko_cli import __version__


def test_list_is_empty_at_first(invoke):
    result = invoke("sessions", "list", "--json")
    assert result.exit_code == 0
    assert orjson.loads(result.stdout) == []


def test_list_json_reports_every_session_most_recent_first(invoke):
    invoke("chat", "-s", "a", "first")
    invoke("chat", "-s", "b", "second")
    invoke("chat", "-s", "b", "third")
    rows = orjson.loads(invoke("sessions", "list", "--json").stdout)
    assert [r["session_id"] for r in rows] == ["b", "a"]
    assert rows[0]["message_count"] == 4 and rows[1]["message_count"] == 2
    assert rows[0]["preview"] == "third"
    assert rows[0]["updated_at"] >= rows[1]["updated_at"]


def test_list_table_names_sessions(invoke):
    invoke("chat", "-s", "alpha", "hi")
    result = invoke("sessions", "list")
    assert result.exit_code == 0
    assert "alpha" in result.stdout and "session" in result.stdout


def test_show_json_shape(invoke, show):
    invoke("chat", "-s", "s1", '/tool set_variable {"key": "k", "value": [1, 2]}')
    data = show("s1")
    assert set(data) >= {"session_id", "messages", "variables", "metadata"}
    assert data["variables"] == {"k": [1, 2]}
    assert data["metadata"]["message_count"] == 4
    assert all({"role", "content"} <= set(m) for m in data["messages"])


def test_show_text(invoke):
    invoke("chat", "-s", "s1", "hello world")
    result = invoke("sessions", "show", "s1")
    assert result.exit_code == 0
    assert "hello world" in result.stdout and "[user]" in result.stdout


def test_show_unknown_session_exits_2(invoke):
    result = invoke("sessions", "show", "nope")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "'nope' not found" in result.stderr


def test_storage_option_and_env_select_the_backend(invoke, tmp_path):
    url = f"sqlite:///{tmp_path}/other.db"
    invoke("--storage", url, "chat", "-s", "elsewhere", "hi")
    assert (tmp_path / "other.db").exists()
    assert orjson.loads(invoke("sessions", "list", "--json").stdout) == []
    rows = orjson.loads(invoke("sessions", "list", "--json", env={"FOLIKO_STORAGE": url}).stdout)
    assert [r["session_id"] for r in rows] == ["elsewhere"]


def test_default_storage_is_sqlite_under_foliko_home(invoke, foliko_home):
    invoke("chat", "-s", "s1", "hi")
    assert (foliko_home / "sessions.db").exists()


def test_version(invoke):
    result = invoke("--version")
    assert result.exit_code == 0
    assert __version__ in result.stdout


def test_every_command_has_help_with_an_example(invoke):
    for args in (["chat"], ["sessions"], ["sessions", "list"], ["sessions", "show"], []):
        result = invoke(*args, "--help")
        assert result.exit_code == 0
        assert "Example" in result.stdout, args
