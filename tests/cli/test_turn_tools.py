"""Tools for one turn (issue 28, item 8): ``-T/--tool NAME`` offers a built-in, a plugin
or ``module:function``, ``--functions FILE.py`` (or Python code) every function the
file defines; both only in the turn they are given to, run in this process, and
a template may name them too."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
import yaml
from trusting import trust

from foliko_cli.engine.plugins import function_tools

from .test_usage_errors import one_error_line

TOOLS = '''
import os
from pathlib import Path  # imported: not offered


def forecast(city: str, days: int = 1) -> str:
    """The weather forecast for a city."""
    return f"sunny in {city} for {days} day(s)"


def whose_process() -> int:
    """The id of the process the tool runs in."""
    return os.getpid()


def _helper():
    return "private: not offered"


class Thing:  # a class: not offered
    pass
'''
BUILTINS = {"get_session_info", "get_variable", "set_variable"}


@pytest.fixture
def tools_file(tmp_path: Path) -> Path:
    path = tmp_path / "mytools.py"
    path.write_text(TOOLS)
    return path


def offered(invoke, *words: str) -> dict[str, dict]:
    result = invoke("chat", "-s", "s", "--dry-run", *words, "hi")
    assert result.exit_code == 0, result.stderr
    return {tool["name"]: tool for tool in orjson.loads(result.stdout)["tools"]}


def reply(invoke, *words: str, failed: bool = False) -> str:
    """The reply; ``failed``: the ``/tool`` call the user typed fails (exit 1)."""
    result = invoke("chat", "-s", "s", *words)
    assert result.exit_code == (1 if failed else 0), result.stderr
    return result.stdout


def test_functions_offers_what_the_file_defines_for_that_turn_only(invoke, tools_file):
    tools = offered(invoke, "--functions", str(tools_file))

    assert set(tools) == BUILTINS | {"forecast", "whose_process"}
    assert tools["forecast"] == {  # a dry run imports no code: the tool is named, unloaded
        "name": "forecast",
        "description": f"[functions file {str(tools_file)!r}: not loaded in a dry run]",
        "input_schema": {"type": "object"},
    }
    assert set(offered(invoke)) == BUILTINS
    assert [t.spec() for t in function_tools(str(tools_file)) if t.name == "forecast"] == [
        {
            "name": "forecast",
            "description": "The weather forecast for a city.",
            "input_schema": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer", "default": 1},
                },
                "required": ["city"],
                "additionalProperties": False,
            },
        }
    ]


def test_a_function_runs_in_this_process_and_only_in_its_turn(invoke, tools_file):
    first = reply(invoke, "--functions", "mytools.py", "/tool whose_process")
    later = reply(invoke, "/tool whose_process", failed=True)

    assert first == f"whose_process returned: {os.getpid()}\n"
    assert later == "whose_process returned: error: unknown tool 'whose_process'\n"


def test_functions_takes_python_code_as_llm_does(invoke):
    code = "def shout(text: str) -> str:\n    return text.upper()"

    assert reply(invoke, "--functions", code, '/tool shout {"text": "hey"}') == (
        "shout returned: HEY\n"
    )


def test_tool_offers_a_module_function_for_one_turn(invoke, tools_file):
    tools = offered(invoke, "-T", "mytools:forecast")
    answer = reply(invoke, "-T", "mytools:forecast", '/tool forecast {"city": "Lyon"}')

    assert set(tools) == BUILTINS | {"forecast"}
    assert answer == "forecast returned: sunny in Lyon for 1 day(s)\n"
    assert "forecast" not in offered(invoke)


def test_a_turn_tool_can_be_the_forced_choice(invoke, tools_file):
    result = invoke(
        "chat", "-s", "s", "--dry-run", "-T", "mytools:forecast", "-o", "tool_choice=forecast", "x"
    )
    assert result.exit_code == 0, result.stderr
    assert orjson.loads(result.stdout)["options"]["tool_choice"] == "forecast"


def test_a_template_keeps_its_tools_and_functions(invoke, tools_file, tmp_path):
    (tmp_path / "more.py").write_text("def extra() -> str:\n    return 'more'\n")
    saved = invoke("chat", "--save", "t", "-T", "get_variable", "--functions", "more.py", "hi")
    assert saved.exit_code == 0, saved.stderr
    path = Path(os.environ["FOLIKO_CONFIG"]).parent / "templates" / "t.yaml"
    kept = yaml.safe_load(path.read_text())
    (tmp_path / "elsewhere").mkdir()
    os.chdir(tmp_path / "elsewhere")

    tools = offered(invoke, "-t", "t", "--functions", str(tools_file))

    assert kept["tools"] == ["get_variable"]
    assert kept["functions"] == str(tmp_path / "more.py"), "kept whole, to work from anywhere"
    assert {"extra", "forecast", "whose_process"} <= set(tools)


def test_a_template_file_finds_its_functions_beside_it(invoke, tmp_path):
    folder = tmp_path / "kit"
    folder.mkdir()
    (folder / "kit_tools.py").write_text("def beside() -> str:\n    return 'here'\n")
    (folder / "kit.yaml").write_text("prompt: '/tool beside'\nfunctions: kit_tools.py\n")
    trust(folder / "kit.yaml")

    assert reply(invoke, "-t", str(folder / "kit.yaml")) == "beside returned: here\n"


@pytest.mark.parametrize(
    ("words", "fragments"),
    [
        (["-T", "nosuch"], ["unknown tool 'nosuch'", "(foliko tools list)"]),
        (["-T", "mytools:nosuch"], ["cannot load tool 'mytools:nosuch'"]),
        (["--functions", "missing.py"], ["cannot read functions file 'missing.py'"]),
        (["--functions", "broken.py"], ["'broken.py' does not compile (line 1: "]),
        (["--functions", "raises.py"], ["'raises.py' failed to import (RuntimeError: boom)"]),
        (["--functions", "exits.py"], ["'exits.py' failed to import (SystemExit: 3)"]),
        (["--functions", "empty.py"], ["'empty.py' defines no function to offer"]),
        (["--functions", "star.py"], ["star.py': spread takes *args"]),
        (["--functions", "nosuch_name"], ["the functions code failed to import (NameError"]),
        (
            ["-T", "mytools:forecast", "--functions", "mytools.py"],
            ["two tools for this turn are named 'forecast' (-T mytools:forecast and"],
        ),
    ],
)
def test_a_tool_that_cannot_be_offered_is_one_line_and_nothing_runs(
    invoke, tools_file, tmp_path, words, fragments
):
    (tmp_path / "broken.py").write_text("def broken(:\n")
    (tmp_path / "raises.py").write_text("raise RuntimeError('boom')\n")
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "empty.py").write_text("from os import getcwd\n_x = 1\n")
    (tmp_path / "star.py").write_text("def spread(*values):\n    return values\n")

    one_error_line(invoke("chat", "-s", "s", *words, "hi"), *fragments)
    assert invoke("sessions", "list", "-q").stdout == ""


def test_the_real_process_offers_a_file_of_functions(run_foliko, tools_file):
    result = run_foliko(
        "chat", "-s", "p", "--functions", str(tools_file), '/tool forecast {"city": "Oslo"}'
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout == b"forecast returned: sunny in Oslo for 1 day(s)\n"
