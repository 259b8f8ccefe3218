"""What a session holds, shown: titles in `sessions list` (a column, `--ids` for
scripts), and in `sessions show` the tool calls' arguments, the system prompt,
the variables, the title and the fork origin, in every format."""

from __future__ import annotations

import orjson
import pytest

from foliko_cli import Foliko

UUID = "6f1c2a9e-1b2c-4d5e-8f90-123456789abc"


@pytest.fixture
def imported(invoke, tmp_path):
    """A conversation imported with its title, as an import from ChatGPT keeps it."""
    document = [
        {
            "session_id": UUID,
            "messages": [
                {"role": "user", "content": "plan a trip", "created_at": 1_700_000_000_000},
                {"role": "assistant", "content": "Lyon?", "created_at": 1_700_000_001_000},
            ],
            "variables": {},
            "metadata": {"title": "Trip\tto Lyon", "created_at": 1_700_000_000_000},
        }
    ]
    source = tmp_path / "export.json"
    source.write_bytes(orjson.dumps(document))
    assert invoke("sessions", "import", str(source)).exit_code == 0
    invoke("chat", "-s", "plain", "hello")
    return UUID


@pytest.fixture
def detailed(invoke):
    """A session with a system prompt, variables, a tool call and a fork of it."""
    invoke("chat", "-s", "d", "--system", "Be terse.\nAlways.", "--var", "city=Paris", "hi")
    invoke("chat", "-s", "d", '/tool get_variable {"key": "city"}')
    invoke("chat", "-s", "fork", "--from", "d", "again")
    return "d"


def test_list_shows_titles_in_every_format(invoke, imported):
    rows = {r["session_id"]: r for r in orjson.loads(invoke("sessions", "list", "--json").stdout)}
    assert rows[UUID]["title"] == "Trip\tto Lyon" and rows["plain"]["title"] is None
    tsv = invoke("sessions", "list").stdout.splitlines()
    assert tsv[0].split("\t") == ["session_id", "message_count", "updated_at", "preview", "title"]
    assert f"{UUID}\t2\t" in tsv[2] and tsv[2].endswith("\tTrip to Lyon")
    table = invoke("sessions", "list", "--format", "table").stdout.splitlines()
    assert table[0].split()[:3] == ["session", "title", "messages"]
    assert table[3].startswith(f"{UUID}  Trip to Lyon  ")


def test_a_long_title_is_cut_in_a_table_only(invoke):
    title = "A very long title " * 5
    with Foliko() as foliko:
        foliko.create_session("long", metadata={"title": title})
    table = invoke("sessions", "list", "--format", "table").stdout
    assert "A very long title A very long title A v…  0" in table
    assert invoke("sessions", "list", "--json").stdout.count(title) == 1


def test_ids_prints_the_ids_alone(invoke, imported):
    assert invoke("sessions", "list", "--ids").stdout == f"plain\n{UUID}\n"
    assert invoke("sessions", "list", "--ids").stdout == invoke("sessions", "list", "-q").stdout


def test_the_plain_view_has_the_tool_calls_arguments_and_what_the_session_holds(invoke, detailed):
    shown = invoke("sessions", "show", detailed).stdout
    assert "system    Be terse.\nAlways.\n" in shown
    assert 'var       city = "Paris"\n' in shown
    assert "[assistant → get_variable]" in shown
    assert 'tool call get_variable {"key":"city"}\n' in shown
    assert "[tool ← get_variable]" in shown
    fork = invoke("sessions", "show", "fork").stdout
    assert "forked    from d\n" in fork


def test_the_plain_view_has_the_title(invoke, imported):
    assert f"session   {UUID}\ntitle     Trip\tto Lyon\n" in invoke("sessions", "show", UUID).stdout


def test_the_markdown_view_has_the_system_prompt_and_the_fork_origin(invoke, detailed):
    shown = invoke("sessions", "show", "fork", "--format", "markdown").stdout
    assert "- forked from: d\n" in shown
    assert "System prompt:\n\n```\nBe terse.\nAlways.\n```\n" in shown
    assert '- variable `city` = `"Paris"`' in shown
    assert "Tool call `get_variable`" in shown and '"key": "city"' in shown


def test_the_json_view_has_them_all(show, detailed):
    data = show(detailed)
    assert data["metadata"]["system_prompt"] == "Be terse.\nAlways."
    assert data["variables"] == {"city": "Paris"}
    (call,) = next(m for m in data["messages"] if m.get("tool_calls"))["tool_calls"]
    assert (call["name"], call["arguments"]) == ("get_variable", {"key": "city"})
    assert show("fork")["metadata"]["forked_from"] == "d"
