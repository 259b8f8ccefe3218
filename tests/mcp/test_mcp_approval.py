"""Tool approval: ``approve = "ask" | "always" | [names]`` per server, read-only
tools never asked about, --yes, a question on a terminal, a refusal in a pipe
(the model is told, stderr says how to approve)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pexpect
import pytest
from mcp_support import asking_server, write_config

from foliko_cli.service.facade import Foliko

NOTE = '/tool u__note {"text": "x"}'
REFUSED = (
    "u__note returned: error: u__note needs the user's approval and there was no one to "
    "ask; it was not run (the user can approve it in foliko's config)"
)
HOW = (
    "foliko: MCP tool 'u__note' was refused: its calls need approval and stdin is not a "
    'terminal to ask on; pass --yes, or set approve = "always" (or approve = ["note"]) in '
    "[mcp_servers.u]"
)


@pytest.fixture
def configure(tmp_path: Path):
    def write(**options: object) -> None:
        write_config(tmp_path / "foliko.toml", {"u": asking_server(**options)})

    return write


def test_in_a_pipe_a_call_that_needs_approval_is_refused_and_stderr_says_how(configure, invoke):
    configure()
    refused = invoke("chat", "-s", "s", NOTE)
    assert refused.exit_code == 0
    assert refused.stdout == REFUSED + "\n"
    assert refused.stderr.splitlines()[-1] == HOW
    shown = orjson.loads(invoke("sessions", "show", "s", "--json").stdout)
    (tool,) = [m for m in shown["messages"] if m["role"] == "tool"]
    assert tool["is_error"] is True


def test_a_read_only_tool_needs_no_approval(configure, invoke):
    configure()
    done = invoke("chat", "-s", "s", "/tool u__look")
    assert done.stdout == "u__look returned: looked\n"
    assert "refused" not in done.stderr


def test_yes_approves_every_call_of_the_run(configure, invoke):
    configure()
    done = invoke("chat", "-s", "s", "--yes", NOTE)
    assert done.stdout == "u__note returned: noted x\n"
    assert "refused" not in done.stderr


@pytest.mark.parametrize(
    ("approve", "note", "text"),
    [
        ("always", "noted x", "hi"),
        (["note"], "noted x", None),
        (["text"], None, "hi"),
    ],
)
def test_the_config_approves_all_tools_or_those_listed(configure, invoke, approve, note, text):
    configure(approve=approve)
    noted = invoke("chat", "-s", "s", NOTE).stdout
    echoed = invoke("chat", "-s", "s", '/tool u__text {"value": "hi"}').stdout
    assert noted == (f"u__note returned: {note}\n" if note else REFUSED + "\n")
    assert echoed.startswith(f"u__text returned: {text}\n" if text else "u__text returned: error")


def test_a_library_without_an_asker_refuses_and_notifies(tmp_path: Path):
    warnings: list[str] = []
    servers = {"u": asking_server()}
    with Foliko("memory", "echo", home=tmp_path, mcp_servers=servers, notify=warnings.append) as f:
        assert f.chat("s", NOTE).message == REFUSED
        assert f.chat("s", NOTE).message == REFUSED
    assert warnings == [
        "MCP tool 'u__note' was refused: it needs approval and there is no one to ask; approve "
        'it with approve = "always" or approve = ["note"] in [mcp_servers.u]'
    ]


QUESTION = 'MCP server \'u\' wants to run note {"text":"x"}'
ALLOW = "allow it? [y]es, [N]o, [a]lways (this tool, this run): "


@pytest.mark.parametrize(
    ("answer", "reply"),
    [
        ("y", "u__note returned: noted x"),
        ("n", "u__note returned: error: the user did not approve this call of u__note; it was "),
        ("", "u__note returned: error: the user did not approve this call of u__note; it was "),
    ],
)
def test_on_a_terminal_the_user_is_asked(configure, spawn, answer: str, reply: str):
    configure()
    child = spawn("chat", "-s", "s", "--no-stream", NOTE)
    child.expect_exact(QUESTION)
    child.expect_exact(ALLOW)
    child.sendline(answer)
    child.expect_exact(reply)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_always_on_a_terminal_approves_the_tool_for_the_rest_of_the_loop(configure, spawn):
    configure()
    child = spawn("chat", "-s", "s")
    child.expect_exact("> ")
    child.sendline(NOTE)
    child.expect_exact(ALLOW)
    child.sendline("a")
    child.expect_exact("u__note returned: noted x")
    child.expect_exact("> ")
    child.sendline('/tool u__note {"text": "y"}')
    index = child.expect_exact(["u__note returned: noted y", ALLOW])
    assert index == 0, "asked again"
    child.expect_exact("> ")
    child.sendeof()
    child.expect(pexpect.EOF)


def test_ctrl_c_at_a_question_cancels_the_turn_and_the_next_line_is_the_loops(configure, spawn):
    configure()
    child = spawn("chat", "-s", "s")
    child.expect_exact("> ")
    child.sendline(NOTE)
    child.expect_exact(ALLOW)
    child.sendintr()
    child.expect_exact("turn cancelled; nothing saved")
    child.expect_exact("> ")
    child.sendline("hello again")
    child.expect_exact("hello again")
    child.expect_exact("> ")
    child.sendeof()
    child.expect(pexpect.EOF)
