"""Agents from ``[agents.NAME]``: their own tools override global ones, their system
prompt (prompt, skills, tools) is rebuilt every turn, their model, `chat --agent`,
`agents list|show`, and what a tool sees of the agent (SPEC F5, F10; issue 8)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from foliko_cli.errors import AgentNotFoundError, UsageError
from foliko_cli.models.base import ModelRequest, ModelResponse
from foliko_cli.models.echo import EchoModel
from foliko_cli.service.facade import Foliko

from .conftest import stderr_lines, tool_call, tool_messages

HELPER = """
tools = ["plugin_pkg.tools:whoami"]

[agents.helper]
description = "Answers briefly."
system_prompt = "You are Helper, terse and exact."
tools = ["plugin_pkg.tools:get_variable", "plugin_pkg.tools:whoami"]
skills = ["greet"]
"""

BUILTIN_GET_VARIABLE = "Read a session variable by key."
OVERRIDE_GET_VARIABLE = "The agent's own get_variable, not the built-in one."
OVERRIDE_STAND_IN = "[plugin_pkg.tools:get_variable: not loaded in a dry run]"
WHOAMI = "Report the agent, session and request the tool runs under."
WHOAMI_STAND_IN = "[plugin_pkg.tools:whoami: not loaded in a dry run]"


@pytest.fixture
def helper(project):
    project.write_config(HELPER)
    project.skill("greet", "Greet the user by name", "Say hello to {{user}}.")
    project.skill("audit", "Audit a change", "Check everything twice.")
    return project


def tools_by_name(request: dict[str, Any]) -> dict[str, dict[str, Any]]:
    names = [t["name"] for t in request["tools"]]
    assert len(names) == len(set(names)), f"a tool is offered twice: {names}"
    return {t["name"]: t for t in request["tools"]}


# tool override


def test_agent_tool_overrides_the_global_tool_of_the_same_name(helper, chat, show):
    call = tool_call("get_variable", {"key": "city"})
    plain = chat("s1", call, "--var", "city=Paris")
    assert plain.exit_code == 0, plain.stderr
    assert plain.stdout == 'get_variable returned: {"key":"city","value":"Paris","exists":true}\n'

    agent = chat("s1", call, "--agent", "helper")
    assert agent.exit_code == 0, agent.stderr
    assert agent.stdout == "get_variable returned: agent-override saw city\n"

    again = chat("s1", call)  # the override belongs to the agent, not to the session
    assert again.exit_code == 0, again.stderr
    assert again.stdout == plain.stdout
    results = [m["content"] for m in tool_messages(show("s1"), "get_variable")]
    assert results == [
        '{"key":"city","value":"Paris","exists":true}',
        "agent-override saw city",
        '{"key":"city","value":"Paris","exists":true}',
    ]


def test_the_model_is_offered_the_agents_tool_instead_of_the_global_one(helper, dry_run):
    plain = tools_by_name(dry_run("s1", "hi"))
    assert plain["get_variable"]["description"] == BUILTIN_GET_VARIABLE
    assert "load_skill" not in plain

    agent = tools_by_name(dry_run("s1", "hi", "--agent", "helper"))
    assert agent["get_variable"]["description"] == OVERRIDE_STAND_IN  # not loaded: a dry run
    # the agent adds to the global tools, it does not hide the others
    assert {"get_session_info", "set_variable", "whoami", "load_skill"} <= set(agent)


# the system prompt


def test_system_prompt_holds_the_agents_prompt_skills_and_tools(helper, invoke):
    shown = invoke("agents", "show", "helper", "--json")
    assert shown.exit_code == 0, shown.stderr
    system = orjson.loads(shown.stdout)["system_prompt"]
    assert system.startswith("You are Helper, terse and exact.")
    assert "- greet: Greet the user by name" in system
    assert "load_skill" in system  # how to read a skill's full text
    assert f"- get_variable: {OVERRIDE_GET_VARIABLE}" in system
    assert f"- whoami: {WHOAMI}" in system
    # only the skills the agent names, and never a skill's body
    assert "audit" not in system
    assert "Say hello to" not in system
    assert system.index("You are Helper") < system.index("greet") < system.index("whoami")


def test_no_agent_means_no_agent_prompt(helper, dry_run):
    assert dry_run("s1", "hi")["system"] is None


def test_the_session_system_prompt_follows_the_agents(helper, dry_run):
    system = dry_run("s1", "hi", "--agent", "helper", "--system", "Answer in French.")["system"]
    assert system.startswith("You are Helper, terse and exact.")
    assert system.endswith("Answer in French.")


def test_the_agent_prompt_is_not_stored_in_the_session(helper, chat, show):
    """A real turn as the agent works, and the agent's prompt is not stored as a message
    (it is rebuilt for every turn instead)."""
    result = chat("s1", "hello", "--agent", "helper")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "hello\n"
    session = show("s1")
    assert [m["role"] for m in session["messages"]] == ["user", "assistant"]
    assert all("You are Helper" not in str(m["content"]) for m in session["messages"])


def test_system_prompt_is_rebuilt_every_turn_from_the_config(helper, chat, dry_run):
    first = dry_run("s1", "hi", "--agent", "helper")["system"]
    assert "terse and exact" in first
    assert chat("s1", "one turn", "--agent", "helper").exit_code == 0

    helper.write_config(
        """
[agents.helper]
system_prompt = "You are Helper 2, verbose."
tools = ["plugin_pkg.tools:shout"]
skills = ["greet", "audit"]
"""
    )
    helper.skill("greet", "Greet warmly, with the time of day")
    second = dry_run("s1", "hi", "--agent", "helper")
    system = second["system"]
    assert system.startswith("You are Helper 2, verbose.")
    assert "terse and exact" not in system
    assert "- greet: Greet warmly, with the time of day" in system
    assert "- audit: Audit a change" in system
    assert "- shout: [plugin_pkg.tools:shout: not loaded in a dry run]" in system
    assert "get_variable" not in system and "whoami" not in system
    tools = tools_by_name(second)
    assert tools["get_variable"]["description"] == BUILTIN_GET_VARIABLE
    assert set(tools["load_skill"]["input_schema"]["properties"]["name"]["enum"]) == {
        "greet",
        "audit",
    }
    # the history is kept: only the prompt changed
    assert [m["content"] for m in second["messages"]] == ["one turn", "one turn", "hi"]


class RecordingEcho(EchoModel):
    """The echo model, keeping the system prompt of every request it was sent."""

    def __init__(self) -> None:
        super().__init__()
        self.systems: list[str | None] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.systems.append(request.system)
        return await super().generate(request)


def test_library_rebuilds_the_prompt_from_the_agent_context_each_turn(tmp_path: Path):
    model = RecordingEcho()
    agents = {"helper": {"system_prompt": "First prompt."}}
    with Foliko("memory", model, home=tmp_path / "lib", agents=agents, notify=print) as foliko:
        assert foliko.chat("s1", "one", agent="helper").message == "one"
        context = foliko.framework.get_or_create_agent_context("helper")
        context.system_prompt = "Second prompt."
        context.register_tool(foliko_tool("late_tool", "Arrived between turns."))
        assert foliko.chat("s1", "two", agent="helper").message == "two"
    assert model.systems == [
        "First prompt.",
        "Second prompt.\n\nYour tools:\n- late_tool: Arrived between turns.",
    ]


def foliko_tool(name: str, description: str):
    from foliko_cli.engine.tools import Tool

    return Tool(name, description, lambda arguments, framework: "ok")


# the agent's model


REMOTE = """
[models.remote]
model = "openai:gpt-4o-mini"
base_url = "http://127.0.0.1:9/v1"

[agents.helper]
system_prompt = "You are Helper."
model = "remote"

[agents.plain]
system_prompt = "No model of my own."
"""


def test_chat_agent_uses_the_agents_model_when_no_model_flag(project, dry_run):
    project.write_config(REMOTE)
    assert dry_run("s1", "hi")["model"] == "echo"
    assert dry_run("s1", "hi", "--agent", "helper")["model"] == "openai:gpt-4o-mini"
    assert dry_run("s1", "hi", "--agent", "plain")["model"] == "echo"


def test_an_agent_with_a_usable_model_chats_when_the_global_one_cannot(project, chat, monkeypatch):
    project.write_config('[agents.offline]\nmodel = "echo"\n[agents.plain]\nsystem_prompt = "x"\n')
    monkeypatch.setenv("FOLIKO_MODEL", "openai:gpt-4o-mini")  # no key: unusable
    failed = chat("s1", "hi")
    assert failed.exit_code == 2
    assert "OPENAI_API_KEY" in failed.stderr
    assert chat("s1", "hi", "--agent", "plain").exit_code == 2
    ok = chat("s1", "hi", "--agent", "offline")
    assert ok.exit_code == 0, ok.stderr
    assert ok.stdout == "hi\n"


def test_model_flag_beats_the_agents_model(project, dry_run):
    project.write_config(REMOTE)
    assert dry_run("s1", "hi", "--agent", "helper", "-m", "echo")["model"] == "echo"


# errors


def test_unknown_agent_exits_2_naming_it_and_saves_nothing(helper, invoke, chat):
    for args in (["chat", "-s", "s1", "--agent", "nobody", "hi"], ["agents", "show", "nobody"]):
        result = invoke(*args)
        assert result.exit_code == 2, args
        assert result.stdout == ""
        lines = stderr_lines(result)
        assert len(lines) == 1, lines
        assert "unknown agent 'nobody'" in lines[0]
        assert "helper" in lines[0]  # the agents that do exist
    assert invoke("sessions", "show", "s1").exit_code == 2  # no session was created


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ('colour = "red"', "'colour'"),
        ("tools = 5", "'tools'"),
        ("tools = [1, 2]", "'tools'"),
        ('skills = {a = "b"}', "'skills'"),
        ("system_prompt = 3", "'system_prompt'"),
        ("model = false", "'model'"),
        ('tools = ["no_such_tool"]', "'no_such_tool'"),
        ('tools = ["plugin_pkg.tools:missing"]', "plugin_pkg.tools:missing"),
    ],
)
def test_bad_agent_config_exits_2_with_one_line(project, invoke, table, named):
    project.write_config(f"[agents.broken]\n{table}\n")
    result = invoke("chat", "-s", "s1", "--agent", "broken", "hi")
    assert result.exit_code == 2
    lines = stderr_lines(result)
    assert len(lines) == 1, lines
    assert named in lines[0]
    assert invoke("sessions", "show", "s1").exit_code == 2


def test_agents_table_must_hold_tables(project, invoke):
    project.write_config('[agents]\nhelper = "not a table"\n')
    result = invoke("agents", "list")
    assert result.exit_code == 2
    assert "[agents.NAME]" in result.stderr


def test_a_missing_skill_is_a_warning_and_the_chat_goes_on(project, chat, dry_run):
    project.write_config('[agents.helper]\nsystem_prompt = "Hi."\nskills = ["greet", "ghost"]\n')
    project.skill("greet", "Greet the user")
    result = chat("s1", "hello", "--agent", "helper")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "hello\n"
    warnings = [line for line in stderr_lines(result) if "ghost" in line]
    assert len(warnings) == 1
    assert "helper" in warnings[0]
    system = dry_run("s1", "again", "--agent", "helper")["system"]
    assert "- greet: Greet the user" in system
    assert "ghost" not in system


# agents list / show


def test_agents_list_json_and_tsv(helper, invoke):
    helper.write_user_config(
        '[agents.helper]\nsystem_prompt = "from the user file"\n'
        '[agents.mine]\nmodel = "echo"\ntools = "shout"\n'
    )
    result = invoke("agents", "list", "--json")
    assert result.exit_code == 0, result.stderr
    assert orjson.loads(result.stdout) == [
        {
            "name": "helper",
            "model": None,
            "tools": ["plugin_pkg.tools:get_variable", "plugin_pkg.tools:whoami"],
            "skills": ["greet"],
            "description": "Answers briefly.",
        },
        {"name": "mine", "model": "echo", "tools": ["shout"], "skills": [], "description": None},
    ]
    tsv = invoke("agents", "list").stdout.splitlines()
    assert tsv[0] == "name\tmodel\ttools\tskills"
    assert [line.split("\t")[0] for line in tsv[1:]] == ["helper", "mine"]


def test_agents_list_with_no_agents_is_empty(project, invoke):
    result = invoke("agents", "list", "--json")
    assert result.exit_code == 0
    assert orjson.loads(result.stdout) == []


def test_agents_show_json(helper, invoke, dry_run):
    result = invoke("agents", "show", "helper", "--json")
    assert result.exit_code == 0, result.stderr
    shown = orjson.loads(result.stdout)
    assert shown == {
        "name": "helper",
        "model": "echo",
        "tools": ["get_variable", "load_skill", "whoami"],
        "skills": ["greet"],
        "system_prompt": dry_run("s1", "hi", "--agent", "helper")["system"]
        .replace(OVERRIDE_STAND_IN, OVERRIDE_GET_VARIABLE)
        .replace(WHOAMI_STAND_IN, WHOAMI),
    }


def test_agents_show_text(helper, invoke):
    result = invoke("agents", "show", "helper")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["name", "helper"]
    assert lines[1].split() == ["model", "echo"]
    assert "get_variable, load_skill, whoami" in lines[2]
    assert lines[3].split() == ["skills", "greet"]
    assert "You are Helper, terse and exact." in result.stdout


# what a tool sees


def test_a_tool_sees_the_agent_it_runs_under(helper, chat, show):
    call = tool_call("whoami")
    assert chat("s1", call, "--agent", "helper").exit_code == 0
    assert chat("s1", call).exit_code == 0
    seen = [orjson.loads(m["content"]) for m in tool_messages(show("s1"), "whoami")]
    assert seen == [
        {"agent": "helper", "session": "s1", "has_request": True},
        {"agent": None, "session": "s1", "has_request": True},
    ]


def test_run_with_agent_and_get_agent_context_in_the_library(tmp_path: Path, importable):
    agents = {"helper": {"tools": ["plugin_pkg.tools:whoami"]}}
    with Foliko("memory", "echo", home=tmp_path / "lib", agents=agents) as foliko:
        framework = foliko.framework
        context = foliko.agent_context("helper")
        assert context.agent_id == "helper"
        assert framework.get_agent_context() is None
        seen = framework.run_with_agent("helper", lambda: framework.get_agent_context())
        assert seen is context
        assert framework.get_agent_context() is None
        with pytest.raises(AgentNotFoundError):
            framework.run_with_agent("nobody", lambda: None)
        with pytest.raises(UsageError, match="nobody"):
            foliko.agent_context("nobody")
        result = foliko.call_tool("s1", "whoami", {}, agent="helper")
        assert not result.is_error
        assert orjson.loads(result.content) == {
            "agent": "helper",
            "session": "s1",
            "has_request": True,
        }
        reply = foliko.chat("s2", tool_call("whoami"), agent="helper").message
        assert reply == 'whoami returned: {"agent":"helper","session":"s2","has_request":true}'
