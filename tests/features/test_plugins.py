"""Tool plugins: ``tools = ["package.module:function"]`` and entry points in group
``foliko.tools``; the JSON schema from type hints, the description from the
docstring, bad arguments as error results, opt-in only, `tools list` (SPEC F5)."""

from __future__ import annotations

import orjson
import pytest

from foliko_cli.engine.plugins import load_tool, tool_from_function

from .conftest import stderr_lines, tool_call, tool_messages

BUILTINS = ["get_session_info", "get_variable", "set_variable"]

TYPED_SCHEMA = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "the text to use"},
        "count": {"type": "integer", "description": "how many times"},
        "ratio": {"type": "number"},
        "flag": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "scores": {"type": "object", "additionalProperties": {"type": "integer"}},
        "mode": {"enum": ["fast", "slow"]},
        "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
        "either": {"anyOf": [{"type": "integer"}, {"type": "string"}], "default": 3},
        "label": {"type": "string", "default": "plain"},
    },
    "required": ["text", "count", "ratio", "flag", "tags", "scores", "mode"],
    "additionalProperties": False,
}

GOOD_ARGS = {
    "text": "hi",
    "count": 2,
    "ratio": 0.5,
    "flag": True,
    "tags": ["a", "b"],
    "scores": {"x": 1},
    "mode": "fast",
}


def tools_listed(invoke) -> list[dict]:
    result = invoke("tools", "list", "--json")
    assert result.exit_code == 0, result.stderr
    return orjson.loads(result.stdout)


def offered(dry_run, *args: str) -> dict[str, dict]:
    return {tool["name"]: tool for tool in dry_run("s1", "hi", *args)["tools"]}


# config tools: schema and description


def test_a_config_tool_gets_its_schema_from_type_hints(importable):
    typed = load_tool("plugin_pkg.tools:typed").spec()
    assert typed == {
        "name": "typed",
        "description": "Return every argument it was given.",
        "input_schema": TYPED_SCHEMA,
    }


def test_a_dry_run_shows_a_config_tool_without_importing_it(project, dry_run):
    project.write_config('tools = ["plugin_pkg.tools:typed"]\n')
    typed = offered(dry_run)["typed"]
    assert typed == {
        "name": "typed",
        "description": "[plugin_pkg.tools:typed: not loaded in a dry run]",
        "input_schema": {"type": "object"},
    }


def test_schema_details_from_the_docstring_and_signature(importable):
    from plugin_pkg import tools

    shout = tool_from_function(tools.shout)
    assert shout.description == "Shout TEXT, TIMES times."
    assert shout.input_schema["properties"] == {
        "text": {"type": "string", "description": "what to shout"},  # :param text:
        "times": {"type": "integer", "default": 1},
    }
    assert shout.input_schema["required"] == ["text"]
    whoami = tool_from_function(tools.whoami)
    assert whoami.input_schema["properties"] == {}  # `context` is not an argument
    bare = tool_from_function(tools.undocumented, name="renamed")
    assert bare.name == "renamed"
    assert bare.description == "Call undocumented."
    assert bare.input_schema["properties"] == {"x": {}}
    assert bare.input_schema["required"] == ["x"]


def test_a_config_tool_runs_through_the_echo_model(project, chat, show):
    project.write_config('tools = ["plugin_pkg.tools:typed"]\n')
    result = chat("s1", tool_call("typed", GOOD_ARGS))
    assert result.exit_code == 0, result.stderr
    [message] = tool_messages(show("s1"), "typed")
    assert not message.get("is_error")
    assert orjson.loads(message["content"]) == {
        **GOOD_ARGS,
        "limit": None,
        "either": 3,
        "label": "plain",
    }
    assert result.stdout.startswith('typed returned: {"text":"hi","count":2,')


def test_optional_and_union_arguments_accept_each_member(project, chat, show):
    project.write_config('tools = ["plugin_pkg.tools:typed"]\n')
    for extra in ({"limit": None, "either": "x"}, {"limit": 5, "either": 7}):
        assert chat("s1", tool_call("typed", {**GOOD_ARGS, **extra})).exit_code == 0
    results = [orjson.loads(m["content"]) for m in tool_messages(show("s1"), "typed")]
    assert [(r["limit"], r["either"]) for r in results] == [(None, "x"), (5, 7)]


def test_an_async_tool_is_awaited(project, chat):
    project.write_config('tools = ["plugin_pkg.tools:double_later"]\n')
    result = chat("s1", tool_call("double_later", {"n": 21}))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "double_later returned: 42\n"


@pytest.mark.parametrize(
    ("change", "names"),
    [
        ({"count": "two"}, ["count", "integer"]),
        ({"ratio": "half"}, ["ratio", "number"]),
        ({"flag": "yes"}, ["flag", "boolean"]),
        ({"count": True}, ["count", "integer"]),
        ({"tags": ["a", 3]}, ["tags/1", "string"]),
        ({"scores": {"x": "high"}}, ["scores/x", "integer"]),
        ({"mode": "medium"}, ["mode", "medium"]),
        ({"limit": "none"}, ["limit"]),
        ({"either": 1.5}, ["either"]),
        ({"unexpected": 1}, ["unexpected"]),
        ({"text": None}, ["text"]),
    ],
)
def test_bad_arguments_give_an_error_tool_result_naming_the_problem(
    project, chat, show, change, names
):
    project.write_config('tools = ["plugin_pkg.tools:typed"]\n')
    result = chat("s1", tool_call("typed", {**GOOD_ARGS, **change}))
    assert result.exit_code == 1, (
        result.stderr
    )  # the /tool call the user typed failed (the turn is saved)
    assert "the /tool call failed: typed: error: invalid arguments" in result.stderr
    [message] = tool_messages(show("s1"), "typed")
    assert message["is_error"] is True
    assert message["content"].startswith("error: invalid arguments for 'typed'")
    for name in names:
        assert name in message["content"]
    assert result.stdout.startswith("typed returned: error: invalid arguments")


def test_a_missing_required_argument_is_named(project, chat, show):
    project.write_config('tools = ["plugin_pkg.tools:typed"]\n')
    args = {k: v for k, v in GOOD_ARGS.items() if k != "mode"}
    assert chat("s1", tool_call("typed", args)).exit_code == 1
    [message] = tool_messages(show("s1"), "typed")
    assert message["is_error"] is True
    assert "'mode' is a required property" in message["content"]


def test_arguments_that_are_not_an_object_are_an_error_result(project, chat, show):
    project.write_config('tools = ["plugin_pkg.tools:shout"]\n')
    assert chat("s1", "/tool shout [1, 2]").exit_code == 1
    [message] = tool_messages(show("s1"), "shout")
    assert message["is_error"] is True
    assert "must be a JSON object" in message["content"]


def test_a_tool_that_raises_gives_an_error_result(project, chat, show):
    project.write_config('tools = ["plugin_pkg.tools:fail_unless"]\n')
    result = chat("s1", tool_call("fail_unless", {"text": "x", "ok": False}))
    assert result.exit_code == 1, (
        result.stderr
    )  # the /tool call the user typed failed (the turn is saved)
    [message] = tool_messages(show("s1"), "fail_unless")
    assert message["is_error"] is True
    assert "ValueError" in message["content"]
    assert "refused 'x'" in message["content"]


# opt-in and tools list


def test_only_the_builtins_are_on_by_default(project, invoke, dry_run):
    rows = tools_listed(invoke)
    assert [(r["name"], r["source"], r["enabled"]) for r in rows] == [
        (name, "built-in", True) for name in BUILTINS
    ]
    assert sorted(offered(dry_run)) == BUILTINS


def test_tools_list_shows_config_tools(project, invoke):
    project.write_config('tools = ["plugin_pkg.tools:shout", "get_variable"]\n')
    rows = tools_listed(invoke)
    assert rows[-1] == {
        "name": "shout",
        "source": "plugin_pkg.tools:shout",
        "enabled": True,
        "description": "Shout TEXT, TIMES times.",
    }
    assert [r["name"] for r in rows] == [*BUILTINS, "shout"]
    tsv = invoke("tools", "list").stdout.splitlines()
    assert tsv[0] == "name\tsource\tenabled\tdescription"
    assert "shout\tplugin_pkg.tools:shout\ttrue\tShout TEXT, TIMES times." in tsv


def test_tools_list_shows_the_tool_in_effect_once(project, invoke, chat):
    project.write_config('tools = ["plugin_pkg.tools:get_variable"]\n')
    ran = chat("s1", tool_call("get_variable", {"key": "a"}))
    assert ran.stdout == "get_variable returned: agent-override saw a\n"
    rows = [r for r in tools_listed(invoke) if r["name"] == "get_variable" and r["enabled"]]
    assert [r["source"] for r in rows] == ["plugin_pkg.tools:get_variable"]


def test_config_tools_may_be_a_comma_separated_string(project, chat):
    project.write_config('tools = "plugin_pkg.tools:shout, plugin_pkg.tools:double_later"\n')
    assert chat("s1", tool_call("shout", {"text": "a"})).stdout == "shout returned: A!\n"
    assert chat("s1", tool_call("double_later", {"n": 1})).stdout == "double_later returned: 2\n"


def test_user_config_tools_are_enabled_too(project, chat):
    project.write_user_config('tools = ["plugin_pkg.tools:shout"]\n')
    assert chat("s1", tool_call("shout", {"text": "u"})).stdout == "shout returned: U!\n"


# entry points


def test_an_entry_point_tool_is_listed_but_off_until_enabled(project, invoke, chat, show):
    project.entry_point("yell", "plugin_pkg.tools:shout")
    rows = tools_listed(invoke)
    assert rows[-1] == {
        "name": "yell",
        "source": "plugin plugin_pkg.tools:shout",
        "enabled": False,
        "description": "",
    }
    table = invoke("tools", "list", "--format", "table")
    assert any(
        line.split()[:2] == ["yell", "plugin"] and "no" in line.split()
        for line in table.stdout.splitlines()
    )
    assert "tools = [...]" in table.stderr

    refused = chat("s1", tool_call("yell", {"text": "hi"}))
    assert refused.exit_code == 1  # the /tool call the user typed failed (the turn is saved)
    [message] = tool_messages(show("s1"), "yell")
    assert message["is_error"] is True
    assert "unknown tool 'yell'" in message["content"]

    project.write_config('tools = ["yell"]\n')
    enabled = [r for r in tools_listed(invoke) if r["name"] == "yell"]
    assert enabled == [
        {
            "name": "yell",
            "source": "yell",
            "enabled": True,
            "description": "Shout TEXT, TIMES times.",
        }
    ]
    ran = chat("s1", tool_call("yell", {"text": "hi", "times": 2}))
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout == "yell returned: HI!HI!\n"


def test_an_entry_point_tool_can_be_enabled_for_one_agent(project, chat, show):
    project.entry_point("yell", "plugin_pkg.tools:shout")
    project.write_config('[agents.loud]\ntools = ["yell"]\n')
    assert chat("s1", tool_call("yell", {"text": "a"}), "--agent", "loud").exit_code == 0
    assert chat("s1", tool_call("yell", {"text": "b"})).exit_code == 1  # not enabled: unknown
    results = tool_messages(show("s1"), "yell")
    assert [m["content"] for m in results] == ["A!", "error: unknown tool 'yell'"]


def test_an_entry_point_schema_comes_from_its_type_hints(project, dry_run):
    project.entry_point("check_types", "plugin_pkg.tools:typed")
    assert load_tool("check_types").input_schema == TYPED_SCHEMA
    project.write_config('tools = ["check_types"]\n')
    stand_in = offered(dry_run)["check_types"]
    assert stand_in["description"] == "[plugin plugin_pkg.tools:typed: not loaded in a dry run]"


def test_an_entry_point_tool_in_a_real_process(project, run_foliko):
    project.entry_point("yell", "plugin_pkg.tools:shout")
    project.write_config('tools = ["yell"]\n')
    env = {"PYTHONPATH": project.pythonpath}
    listed = run_foliko("tools", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert {"name": "yell", "enabled": True}.items() <= orjson.loads(listed.stdout)[-1].items()
    result = run_foliko("chat", "-s", "p1", tool_call("yell", {"text": "real"}), env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"yell returned: REAL!\n"


def test_an_entry_point_that_fails_to_load_exits_2(project, invoke):
    project.entry_point("ghost", "plugin_pkg.no_such_module:f")
    assert tools_listed(invoke)[-1]["enabled"] is False  # listing does not load it
    project.write_config('tools = ["ghost"]\n')
    result = invoke("chat", "-s", "s1", "hi")
    assert result.exit_code == 2
    lines = stderr_lines(result)
    assert len(lines) == 1, lines
    assert "'ghost'" in lines[0]


# bad references


@pytest.mark.parametrize(
    ("reference", "named"),
    [
        ("no_such_tool", "unknown tool 'no_such_tool'"),
        ("plugin_pkg.no_such_module:f", "plugin_pkg.no_such_module"),
        ("plugin_pkg.tools:missing", "missing"),
        ("plugin_pkg.tools:NOT_CALLABLE", "NOT_CALLABLE"),
        ("no_such_package.mod:f", "no_such_package"),
    ],
)
@pytest.mark.parametrize("command", [["chat", "-s", "s1", "hi"], ["tools", "list"]])
def test_an_unknown_tool_reference_exits_2_with_one_line(
    project, invoke, reference, named, command
):
    project.write_config(f'tools = ["{reference}"]\n')
    result = invoke(*command)
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = stderr_lines(result)
    assert len(lines) == 1, lines
    assert named in lines[0]
    assert invoke("sessions", "show", "s1").exit_code == 2  # nothing saved


BROKEN_MODULES = {
    "syntax_error": "def f(:\n    pass\n",
    "raises_on_import": "raise RuntimeError('boom at import')\n",
    "bad_hint": "def f(x: 'NoSuchType') -> str:\n    return x\n",
}


@pytest.mark.parametrize("module", sorted(BROKEN_MODULES))
def test_a_broken_tool_module_exits_2_with_one_line(project, run_foliko, module):
    (project.site / f"{module}.py").write_text(BROKEN_MODULES[module])
    project.write_config(f'tools = ["{module}:f"]\n')
    result = run_foliko("chat", "-s", "s1", "hi", env={"PYTHONPATH": project.pythonpath})
    lines = result.stderr.decode().strip().splitlines()
    assert result.returncode == 2, lines
    assert len(lines) == 1, lines
    assert f"{module}:f" in lines[0]


NOT_TOOLS = {
    "a_class": ("class Tool:\n    def __init__(self, text: str):\n        self.text = text\n",
                "is a class"),
    "star_args": ("def f(*args):\n    return args\n", "takes *args"),
    "star_args_after": ("def f(text: str, *rest: str):\n    return text\n", "takes *args"),
}  # fmt: skip


@pytest.mark.parametrize("module", sorted(NOT_TOOLS))
@pytest.mark.parametrize("command", [["chat", "-s", "s1", "hi"], ["tools", "list"]])
def test_a_class_or_a_star_args_function_is_refused_as_a_tool(project, invoke, module, command):
    """Was: both were accepted, and failed (or got no arguments) when the model called them."""
    text, reason = NOT_TOOLS[module]
    (project.site / f"{module}.py").write_text(text)
    attribute = "Tool" if module == "a_class" else "f"
    project.write_config(f'tools = ["{module}:{attribute}"]\n')
    result = invoke(*command)
    assert result.exit_code == 2
    assert result.stdout == ""
    [line] = stderr_lines(result)
    assert f"{module}:{attribute}" in line and reason in line
    assert invoke("sessions", "show", "s1").exit_code == 2


def test_a_keyword_only_function_is_still_a_tool(project, invoke):
    (project.site / "kwonly.py").write_text(
        "def f(*, text: str, **extra) -> str:\n    return text\n"
    )
    project.write_config('tools = ["kwonly:f"]\n')
    result = invoke("tools", "list", "-q")
    assert result.exit_code == 0, result.stderr
    assert "f" in result.stdout.split()
