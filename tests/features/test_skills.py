"""Skills: folders with a SKILL.md in ./.foliko/skills/ and the user config directory,
`skills list|show`, `load_skill` through the echo model, and malformed SKILL.md files
reported by path and line, skipped, never stopping a chat (SPEC F10; issue 8)."""

from __future__ import annotations

import orjson
import pytest

from .conftest import stderr_lines, tool_call, tool_messages

AGENT_ALL_SKILLS = '[agents.helper]\nsystem_prompt = "Use skills."\nskills = ["*"]\n'


def listed(invoke) -> dict[str, dict]:
    result = invoke("skills", "list", "--json")
    assert result.exit_code == 0, result.stderr
    return {row["name"]: row for row in orjson.loads(result.stdout)}


# discovery


def test_skills_are_found_in_the_project_and_the_user_config_dir(project, invoke):
    mine = project.skill("summarise", "Summarise a text", "Write three bullets.", where="user")
    here = project.skill(
        "review", "Review a diff", "Look for bugs.", extra="allowed-tools: [shout, whoami]\n"
    )
    assert mine.parent.parent == project.user_config.parent / "skills"
    skills = listed(invoke)
    assert skills == {
        "review": {
            "name": "review",
            "description": "Review a diff",
            "path": str(here),
            "allowed_tools": ["shout", "whoami"],
        },
        "summarise": {
            "name": "summarise",
            "description": "Summarise a text",
            "path": str(mine),
            "allowed_tools": [],
        },
    }


def test_the_project_skill_wins_a_name_clash(project, invoke):
    project.skill("greet", "Greet from the user dir", "USER BODY", where="user")
    here = project.skill("greet", "Greet from the project", "PROJECT BODY", folder="hello")
    skills = listed(invoke)
    assert list(skills) == ["greet"]
    assert skills["greet"]["path"] == str(here)
    assert skills["greet"]["description"] == "Greet from the project"
    shown = invoke("skills", "show", "greet")
    assert shown.exit_code == 0
    assert "PROJECT BODY" in shown.stdout
    assert "USER BODY" not in shown.stdout


def test_the_skill_name_comes_from_the_front_matter_not_the_folder(project, invoke):
    project.skill("tidy-up", "Tidy the workspace", folder="some-folder")
    assert list(listed(invoke)) == ["tidy-up"]


def test_no_skill_directories_is_an_empty_list(project, invoke):
    assert listed(invoke) == {}
    tsv = invoke("skills", "list")
    assert tsv.exit_code == 0
    assert tsv.stdout.splitlines() == ["name\tdescription\tpath"]


def test_front_matter_details(project, invoke):
    project.write_skill(
        "folded",
        "---\nname: folded\ndescription: >\n  A long description\n  over two lines\n"
        "allowed-tools: shout, whoami\n---\n\n# Title\n\nStep one.\n",
    )
    skill = listed(invoke)["folded"]
    assert skill["description"] == "A long description over two lines"
    assert skill["allowed_tools"] == ["shout", "whoami"]
    shown = invoke("skills", "show", "folded")
    assert shown.stdout == "# folded: A long description over two lines\n\n# Title\n\nStep one.\n"


def test_skills_show_unknown_exits_2(project, invoke):
    project.skill("greet", "Greet")
    result = invoke("skills", "show", "nope")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "'nope'" in result.stderr


# load_skill


@pytest.fixture
def with_skills(project):
    project.write_config(
        '[agents.helper]\nsystem_prompt = "Use skills."\nskills = ["review"]\n'
        '[agents.everything]\nskills = ["*"]\n'
    )
    project.skill(
        "review",
        "Review a diff",
        "1. Read the diff.\n2. List the bugs.",
        extra="allowed-tools:\n  - shout\n  - get_variable\n",
    )
    project.skill("greet", "Greet the user", "Say hi.", where="user")
    return project


def test_load_skill_returns_the_body_and_allowed_tools(with_skills, chat, show):
    result = chat("s1", tool_call("load_skill", {"name": "review"}), "--agent", "helper")
    assert result.exit_code == 0, result.stderr
    loaded = tool_messages(show("s1"), "load_skill")
    assert len(loaded) == 1
    assert not loaded[0].get("is_error")
    assert orjson.loads(loaded[0]["content"]) == {
        "name": "review",
        "instructions": "1. Read the diff.\n2. List the bugs.",
        "allowed_tools": ["shout", "get_variable"],
    }
    assert result.stdout.startswith("load_skill returned: {")
    assert "1. Read the diff." in result.stdout


def test_load_skill_only_offers_the_agents_skills(with_skills, chat, show):
    result = chat("s1", tool_call("load_skill", {"name": "greet"}), "--agent", "helper")
    assert result.exit_code == 1, (
        result.stderr
    )  # the /tool call the user typed failed (the turn is saved)
    loaded = tool_messages(show("s1"), "load_skill")[0]
    assert loaded["is_error"] is True
    assert "greet" in loaded["content"]
    assert "Say hi." not in loaded["content"]


def test_an_agent_with_every_skill_loads_a_user_skill(with_skills, chat, dry_run):
    system = dry_run("s1", "hi", "--agent", "everything")["system"]
    assert "- greet: Greet the user" in system
    assert "- review: Review a diff" in system
    result = chat("s1", tool_call("load_skill", {"name": "greet"}), "--agent", "everything")
    assert result.exit_code == 0, result.stderr
    assert '"instructions":"Say hi."' in result.stdout


def test_load_skill_is_not_offered_without_skills(with_skills, chat, show):
    result = chat("s1", tool_call("load_skill", {"name": "review"}))
    assert result.exit_code == 1, (
        result.stderr
    )  # the /tool call the user typed failed (the turn is saved)
    loaded = tool_messages(show("s1"), "load_skill")[0]
    assert loaded["is_error"] is True
    assert "unknown tool 'load_skill'" in loaded["content"]


# malformed SKILL.md

MALFORMED = {
    "no-front-matter": ("# Just a heading\n\nNo front matter.\n", 1, "no front matter"),
    "empty-file": ("", 1, "no front matter"),
    "unclosed": ("---\nname: unclosed\ndescription: never closed\nbody\n", 4, "not closed"),
    "bad-yaml-mapping": (
        "---\nname: bad\ndescription: fine\nbroken: a: b\n---\nbody\n",
        4,
        "invalid YAML",
    ),
    "bad-yaml-tab": (
        "---\nname: tab\ndescription: fine\nother: 1\n\tindented: with a tab\n---\nbody\n",
        5,
        "invalid YAML",
    ),
    "not-a-mapping": ("---\n- a\n- b\n---\nbody\n", 2, "mapping"),
    "missing-name": ("---\ndescription: no name here\n---\nbody\n", 2, "'name'"),
    "empty-name": ("---\nname: ''\ndescription: d\n---\nbody\n", 2, "'name'"),
    "missing-description": ("---\nname: nodesc\n---\nbody\n", 2, "'description'"),
    "allowed-tools-mapping": (
        "---\nallowed-tools: {shout: yes}\nname: at\ndescription: d\n---\nbody\n",
        2,
        "'allowed-tools' must be a list",
    ),
    "allowed-tools-numbers": (
        "---\nallowed-tools: [1, 2]\nname: at2\ndescription: d\n---\nbody\n",
        2,
        "'allowed-tools' must be a list",
    ),
    "not-utf8": (b"---\nname: \xff\xfe\ndescription: d\n---\n", 1, "cannot read"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_skill_is_reported_by_path_and_line_and_skipped(project, invoke, case):
    text, line, reason = MALFORMED[case]
    bad = project.write_skill(case, text)
    project.skill("good", "A good skill")
    result = invoke("skills", "list", "--json")
    assert result.exit_code == 0
    assert [row["name"] for row in orjson.loads(result.stdout)] == ["good"]
    reports = [entry for entry in stderr_lines(result) if str(bad) in entry]
    assert len(reports) == 1, result.stderr
    assert f"{bad}:{line}: " in reports[0]
    assert reason in reports[0]


@pytest.mark.parametrize("where", ["project", "user"])
def test_malformed_skills_never_stop_a_chat(project, chat, invoke, where):
    project.write_config(AGENT_ALL_SKILLS)
    bad_paths = [project.write_skill(case, MALFORMED[case][0], where) for case in MALFORMED]
    project.skill("good", "A good skill", "Good body.")
    for args in ([], ["--agent", "helper"]):
        result = chat("s1", "still here", *args)
        assert result.exit_code == 0, result.stderr
        assert result.stdout == "still here\n"
    reported = invoke("chat", "-s", "s1", "--agent", "helper", "--dry-run", "hi")
    assert reported.exit_code == 0
    system = orjson.loads(reported.stdout)["system"]
    assert "- good: A good skill" in system
    for path in bad_paths:
        assert sum(str(path) in line for line in stderr_lines(reported)) == 1, path
    loaded = chat("s1", tool_call("load_skill", {"name": "good"}), "--agent", "helper")
    assert loaded.exit_code == 0
    assert '"instructions":"Good body."' in loaded.stdout


def test_a_malformed_skill_does_not_hide_a_good_one_of_the_same_name(project, invoke):
    project.skill("greet", "The user's greeting", where="user")
    project.write_skill("greet", "---\nname: greet\ndescription: [broken\n---\n")
    skills = listed(invoke)
    assert skills["greet"]["description"] == "The user's greeting"


def test_a_bad_allowed_tools_is_reported_at_its_own_line(project, invoke):
    bad = project.write_skill(
        "late", "---\nname: late\ndescription: d\nallowed-tools: {a: 1}\n---\nbody\n"
    )
    result = invoke("skills", "list", "--json")
    assert f"{bad}:4: " in result.stderr


def test_two_skills_with_one_name_in_one_directory_keep_the_first_and_say_so(project, invoke):
    """Was: the later folder silently shadowed the earlier one."""
    first = project.skill("greet", "The first", "FIRST BODY", folder="a-greet")
    second = project.skill("greet", "The second", "SECOND BODY", folder="b-greet")
    result = invoke("skills", "list", "--json")
    assert result.exit_code == 0
    [row] = orjson.loads(result.stdout)
    assert row["path"] == str(first)
    [line] = stderr_lines(result)
    assert f"{second}:2:" in line
    assert f"already used by {first}, which is kept" in line


def test_a_project_skill_overriding_a_user_skill_is_reported(project, invoke):
    mine = project.skill("greet", "Mine", where="user")
    here = project.skill("greet", "Here")
    result = invoke("skills", "list", "--json")
    assert [row["path"] for row in orjson.loads(result.stdout)] == [str(here)]
    [line] = stderr_lines(result)
    assert f"{mine}:2:" in line and f"overridden by {here}" in line
