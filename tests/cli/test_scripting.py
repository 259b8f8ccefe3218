"""Options that make foliko scriptable: -q/--no-header on lists, -s or a positional
session id, --json everywhere data is printed, --storage after the subcommand,
finite timeouts, JSON failure objects from chat --json."""

from __future__ import annotations

import orjson
import pytest
from trusting import trust


@pytest.fixture
def chat(invoke, monkeypatch):
    monkeypatch.setenv("FOLIKO_MODEL", "echo")

    def run(session_id: str, *args: str):
        result = invoke("chat", "-s", session_id, *args)
        assert result.exit_code == 0, result.stderr
        return result

    return run


@pytest.fixture
def three(chat):
    for name in ("a", "b", "c"):
        chat(name, f"hello {name}")


# -q / --no-header


@pytest.mark.parametrize(
    ("command", "first"),
    [
        (["sessions", "list", "--sort", "name"], ["a", "b", "c"]),
        (["models", "list"], ["echo", "openai:MODEL", "anthropic:MODEL", "ollama:MODEL"]),
        (["tools", "list"], ["get_session_info", "get_variable", "set_variable"]),
        (["agents", "list"], []),
        (["skills", "list"], []),
    ],
)
@pytest.mark.parametrize("fmt", [[], ["--json"], ["--format", "table"]])
def test_quiet_prints_ids_only_one_a_line(invoke, three, command, first, fmt):
    result = invoke(*command, "-q", *fmt)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == first


@pytest.mark.parametrize("fmt", ["tsv", "table"])
def test_no_header_drops_the_header_row(invoke, three, fmt):
    with_header = invoke("sessions", "list", "--sort", "name", "--format", fmt).stdout
    without = invoke("sessions", "list", "--sort", "name", "--format", fmt, "--no-header").stdout
    lines = without.splitlines()
    assert len(lines) == 3
    assert [line.split()[0] for line in lines] == ["a", "b", "c"]
    assert "session" not in without and "session" in with_header


def test_no_header_on_every_list(invoke, three):
    for command in (["models", "list"], ["tools", "list"]):
        result = invoke(*command, "--no-header")
        assert result.exit_code == 0
        assert not result.stdout.startswith("name\t")


# the session: positional or -s


@pytest.mark.parametrize(
    "args",
    [
        ["sessions", "show", "-s", "a", "--json"],
        ["sessions", "show", "a", "--json"],
        ["sessions", "show", "--session", "a", "--format", "json"],
    ],
)
def test_show_takes_the_session_either_way(invoke, three, args):
    result = invoke(*args)
    assert result.exit_code == 0, result.stderr
    assert orjson.loads(result.stdout)["session_id"] == "a"


def test_other_session_commands_take_s_too(invoke, three, show):
    assert invoke("sessions", "clear", "-s", "a").exit_code == 0
    assert show("a")["messages"] == []
    assert invoke("sessions", "rename", "-s", "a", "z").exit_code == 0
    assert invoke("sessions", "delete", "-s", "z", "b").stdout == "z\nb\n"
    exported = invoke("sessions", "export", "-s", "c")
    assert [r["session_id"] for r in orjson.loads(exported.stdout)] == ["c"]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["sessions", "show"], "name one session"),
        (["sessions", "show", "a", "-s", "b"], "only one session"),
        (["sessions", "clear"], "name one session"),
        (["sessions", "rename", "a"], "OLD NEW"),
        (["sessions", "delete"], "ID..."),
    ],
)
def test_a_missing_or_extra_session_exits_2(invoke, three, args, fragment):
    result = invoke(*args)
    assert result.exit_code == 2
    assert fragment in result.stderr


# --json on every command that prints data


def test_json_from_delete_rename_clear_prune(invoke, three):
    assert orjson.loads(invoke("sessions", "rename", "a", "x", "--json").stdout) == {
        "renamed": "a",
        "to": "x",
    }
    assert orjson.loads(invoke("sessions", "clear", "x", "--all", "--json").stdout) == {
        "cleared": "x",
        "variables_cleared": True,
    }
    deleted = invoke("sessions", "delete", "x", "ghost", "--json")
    assert deleted.exit_code == 2
    assert orjson.loads(deleted.stdout) == {"deleted": ["x"], "missing": ["ghost"]}
    pruned = invoke("sessions", "prune", "--older-than", "1s", "--dry-run", "--json")
    assert orjson.loads(pruned.stdout) == {"would_delete": [], "kept_active": [], "unreadable": []}


def test_import_summary_goes_to_stderr_and_json_to_stdout(invoke, three):
    dump = invoke("sessions", "export", "--all").stdout
    plain = invoke("sessions", "import", "-", input=dump)
    assert plain.exit_code == 0
    assert plain.stdout == ""
    assert "foliko: imported 0, unchanged 3, skipped 0" in plain.stderr
    as_json = invoke("sessions", "import", "-", "--json", input=dump)
    assert orjson.loads(as_json.stdout) == {
        "imported": [],
        "unchanged": ["a", "b", "c"],
        "skipped": [],
        "unreadable": [],
    }


@pytest.mark.parametrize(
    "command",
    [
        ["storage", "info"],
        ["storage", "check"],
        ["storage", "migrate", "sqlite", "memory", "--dry-run"],
    ],
)
def test_storage_commands_take_format_json(invoke, three, command):
    for flags in (["--json"], ["--format", "json"]):
        result = invoke(*command, *flags)
        assert result.exit_code == 0, result.stderr
        orjson.loads(result.stdout)


def test_agents_show_takes_format_json(invoke, tmp_path):
    (tmp_path / "foliko.toml").write_text('[agents.helper]\nsystem_prompt = "Be kind."\n')
    trust(tmp_path / "foliko.toml")
    result = invoke("agents", "show", "helper", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert orjson.loads(result.stdout)["name"] == "helper"


# --storage after the subcommand


@pytest.mark.parametrize(
    "command",
    [
        ["sessions", "list", "-q"],
        ["sessions", "show", "j", "--json"],
        ["sessions", "export", "j"],
        ["storage", "info", "--json"],
        ["sessions", "vars", "j", "--json"],
    ],
)
def test_storage_after_the_subcommand(invoke, chat, foliko_home, command):
    chat("j", "hi", "--storage", "json")
    assert (foliko_home / "sessions").is_dir() or any(foliko_home.rglob("*.json"))
    before = invoke("--storage", "json", *command)
    after = invoke(*command, "--storage", "json")
    assert after.exit_code == 0, after.stderr
    assert after.stdout == before.stdout
    assert invoke("sessions", "list", "-q").stdout == ""  # the default sqlite is untouched


# --timeout


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "soon"])
@pytest.mark.parametrize("command", [["chat", "-s", "t", "hi"], ["workflow", "run", "w.json"]])
def test_an_unusable_timeout_is_refused(invoke, tmp_path, command, value):
    """Was: --timeout nan and inf were accepted."""
    (tmp_path / "w.json").write_text('{"steps": [{"prompt": "hi"}]}')
    result = invoke(
        *command, *(["-s", "t"] if command[0] == "workflow" else []), "--timeout", value
    )
    assert result.exit_code == 2
    assert "--timeout" in result.stderr
    assert "finite number of seconds" in result.stderr or "not a number" in result.stderr
    assert invoke("sessions", "list", "-q").stdout == ""


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_an_unusable_timeout_from_the_environment_is_refused(invoke, value):
    result = invoke("chat", "-s", "t", "hi", env={"FOLIKO_TIMEOUT": value})
    assert result.exit_code == 2
    assert "FOLIKO_TIMEOUT" in result.stderr and "finite" in result.stderr


def test_an_unusable_timeout_in_the_config_is_refused(invoke, tmp_path):
    (tmp_path / "foliko.toml").write_text("timeout = inf\n")
    result = invoke("sessions", "list")
    assert result.exit_code == 2
    assert "timeout" in result.stderr and "finite" in result.stderr


# chat --json on failure


def test_chat_json_prints_a_failure_object(invoke):
    """Was: nothing on stdout when the turn failed."""
    result = invoke("chat", "-s", "f", "hi", "-m", "nosuch:model", "--json")
    assert result.exit_code == 2
    failure = orjson.loads(result.stdout)
    assert failure["success"] is False
    assert failure["session_id"] == "f"
    assert failure["error"]["exit_code"] == 2
    assert "unknown model" in failure["error"]["message"]
    assert {"request_id", "trace_id"} <= set(failure)


def test_chat_json_failure_carries_the_request_ids(invoke, foliko_home):
    from .locks import held

    assert invoke("chat", "-s", "busy", "first", env={"FOLIKO_MODEL": "echo"}).exit_code == 0
    with held(foliko_home, "busy"):
        result = invoke("chat", "-s", "busy", "hi", "--json", "--timeout", "0.2")
    assert result.exit_code == 4
    failure = orjson.loads(result.stdout)
    assert failure["error"]["exit_code"] == 4
    assert failure["request_id"] and failure["trace_id"]


def test_stream_json_ends_with_an_error_event(invoke):
    result = invoke("chat", "-s", "f", "hi", "-m", "nosuch:model", "--json", "--stream")
    assert result.exit_code == 2
    last = orjson.loads(result.stdout.splitlines()[-1])
    assert last["type"] == "error"
    assert last["success"] is False and last["error"]["exit_code"] == 2


def test_stream_json_ends_with_done_on_success(invoke):
    result = invoke("chat", "-s", "ok", "hi", "--json", "--stream", env={"FOLIKO_MODEL": "echo"})
    assert result.exit_code == 0
    assert orjson.loads(result.stdout.splitlines()[-1])["type"] == "done"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["chat", "-s", "bad\x00id", "hi", "--json"], "control character"),
        (["--storage", "bogus", "chat", "-s", "s", "hi", "--json"], "unknown storage"),
        (["chat", "-s", "s", "   ", "--json"], "blank"),
        (["chat", "-s", "s", "--json"], "no message"),
    ],
)
def test_chat_json_reports_failures_before_the_turn_too(invoke, args, fragment):
    result = invoke(*args)
    assert result.exit_code == 2
    failure = orjson.loads(result.stdout)
    assert failure["success"] is False and fragment in failure["error"]["message"]
    assert failure["error"]["exit_code"] == 2
