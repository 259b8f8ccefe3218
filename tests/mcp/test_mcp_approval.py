"""Tool approval: ``approve = "ask" | "always" | [names]`` per server, read-only
tools never asked about, --yes, a question on a terminal, a refusal in a pipe
(the model is told, stderr says how to approve). Approval guards the model's
choices (``chooser``, a model that calls tools of its own accord): a ``/tool``
call the user types runs without asking, and fails the command when it fails."""

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


def test_in_a_pipe_a_call_that_needs_approval_is_refused_and_stderr_says_how(
    configure, invoke, chooser
):
    configure()
    refused = invoke("chat", "-s", "s", "-m", chooser, NOTE)
    assert refused.exit_code == 0
    assert refused.stdout == REFUSED + "\n"
    assert refused.stderr.splitlines()[-1] == HOW
    shown = orjson.loads(invoke("sessions", "show", "s", "--json").stdout)
    (tool,) = [m for m in shown["messages"] if m["role"] == "tool"]
    assert tool["is_error"] is True


def test_a_read_only_tool_needs_no_approval(configure, invoke, chooser):
    configure()
    done = invoke("chat", "-s", "s", "-m", chooser, "/tool u__look")
    assert done.stdout == "u__look returned: looked\n"
    assert "refused" not in done.stderr


def test_yes_approves_every_call_of_the_run(configure, invoke, chooser):
    configure()
    done = invoke("chat", "-s", "s", "-m", chooser, "--yes", NOTE)
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
def test_the_config_approves_all_tools_or_those_listed(
    configure, invoke, chooser, approve, note, text
):
    configure(approve=approve)
    noted = invoke("chat", "-s", "s", "-m", chooser, NOTE).stdout
    echoed = invoke("chat", "-s", "s", "-m", chooser, '/tool u__text {"value": "hi"}').stdout
    assert noted == (f"u__note returned: {note}\n" if note else REFUSED + "\n")
    assert echoed.startswith(f"u__text returned: {text}\n" if text else "u__text returned: error")


def test_a_library_without_an_asker_refuses_and_notifies(tmp_path: Path, chooser):
    warnings: list[str] = []
    servers = {"u": asking_server()}
    with Foliko("memory", chooser, home=tmp_path, mcp_servers=servers, notify=warnings.append) as f:
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
def test_on_a_terminal_the_user_is_asked(configure, spawn, chooser, answer: str, reply: str):
    configure()
    child = spawn("chat", "-s", "s", "-m", chooser, "--no-stream", NOTE)
    child.expect_exact(QUESTION)
    child.expect_exact(ALLOW)
    child.sendline(answer)
    child.expect_exact(reply)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_always_on_a_terminal_approves_the_tool_for_the_rest_of_the_loop(configure, spawn, chooser):
    configure()
    child = spawn("chat", "-s", "s", "-m", chooser)
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


def test_ctrl_c_at_a_question_cancels_the_turn_and_the_next_line_is_the_loops(
    configure, spawn, chooser
):
    configure()
    child = spawn("chat", "-s", "s", "-m", chooser)
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


def test_a_call_the_user_types_runs_without_asking_also_in_a_pipe(configure, invoke):
    """The echo model's ``/tool`` is the user's own call: approval is not asked."""
    configure()
    done = invoke("chat", "-s", "s", NOTE)
    assert done.exit_code == 0, done.stderr
    assert done.stdout == "u__note returned: noted x\n"
    assert "refused" not in done.stderr


def test_a_call_the_user_types_is_not_asked_on_a_terminal_either(configure, spawn):
    configure()
    child = spawn("chat", "-s", "s", "--no-stream", NOTE)
    index = child.expect_exact(["u__note returned: noted x", ALLOW])
    assert index == 0, "asked"
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


@pytest.mark.parametrize(
    ("call", "name", "why"),
    [
        ('/tool u__fail {"why": "disk on fire"}', "u__fail", "Error executing tool fail"),
        ("/tool u__nothing", "u__nothing", "unknown tool 'u__nothing'"),
    ],
)
def test_a_call_the_user_types_that_fails_fails_the_command(configure, invoke, call, name, why):
    """The one thing asked did not happen: exit 1 and one line; the turn (the
    call and its error) is saved, as any turn is."""
    configure()
    failed = invoke("chat", "-s", "s", call)
    assert failed.exit_code == 1
    assert failed.stdout.startswith(f"{name} returned: error") and why in failed.stdout
    (line,) = [line for line in failed.stderr.splitlines() if "/tool" in line]
    assert line.startswith(f"foliko: error: the /tool call failed: {name}: error")
    assert why in line and line.endswith("send it again")
    shown = orjson.loads(invoke("sessions", "show", "s", "--json").stdout)
    (tool,) = [m for m in shown["messages"] if m["role"] == "tool"]
    assert tool["is_error"] is True
    as_json = invoke("chat", "-s", "s", "--json", call)
    assert as_json.exit_code == 1
    (failure,) = orjson.loads(as_json.stdout)["typed_failures"]
    assert failure.startswith(f"{name}: error") and why in failure
