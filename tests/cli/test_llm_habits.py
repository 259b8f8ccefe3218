"""llm's habits, as llm defines them: -x/--xl (a code block of the reply, in chat,
templates and sessions show), -r (the last reply), llm's option and command
names answered with foliko's."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import yaml

from foliko_cli import Foliko
from foliko_cli.messages.fences import code_block

CODE = "Try this:\n```python\nprint('first')\n```\nor this:\n````sh\nls -la\n````\nDone."


def one_line_error(result, *fragments: str, code: int = 2) -> None:
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("foliko: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


# the code block, as llm finds it

SAMPLES = [
    CODE,
    "no fence at all",
    "```\n```",
    "```js\nlet a = 1;\n```  \ntrailing spaces after the fence",
    "````md\n```\ninner\n```\n````",
    "text ```python\nnot at a line start\n```",
    "```python\nunclosed",
    "```\nfirst\n```\n```\nsecond\n```",
]


@pytest.mark.parametrize("text", SAMPLES)
def test_the_block_is_llms(text):
    llm_utils = pytest.importorskip("llm.utils")
    for last in (False, True):
        theirs = llm_utils.extract_fenced_code_block(text, last=last)
        ours = code_block(text, last=last)
        # llm keeps the line break before the closing fence; foliko prints it once
        assert ours == (None if theirs is None else theirs.removesuffix("\n"))


def test_an_info_string_llm_misses_is_still_a_fence():
    assert code_block("```c++\nint x;\n```") == "int x;"
    assert code_block('``` python title="x.py"\nx = 1\n```') == "x = 1"


# chat -x / --xl


def test_chat_extract_prints_the_first_or_last_block_and_stores_the_reply_whole(invoke, show):
    first = invoke("chat", "-s", "x", "-x", CODE)
    assert first.exit_code == 0 and first.stdout == "print('first')\n"
    last = invoke("chat", "-s", "x", "--extract-last", CODE)
    assert last.exit_code == 0 and last.stdout == "ls -la\n"
    assert invoke("chat", "-s", "x", "--xl", "--stream", CODE).stdout == "ls -la\n"
    replies = [m["content"] for m in show("x")["messages"] if m["role"] == "assistant"]
    assert replies == [CODE, CODE, CODE]


def test_chat_extract_without_a_block_prints_the_whole_reply(invoke):
    assert invoke("chat", "-s", "x", "-x", "just words").stdout == "just words\n"


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [(["--json"], "--json the whole turn"), (["--dry-run"], "--dry-run gets no reply")],
)
def test_chat_extract_with_json_or_dry_run_is_exit_2_and_runs_nothing(invoke, flags, fragment):
    result = invoke("chat", "-s", "x", "-x", *flags, CODE)
    assert result.exit_code == 2 and fragment in result.stderr
    assert invoke("sessions", "list", "-q").stdout == ""


# templates: extract and extract_last


def test_save_keeps_extract_and_the_template_applies_it(invoke, foliko_home, tmp_path):
    saved = invoke("chat", "--save", "code", "--xl", "Answer: $input")
    assert saved.exit_code == 0, saved.stderr
    shown = orjson.loads(invoke("templates", "show", "code", "--json").stdout)
    assert shown["extract_last"] is True and "extract" not in shown
    assert invoke("chat", "-s", "t", "-t", "code", CODE).stdout == "ls -la\n"
    assert invoke("chat", "-s", "t", "-t", "code", "-x", CODE).stdout == "print('first')\n"
    whole = orjson.loads(invoke("chat", "-s", "t", "-t", "code", "--json", CODE).stdout)
    assert whole["message"] == f"Answer: {CODE}"  # --json prints the whole turn


def test_llms_template_with_extract_works_and_llm_reads_foliko_s(invoke, tmp_path):
    llm_templates = pytest.importorskip("llm.templates")
    template = tmp_path / "t.yaml"
    template.write_text("prompt: $input\nextract: true\n")
    assert invoke("chat", "-s", "t", "-t", str(template), CODE).stdout == "print('first')\n"
    invoke("chat", "--save", "mine", "-x", "Answer: $input")
    path = invoke("templates", "show", "mine", "--json")
    data = yaml.safe_load(Path(orjson.loads(path.stdout)["path"]).read_text())
    assert llm_templates.Template(name="mine", **data).extract is True


def test_a_template_extract_that_is_not_true_or_false_is_exit_2(invoke, tmp_path):
    template = tmp_path / "t.yaml"
    template.write_text("prompt: $input\nextract: 'yes'\n")
    one_line_error(invoke("chat", "-s", "t", "-t", str(template), "hi"), "extract must be true")


# sessions show -r / -x / --xl


def test_show_response_prints_the_last_reply_of_a_session_or_the_latest(invoke):
    invoke("chat", "-s", "older", "old reply")
    invoke("chat", "-s", "newer", CODE)
    invoke("chat", "-s", "older", "latest reply")
    assert invoke("sessions", "show", "newer", "-r").stdout == CODE + "\n"
    assert invoke("sessions", "show", "-r").stdout == "latest reply\n"
    assert invoke("sessions", "show", "-s", "newer", "--response").stdout == CODE + "\n"
    assert invoke("sessions", "show", "newer", "-x").stdout == "print('first')\n"
    assert invoke("sessions", "show", "newer", "--xl").stdout == "ls -la\n"
    assert invoke("sessions", "show", "older", "-x").stdout == "latest reply\n"


def test_show_response_reads_the_end_of_the_history(invoke, monkeypatch):
    invoke("chat", "-s", "s", "first")
    invoke("chat", "-s", "s", "last")

    def whole(*args):
        raise AssertionError("show -r loaded the whole history")

    monkeypatch.setattr("foliko_cli.storage.sqlite.SQLiteStorage.load", whole)
    assert invoke("sessions", "show", "s", "-r").stdout == "last\n"


def test_show_response_as_json_is_the_stored_message(invoke, show):
    invoke("chat", "-s", "s", "hi")
    reply = orjson.loads(invoke("sessions", "show", "s", "-r", "--json").stdout)
    assert reply == show("s")["messages"][-1]


def test_show_response_skips_a_tool_call_without_text(invoke):
    invoke("chat", "-s", "s", "/tool get_session_info {}")
    shown = invoke("sessions", "show", "s", "-r").stdout
    assert shown.startswith("get_session_info returned: ")


@pytest.mark.parametrize(
    ("words", "fragment"),
    [
        (["s", "-r", "--tail", "2"], "drop --tail"),
        (["s", "-r", "--compactions"], "drop --compactions"),
        (["s", "other", "-r"], "name one session"),
        (["s", "-x", "--json"], "give one"),
        (["nosuch", "-r"], "session 'nosuch' not found"),
    ],
)
def test_show_response_refuses_what_it_cannot_do(invoke, words, fragment):
    invoke("chat", "-s", "s", "hi")
    one_line_error(invoke("sessions", "show", *words), fragment)


def test_show_response_of_a_session_without_a_reply_or_of_no_session_is_exit_2(invoke):
    one_line_error(invoke("sessions", "show", "-r"), "there is no session")
    with Foliko() as foliko:
        foliko.create_session("empty")
    one_line_error(invoke("sessions", "show", "empty", "-r"), "'empty' has no reply yet")


# llm's names


@pytest.mark.parametrize(
    ("words", "fragment"),
    [
        (["chat", "--cid", "abc", "hi"], "'--cid' (llm's); here it is -s/--session ID"),
        (["chat", "--conversation", "abc", "hi"], "here it is -s/--session ID"),
        (["chat", "-d", "logs.db", "hi"], "here it is --storage sqlite:////PATH.db"),
        (["chat", "-s", "s", "--key", "sk-x", "hi"], "or a stored key: foliko keys set"),
        (["chat", "-s", "s", "--at", "a.png", "image/png", "hi"], "-a/--attach"),
        (["chat", "-s", "s", "--cl", "5", "hi"], "max_steps in the config"),
        (["sessions", "show", "s", "-n", "3"], "'-n' (llm's); here it is --tail N"),
        (["sessions", "show", "s", "--count", "3"], "here it is --tail N"),
        (["sessions", "list", "--count", "3"], "here it is --limit N"),
        (["sessions", "show", "-c"], "-r without one takes the latest session"),
        (["sessions", "show", "-q", "kubelet"], "here it is 'foliko sessions search QUERY'"),
        (["logs", "-r"], "'logs' (llm's); here it is 'foliko sessions list'"),
        (["prompt", "hi"], "here it is 'foliko chat -s ID MESSAGE'"),
        (["aliases"], "a [models.NAME] alias"),
    ],
)
def test_an_llm_name_gets_foliko_s(invoke, words, fragment):
    result = invoke(*words)
    one_line_error(result, fragment, "see '")
    assert "sk-x" not in result.stderr
    assert invoke("sessions", "list", "-q").stdout == ""


def test_other_unknown_options_keep_their_suggestions(invoke):
    one_line_error(invoke("chat", "--sav", "x"), "no such option", "did you mean")
    one_line_error(invoke("sessions", "list", "--cid", "x"), "no such option '--cid'")
