"""Workflows (seed §7.3): steps (prompt, tool, set) with {{var}} templating run inside one
session, state in its variables, a failing step named with its position, --resume from
it, `workflow validate`, TOML/YAML/JSON files (SPEC F10; issue 8)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
import yaml

from foliko_cli.service.workflows import render

from .conftest import stderr_lines

# ask: a prompt with templating, saved; check: a tool with templated args, saved;
# finish: variables set from both.
THREE_STEPS = {
    "name": "article",
    "vars": {"topic": "tides", "ok": True},
    "steps": [
        {"name": "ask", "prompt": "Write about {{topic}} for {{user}}", "save_as": "draft"},
        {
            "name": "check",
            "tool": "fail_unless",
            "args": {"text": "{{draft}}", "ok": "{{ok}}"},
            "save_as": "checked",
        },
        {
            "name": "finish",
            "set": {"summary": "{{user}} got {{checked}}", "length": "{{checked}}"},
        },
    ],
}

TOML = """
name = "article"

[vars]
topic = "tides"
ok = true

[[steps]]
name = "ask"
prompt = "Write about {{topic}} for {{user}}"
save_as = "draft"

[[steps]]
name = "check"
tool = "fail_unless"
args = { text = "{{draft}}", ok = "{{ok}}" }
save_as = "checked"

[[steps]]
name = "finish"
set = { summary = "{{user}} got {{checked}}", length = "{{checked}}" }
"""

DRAFT = "Write about tides for Ada"
CHECKED = {"upper": DRAFT.upper(), "length": len(DRAFT)}


def write_workflow(project, fmt: str, document: dict | None = None) -> Path:
    document = document or THREE_STEPS
    if fmt == "toml" and document is THREE_STEPS:
        return project.write("article.toml", TOML)
    if fmt == "yaml":
        return project.write("article.yaml", yaml.safe_dump(document, sort_keys=False))
    if fmt == "json":
        return project.write("article.json", json.dumps(document, indent=2))
    raise AssertionError(fmt)


@pytest.fixture
def flow(project) -> Path:
    project.write_config('tools = ["plugin_pkg.tools:fail_unless"]\n')
    return write_workflow(project, "toml")


def run(invoke, path: Path, session: str, *args: str):
    return invoke("workflow", "run", str(path), "--session", session, *args)


def state(show, session: str) -> dict:
    return show(session)["variables"]["_workflow"]


def roles(show, session: str) -> list[str]:
    return [m["role"] for m in show(session)["messages"]]


# a successful run


@pytest.mark.parametrize("fmt", ["toml", "yaml", "json"])
def test_three_steps_run_with_templating_and_state_in_variables(project, invoke, show, fmt):
    project.write_config('tools = ["plugin_pkg.tools:fail_unless"]\n')
    path = write_workflow(project, fmt)
    result = run(invoke, path, "w1", "--var", "user=Ada")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == DRAFT + "\n"  # the prompt step's reply
    for step in ("ask", "check", "finish"):
        assert f"step '{step}' done" in result.stderr
    session = show("w1")
    assert [(m["role"], m["content"]) for m in session["messages"]] == [
        ("user", DRAFT),
        ("assistant", DRAFT),
    ]
    variables = session["variables"]
    assert variables["draft"] == DRAFT
    assert variables["checked"] == CHECKED  # a tool's JSON result is kept as a value
    assert variables["summary"] == f"Ada got {orjson.dumps(CHECKED).decode()}"
    assert variables["length"] == CHECKED  # a whole {{var}} keeps the value's type
    assert variables["user"] == "Ada"
    assert variables["topic"] == "tides"
    assert variables["_workflow"] == {
        "name": "article",
        "digest": variables["_workflow"]["digest"],
        "done": ["ask", "check", "finish"],
        "status": "done",
        "failed": None,
        "error": None,
    }


def test_the_three_formats_are_the_same_workflow(project, invoke, show):
    project.write_config('tools = ["plugin_pkg.tools:fail_unless"]\n')
    digests = []
    for number, fmt in enumerate(["toml", "yaml", "json"]):
        path = write_workflow(project, fmt)
        assert run(invoke, path, f"f{number}", "--var", "user=Ada").exit_code == 0
        digests.append(state(show, f"f{number}")["digest"])
    assert len(set(digests)) == 1


def test_json_summary(flow, invoke):
    result = run(invoke, flow, "w1", "--var", "user=Ada", "--json")
    assert result.exit_code == 0, result.stderr
    assert orjson.loads(result.stdout) == {
        "workflow": "article",
        "session_id": "w1",
        "ran": ["ask", "check", "finish"],
        "skipped": [],
        "outputs": {
            "ask": DRAFT,
            "check": CHECKED,
            "finish": {
                "summary": f"Ada got {orjson.dumps(CHECKED).decode()}",
                "length": CHECKED,
            },
        },
    }


def test_a_workflow_runs_in_an_existing_session(flow, invoke, chat, show):
    assert chat("w1", "earlier turn").exit_code == 0
    assert run(invoke, flow, "w1", "--var", "user=Ada").exit_code == 0
    assert [m["content"] for m in show("w1")["messages"]] == [
        "earlier turn",
        "earlier turn",
        DRAFT,
        DRAFT,
    ]


def test_var_overrides_the_files_vars(flow, invoke, show):
    result = run(invoke, flow, "w1", "--var", "user=Bo", "--var", "topic=waves")
    assert result.exit_code == 0, result.stderr
    assert show("w1")["variables"]["draft"] == "Write about waves for Bo"


def test_a_tool_step_uses_the_workflows_agent(project, invoke, show):
    project.write_config('[agents.helper]\ntools = ["plugin_pkg.tools:get_variable"]\n')
    steps = {
        "agent": "helper",
        "steps": [
            {"name": "read", "tool": "get_variable", "args": {"key": "{{k}}"}, "save_as": "r"},
            {"name": "say", "prompt": "got {{r}}"},
        ],
    }
    path = project.write("agent.json", json.dumps(steps))
    result = run(invoke, path, "w1", "--var", "k=city")
    assert result.exit_code == 0, result.stderr
    assert show("w1")["variables"]["r"] == "agent-override saw city"
    assert result.stdout == "got agent-override saw city\n"


def test_tool_step_arguments_keep_their_types(project, invoke, show):
    project.write_config('tools = ["plugin_pkg.tools:shout"]\n')
    steps = {
        "steps": [
            {"name": "loud", "tool": "shout", "args": {"text": "{{w}}", "times": "{{n}}"}},
            {"name": "keep", "tool": "shout", "args": {"text": "n={{n}}"}, "save_as": "kept"},
        ]
    }
    path = project.write("types.json", json.dumps(steps))
    result = run(invoke, path, "w1", "--var", "w=hey", "--var-json", "n=2", "--json")
    assert result.exit_code == 0, result.stderr
    assert orjson.loads(result.stdout)["outputs"] == {"loud": "HEY!HEY!", "keep": "N=2!"}


def test_a_prompt_step_can_call_a_tool_through_the_model(project, invoke, show):
    steps = {"steps": [{"name": "call", "prompt": '/tool get_variable {"key": "x"}'}]}
    path = project.write("call.json", json.dumps(steps))
    result = run(invoke, path, "w1", "--var-json", "x=7")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == 'get_variable returned: {"key":"x","value":7,"exists":true}\n'
    assert roles(show, "w1") == ["user", "assistant", "tool", "assistant"]


def test_render_unit():
    variables = {"n": 3, "s": "text", "d": {"a": [1]}}
    assert render("{{n}}", variables) == 3
    assert render(" {{ n }} ", variables) == 3
    assert render("n={{n}}, d={{d}}, s={{s}}", variables) == 'n=3, d={"a":[1]}, s=text'
    assert render({"k": ["{{s}}", 1, None]}, variables) == {"k": ["text", 1, None]}


# a failing step and --resume


def test_a_failing_tool_step_stops_names_the_step_and_resume_continues(flow, invoke, show):
    failed = run(invoke, flow, "w1", "--var", "user=Ada", "--var-json", "ok=false")
    assert failed.exit_code != 0
    assert failed.exit_code != 2  # the file is fine; the tool failed
    assert failed.stdout == DRAFT + "\n"  # the step before it did run
    error = stderr_lines(failed)[-1]
    assert "'check'" in error
    assert "(2 of 3)" in error
    assert "refused" in error
    assert "--resume" in error

    recorded = state(show, "w1")
    assert recorded["status"] == "failed"
    assert recorded["done"] == ["ask"]
    assert recorded["failed"] == "check"
    assert "refused" in recorded["error"]
    variables = show("w1")["variables"]
    assert variables["draft"] == DRAFT
    assert "checked" not in variables and "summary" not in variables
    assert roles(show, "w1") == ["user", "assistant"]

    resumed = run(invoke, flow, "w1", "--resume", "--var-json", "ok=true", "--json")
    assert resumed.exit_code == 0, resumed.stderr
    summary = orjson.loads(resumed.stdout)
    assert summary["skipped"] == ["ask"]
    assert summary["ran"] == ["check", "finish"]
    assert "step 'ask' done" not in resumed.stderr
    assert roles(show, "w1") == ["user", "assistant"]  # the prompt did not run twice
    assert show("w1")["metadata"]["message_count"] == 2
    done = state(show, "w1")
    assert done["status"] == "done"
    assert done["done"] == ["ask", "check", "finish"]
    assert done["failed"] is None and done["error"] is None
    assert show("w1")["variables"]["summary"].startswith("Ada got ")


def test_resume_twice_after_two_failures(project, invoke, show):
    """Fail at step 2, resume and fail at step 3, resume again: each step runs once."""
    project.write_config('tools = ["plugin_pkg.tools:fail_unless"]\n')
    finish = {"name": "finish", "set": {"summary": "{{closing}}"}}
    path = write_workflow(
        project, "json", {**THREE_STEPS, "steps": [*THREE_STEPS["steps"][:2], finish]}
    )
    first = run(invoke, path, "w1", "--var-json", "ok=false", "--var", "user=Ada")
    assert first.exit_code != 0
    assert "(2 of 3)" in first.stderr
    second = run(invoke, path, "w1", "--resume", "--var-json", "ok=true")
    assert second.exit_code == 2  # a missing variable is bad input
    assert "'finish'" in second.stderr
    assert "(3 of 3)" in second.stderr
    assert "'closing'" in second.stderr
    assert state(show, "w1")["done"] == ["ask", "check"]
    assert state(show, "w1")["failed"] == "finish"
    third = run(invoke, path, "w1", "--resume", "--var", "closing=bye", "--json")
    assert third.exit_code == 0, third.stderr
    assert orjson.loads(third.stdout)["ran"] == ["finish"]
    assert roles(show, "w1") == ["user", "assistant"]
    assert state(show, "w1")["status"] == "done"


def test_a_missing_variable_in_the_first_step_records_nothing_done(project, invoke, show):
    project.write_config('tools = ["plugin_pkg.tools:fail_unless"]\n')
    document = {**THREE_STEPS, "vars": {"ok": True}}  # no topic
    path = write_workflow(project, "json", document)
    failed = run(invoke, path, "w1", "--var", "user=Ada")
    assert failed.exit_code == 2
    assert failed.stdout == ""
    error = stderr_lines(failed)[-1]
    assert "'ask' (1 of 3)" in error
    assert "'topic'" in error
    assert state(show, "w1")["done"] == []
    assert roles(show, "w1") == []  # no turn was run
    resumed = run(invoke, path, "w1", "--resume", "--var", "topic=tides")
    assert resumed.exit_code == 0, resumed.stderr
    assert roles(show, "w1") == ["user", "assistant"]


def test_a_run_without_resume_starts_over(flow, invoke, show):
    assert run(invoke, flow, "w1", "--var-json", "ok=false", "--var", "user=Ada").exit_code != 0
    again = run(invoke, flow, "w1", "--var-json", "ok=true", "--json")
    assert again.exit_code == 0, again.stderr
    assert orjson.loads(again.stdout)["ran"] == ["ask", "check", "finish"]
    assert roles(show, "w1") == ["user", "assistant"] * 2


def test_a_failing_unknown_tool_step_stops(project, invoke, show):
    steps = {"steps": [{"name": "one", "set": {"a": 1}}, {"name": "two", "tool": "nope"}]}
    path = project.write("unknown.json", json.dumps(steps))
    result = run(invoke, path, "w1")
    assert result.exit_code != 0
    assert "'two' (2 of 2)" in result.stderr
    assert "unknown tool 'nope'" in result.stderr
    assert state(show, "w1")["done"] == ["one"]


def test_resume_with_nothing_to_resume_exits_2(flow, invoke):
    result = run(invoke, flow, "w1", "--resume", "--var", "user=Ada")
    assert result.exit_code == 2
    assert "'w1' has no failed workflow to resume" in result.stderr
    assert invoke("sessions", "show", "w1").exit_code == 2  # not even created


def test_resume_after_a_finished_run_exits_2(flow, invoke, show):
    assert run(invoke, flow, "w1", "--var", "user=Ada").exit_code == 0
    before = show("w1")
    result = run(invoke, flow, "w1", "--resume", "--var", "user=Bo")
    assert result.exit_code == 2
    assert "no failed workflow to resume" in result.stderr
    after = show("w1")
    assert after["messages"] == before["messages"]
    assert after["variables"] == before["variables"]


def test_resume_after_the_steps_changed_exits_2(flow, invoke, show):
    assert run(invoke, flow, "w1", "--var-json", "ok=false", "--var", "user=Ada").exit_code != 0
    before = show("w1")
    flow.write_text(TOML.replace('name = "finish"', 'name = "finish-renamed"'))
    result = run(invoke, flow, "w1", "--resume", "--var-json", "ok=true")
    assert result.exit_code == 2
    assert "changed" in result.stderr
    after = show("w1")
    assert after["messages"] == before["messages"]
    assert after["variables"] == before["variables"]  # not even the --var was set


def test_changing_only_the_vars_still_resumes(flow, invoke, show):
    assert run(invoke, flow, "w1", "--var-json", "ok=false", "--var", "user=Ada").exit_code != 0
    flow.write_text(TOML.replace('topic = "tides"', 'topic = "waves"'))
    result = run(invoke, flow, "w1", "--resume", "--var-json", "ok=true")
    assert result.exit_code == 0, result.stderr
    assert show("w1")["variables"]["draft"] == DRAFT  # the done step is not redone


def test_an_interrupted_run_can_be_resumed(project, invoke, show):
    project.write_config('tools = ["plugin_pkg.tools:interrupt_if"]\n')
    steps = {
        "steps": [
            {"name": "ask", "prompt": "hello"},
            {"name": "stop", "tool": "interrupt_if", "args": {"stop": "{{stop}}"}},
        ]
    }
    path = project.write("stop.json", json.dumps(steps))
    interrupted = run(invoke, path, "w1", "--var-json", "stop=true")
    assert interrupted.exit_code == 130
    assert state(show, "w1")["done"] == ["ask"]
    resumed = run(invoke, path, "w1", "--resume", "--var-json", "stop=false")
    assert resumed.exit_code == 0, resumed.stderr
    assert roles(show, "w1") == ["user", "assistant"]


def test_the_workflow_in_real_processes(flow, project, run_foliko):
    env = {"PYTHONPATH": project.pythonpath}
    failed = run_foliko(
        "workflow",
        "run",
        str(flow),
        "-s",
        "p1",
        "--var-json",
        "ok=false",
        "--var",
        "user=Ada",
        env=env,
    )
    assert failed.returncode not in (0, 2), failed.stderr
    assert b"'check' (2 of 3)" in failed.stderr
    resumed = run_foliko(
        "workflow",
        "run",
        str(flow),
        "-s",
        "p1",
        "--resume",
        "--var-json",
        "ok=true",
        "--json",
        env=env,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert orjson.loads(resumed.stdout)["skipped"] == ["ask"]
    shown = run_foliko("sessions", "show", "p1", "--json", env=env)
    assert len(orjson.loads(shown.stdout)["messages"]) == 2


# validate


@pytest.mark.parametrize("fmt", ["toml", "yaml", "json"])
def test_validate_ok(project, invoke, fmt):
    project.write_config('tools = ["plugin_pkg.tools:fail_unless"]\n')
    path = write_workflow(project, fmt)
    result = invoke("workflow", "validate", str(path), "--var", "user=Ada")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == f"{path}: ok, 3 steps\n"
    assert invoke("sessions", "list", "--json").stdout.strip() in ("", "[]")


def test_validate_says_one_step(project, invoke):
    path = project.write("one.json", '{"steps": [{"prompt": "hi"}]}')
    result = invoke("workflow", "validate", str(path))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == f"{path}: ok, 1 step\n"


def test_validate_reports_unknown_tools_and_unset_variables(project, invoke):
    """Was: both passed validation and failed only when the step ran."""
    path = write_workflow(project, "toml")
    result = invoke("workflow", "validate", str(path))
    assert result.exit_code == 2
    assert result.stdout == ""
    assert stderr_lines(result) == [
        f"foliko: error: {path}: step 1 ('ask'): the variable 'user' is not set by then; "
        "set it when running the workflow, in vars, or with an earlier step's save_as",
        f"foliko: error: {path}: step 2 ('check'): unknown tool 'fail_unless'; "
        "known: get_session_info, get_variable, set_variable",
        f"foliko: error: {path}: step 3 ('finish'): the variable 'user' is not set by then; "
        "set it when running the workflow, in vars, or with an earlier step's save_as",
    ]


def test_validate_counts_variables_set_by_earlier_steps(project, invoke):
    steps = {
        "steps": [
            {"name": "s", "set": {"a": 1}},
            {"name": "t", "tool": "get_variable", "args": {"key": "{{a}}"}, "save_as": "b"},
            {"name": "p", "prompt": "{{a}} {{b}} {{later}}"},
            {"name": "q", "set": {"later": 2}},
        ]
    }
    path = project.write("order.json", orjson.dumps(steps).decode())
    result = invoke("workflow", "validate", str(path))
    assert result.exit_code == 2
    assert stderr_lines(result) == [
        f"foliko: error: {path}: step 3 ('p'): the variable 'later' is not set by then; "
        "set it when running the workflow, in vars, or with an earlier step's save_as",
    ]


def test_a_step_without_a_name_is_named_by_its_position(project, invoke, show):
    path = project.write("anon.json", '{"steps": [{"prompt": "one"}, {"prompt": "two"}]}')
    result = invoke("workflow", "run", str(path), "-s", "w1", "--json")
    assert result.exit_code == 0, result.stderr
    assert orjson.loads(result.stdout)["ran"] == ["step 1", "step 2"]


def test_a_failed_tool_step_names_the_error_once(project, invoke):
    path = project.write("nope.json", '{"steps": [{"name": "t", "tool": "nosuch"}]}')
    result = invoke("workflow", "run", str(path), "-s", "w1")
    assert result.exit_code == 1
    [line] = stderr_lines(result)
    assert "failed: unknown tool 'nosuch'" in line
    assert "error: error:" not in line and "failed: error:" not in line


def test_run_takes_a_model_and_a_timeout(project, invoke):
    path = project.write("m.json", '{"steps": [{"name": "p", "prompt": "hi"}]}')
    bad = invoke("workflow", "run", str(path), "-s", "w1", "-m", "nosuch:model")
    assert bad.exit_code == 2 and "unknown model" in bad.stderr
    refused = invoke("workflow", "run", str(path), "-s", "w1", "--timeout", "nan")
    assert refused.exit_code == 2 and "--timeout" in refused.stderr
    ok = invoke("workflow", "run", str(path), "-s", "w1", "-m", "echo", "--timeout", "5")
    assert ok.exit_code == 0, ok.stderr


BAD_WORKFLOW = """
title = "unknown top-level key"

[[steps]]
name = "a"
prompt = "hi"

[[steps]]
name = "a"
set = { x = 1 }

[[steps]]
name = "both"
prompt = "p"
tool = "t"

[[steps]]
name = "neither"
save_as = "x"

[[steps]]
name = "extra"
prompt = "p"
colour = "red"

[[steps]]
name = "targs"
tool = "t"
args = "not a table"

[[steps]]
name = "pargs"
prompt = "p"
args = { a = 1 }

[[steps]]
prompt = "no name"

[[steps]]
name = "notext"
prompt = 5
"""


def test_validate_lists_every_problem_and_exits_2(project, invoke):
    path = project.write("bad.toml", BAD_WORKFLOW)
    result = invoke("workflow", "validate", str(path))
    assert result.exit_code == 2
    assert result.stdout == ""
    problems = stderr_lines(result)
    expected = [
        "unknown key 'title'",
        "step 2: the name 'a' is used twice",
        "step 3 ('both'): needs exactly one of prompt, tool, set",
        "step 4 ('neither'): needs exactly one of prompt, tool, set",
        "step 5 ('extra'): unknown key 'colour'",
        "step 6 ('targs'): 'args' is a table, for tool steps only",
        "step 7 ('pargs'): 'args' is a table, for tool steps only",
        "step 9 ('notext'): 'prompt' must be text",
    ]
    assert problems == [f"foliko: error: {path}: {problem}" for problem in expected]


def test_run_refuses_an_invalid_workflow_and_points_at_validate(project, invoke, show):
    path = project.write("bad.toml", BAD_WORKFLOW)
    result = invoke("workflow", "run", str(path), "-s", "w1")
    assert result.exit_code == 2
    lines = stderr_lines(result)
    assert len(lines) == 1
    assert "unknown key 'title'" in lines[0]
    assert "7 more" in lines[0]
    assert "workflow validate" in lines[0]
    assert invoke("sessions", "show", "w1").exit_code == 2  # nothing ran


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("empty.toml", "steps = []\n", "'steps' must be a non-empty list"),
        ("nosteps.json", '{"name": "x"}', "'steps' must be a non-empty list"),
        ("list.yaml", "- name: a\n  prompt: hi\n", "must hold a table/mapping"),
        ("vars.json", '{"vars": [1], "steps": [{"name": "a", "prompt": "p"}]}', "'vars'"),
        ("stepstr.json", '{"steps": ["just text"]}', "step 1: must be a table"),
        ("setlist.json", '{"steps": [{"name": "a", "set": [1]}]}', "'set' must be a table"),
        ("toolnum.json", '{"steps": [{"name": "a", "tool": 1}]}', "'tool' must be a tool name"),
        ("saveas.json", '{"steps": [{"name": "a", "prompt": "p", "save_as": 1}]}', "save_as"),
    ],
)
def test_validate_other_problems(project, invoke, name, text, problem):
    path = project.write(name, text)
    result = invoke("workflow", "validate", str(path))
    assert result.exit_code == 2
    assert problem in result.stderr
    assert str(path) in result.stderr


@pytest.mark.parametrize(
    ("name", "text", "kind"),
    [
        ("broken.toml", "[[steps]\nname = 'a'\n", "TOML"),
        ("broken.yaml", "steps:\n  - name: a\n    prompt: [unclosed\n", "YAML"),
        ("broken.yml", "steps: {a: b\n", "YAML"),
        ("broken.json", '{"steps": [', "JSON"),
    ],
)
@pytest.mark.parametrize("command", ["validate", "run"])
def test_an_invalid_file_exits_2_naming_it(project, invoke, name, text, kind, command):
    path = project.write(name, text)
    extra = ["-s", "w1"] if command == "run" else []
    result = invoke("workflow", command, str(path), *extra)
    assert result.exit_code == 2
    lines = stderr_lines(result)
    assert len(lines) == 1, lines
    assert str(path) in lines[0]
    assert f"not valid {kind}" in lines[0]


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_missing_file_exits_2(project, invoke, command):
    extra = ["-s", "w1"] if command == "run" else []
    result = invoke("workflow", command, "nowhere.toml", *extra)
    assert result.exit_code == 2
    assert "nowhere.toml" in result.stderr


def test_an_agent_with_a_skill_and_a_plugin_tool_runs_a_workflow(project, invoke, show):
    """Issue 8's 'done means': agent + skill + plugin tool in foliko.toml, one workflow."""
    project.write_config(
        '[agents.writer]\nsystem_prompt = "You write."\n'
        'tools = ["plugin_pkg.tools:shout"]\nskills = ["style"]\n'
    )
    project.skill("style", "House style", "Always shout the title.")
    steps = """
agent = "writer"

[[steps]]
name = "learn"
prompt = '/tool load_skill {"name": "style"}'
save_as = "skill"

[[steps]]
name = "title"
tool = "shout"
args = { text = "{{topic}}", times = 1 }
save_as = "title"

[[steps]]
name = "done"
set = { headline = "{{title}}" }
"""
    path = project.write("writer.toml", steps)
    result = run(invoke, path, "w1", "--var", "topic=tides", "--json")
    assert result.exit_code == 0, result.stderr
    outputs = orjson.loads(result.stdout)["outputs"]
    assert "Always shout the title." in outputs["learn"]
    assert outputs["title"] == "TIDES!"
    assert show("w1")["variables"]["headline"] == "TIDES!"
