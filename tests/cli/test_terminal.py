"""foliko on a real pseudo-terminal: the loop's line editing, paste, commands and
history; tables that fit the width; the pager; colour; an error after a partial
streamed reply starts on its own line."""

from __future__ import annotations

import os
import re
import stat
import sys
import threading
from pathlib import Path

import orjson
import pytest

from .children import default_sigint

pexpect = pytest.importorskip("pexpect")

FOLIKO = Path(sys.executable).with_name("foliko")
PROMPT = "> "
WAIT = 30
ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def plain(text: str) -> str:
    return ESCAPE.sub("", text).replace("\r", "")


@pytest.fixture
def spawn(foliko_home):
    children = []

    def start(
        *args: str, env: dict[str, str] | None = None, columns: int = 200, echo: bool = False
    ):
        """foliko on a pty; ``echo`` as a user's terminal has it (readline then redraws)."""
        environment = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
        environment.update(FOLIKO_HOME=str(foliko_home), FOLIKO_MODEL="echo", TERM="xterm")
        environment.update(env or {})
        child = pexpect.spawn(
            str(FOLIKO),
            list(args),
            env=environment,
            encoding="utf-8",
            echo=echo,
            timeout=WAIT,
            dimensions=(24, columns),
            preexec_fn=default_sigint,
        )
        children.append(child)
        return child

    yield start
    for child in children:
        child.close(force=True)


def ended(child) -> str:
    child.expect(pexpect.EOF)
    child.close()
    return plain(child.before)


def stored(invoke, session_id: str) -> list[tuple[str, str]]:
    result = invoke("sessions", "show", session_id, "--json")
    assert result.exit_code == 0, result.stderr
    return [(m["role"], m["content"]) for m in orjson.loads(result.stdout)["messages"]]


# the interactive loop


def test_a_bracketed_paste_of_several_lines_is_one_message(spawn, invoke):
    child = spawn("chat", "-s", "live")
    child.expect_exact(PROMPT)
    child.send("\x1b[200~first line\nsecond line\nthird\x1b[201~\r")
    child.expect_exact(PROMPT)
    child.sendeof()
    ended(child)
    assert stored(invoke, "live") == [
        ("user", "first line\nsecond line\nthird"),
        ("assistant", "first line\nsecond line\nthird"),
    ]


@pytest.mark.parametrize(("start", "end"), [("/multi", "/end"), ('"""', '"""')])
def test_multi_line_input_by_hand(spawn, invoke, start, end):
    child = spawn("chat", "-s", "live")
    child.expect_exact(PROMPT)
    child.sendline(start)
    for line in ("one", "", "two"):
        child.expect_exact("... ")
        child.sendline(line)
    child.expect_exact("... ")
    child.sendline(end)
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    ended(child)
    assert child.exitstatus == 0
    assert stored(invoke, "live") == [("user", "one\n\ntwo"), ("assistant", "one\n\ntwo")]


def test_help_and_exit(spawn, invoke):
    child = spawn("chat", "-s", "live")
    child.expect_exact(PROMPT)
    child.sendline("/help")
    child.expect_exact("/multi")
    child.expect_exact(PROMPT)
    child.sendline("/nosuch")
    child.expect_exact("unknown command /nosuch")
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    ended(child)
    assert child.exitstatus == 0
    assert invoke("sessions", "show", "live").exit_code == 2  # no turn was run


def test_history_is_kept_in_foliko_home_with_mode_0600_and_recalled(spawn, invoke, foliko_home):
    child = spawn("chat", "-s", "live")
    child.expect_exact(PROMPT)
    child.sendline("remember me")
    child.expect_exact(PROMPT)
    child.sendeof()
    ended(child)
    history = foliko_home / "history"
    assert "remember me" in history.read_text()
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    child = spawn("chat", "-s", "live", echo=True)
    child.expect_exact(PROMPT)
    child.send("\x1b[A")  # up arrow: the last line of the earlier session
    child.expect_exact("remember me")
    child.send("\r")
    child.expect_exact(PROMPT)
    child.sendeof()
    ended(child)
    assert [text for _, text in stored(invoke, "live")] == ["remember me"] * 4


def test_line_editing_moves_the_cursor(spawn, invoke):
    child = spawn("chat", "-s", "live")
    child.expect_exact(PROMPT)
    child.send("helo")
    child.send("\x1b[D")  # left arrow
    child.send("l\r")
    child.expect_exact(PROMPT)
    child.sendeof()
    ended(child)
    assert stored(invoke, "live")[0] == ("user", "hello")


# an error after a partial streamed reply


@pytest.fixture
def stalled_stream():
    from models.fake_servers import FakeServer, Reply, openai_stream_events

    server = FakeServer().start()
    stall = threading.Event()
    server.queue(
        Reply(
            events=openai_stream_events(["partial reply"], finish=False, done=False),
            stall=stall,
            stall_after=3,
        )
    )
    env = {
        "OPENAI_BASE_URL": f"{server.url}/v1",
        "OPENAI_API_KEY": "sk-test",
        "FOLIKO_MODEL": "openai:some-model",
    }
    try:
        yield env, stall
    finally:
        stall.set()
        server.stop()


def test_an_error_after_a_partial_reply_is_reported_on_its_own_line(spawn, stalled_stream):
    """Was: `partial replyfoliko: error: ...` on one line. The stream is cut
    once the partial reply is on the screen, so no deadline races the reply."""
    env, cut = stalled_stream
    child = spawn("chat", "-s", "s", "hi", env=env)
    child.expect_exact("partial reply")
    cut.set()
    out = ended(child)
    assert child.exitstatus == 1
    assert out.startswith("\nfoliko: error:"), out


def test_ctrl_c_after_a_partial_reply_is_reported_on_its_own_line(spawn, stalled_stream):
    env, _ = stalled_stream
    child = spawn("chat", "-s", "s", "hi", env=env)
    child.expect_exact("partial reply")
    child.sendintr()
    out = ended(child)
    assert child.exitstatus == 130
    assert out.startswith("\nfoliko: error: interrupted"), out


def test_the_loop_reports_an_error_after_a_partial_reply_on_its_own_line(spawn, stalled_stream):
    env, cut = stalled_stream
    child = spawn("chat", "-s", "s", env=env)
    child.expect_exact(PROMPT)
    child.sendline("hi")
    child.expect_exact("partial reply")
    cut.set()
    child.expect_exact(PROMPT)
    assert plain(child.before).startswith("\nfoliko: error:"), child.before
    child.sendeof()
    ended(child)


# tables, pager, colour


def test_a_wide_table_fits_an_80_column_terminal(spawn, invoke):
    long = "a rather long prompt " * 10
    assert invoke("chat", "-s", "wide", long, env={"FOLIKO_MODEL": "echo"}).exit_code == 0
    assert invoke("chat", "-s", "short", "hi", env={"FOLIKO_MODEL": "echo"}).exit_code == 0
    out = ended(spawn("sessions", "list", columns=80))
    lines = [line for line in out.splitlines() if line]
    assert all(len(line) <= 80 for line in lines), lines
    assert any(line.startswith("wide") and line.endswith("…") for line in lines), lines
    assert any(line.startswith("short") and line.rstrip().endswith("hi") for line in lines)
    piped = invoke("sessions", "list", "--format", "table")  # not a terminal: never cut
    [row] = [line for line in piped.stdout.splitlines() if line.startswith("wide")]
    assert len(row) > 100


@pytest.fixture
def long_session(invoke):
    for number in range(20):
        text = f"message {number}"
        assert invoke("chat", "-s", "long", text, env={"FOLIKO_MODEL": "echo"}).exit_code == 0


@pytest.fixture
def pager(tmp_path):
    """A $PAGER that records what it was given."""
    script = tmp_path / "pager.py"
    record = tmp_path / "paged.txt"
    script.write_text(
        f"import sys\nopen({str(record)!r}, 'w').write(sys.stdin.read())\nprint('PAGER RAN')\n"
    )
    return {"PAGER": f"{sys.executable} {script}"}, record


def test_long_show_output_goes_through_the_pager(spawn, long_session, pager):
    env, record = pager
    out = ended(spawn("sessions", "show", "long", env=env))
    assert "PAGER RAN" in out
    assert "message 19" in record.read_text()
    assert "message 19" not in out


def test_no_pager_prints_directly(spawn, long_session, pager):
    env, record = pager
    out = ended(spawn("sessions", "show", "long", "--no-pager", env=env))
    assert "PAGER RAN" not in out and "message 19" in out
    assert not record.exists()


def test_short_output_and_pipes_are_not_paged(spawn, invoke, long_session, pager):
    env, record = pager
    assert invoke("chat", "-s", "tiny", "hi", env={"FOLIKO_MODEL": "echo"}).exit_code == 0
    out = ended(spawn("sessions", "show", "tiny", "--format", "text", env=env))
    assert "PAGER RAN" not in out and "[user]" in out
    piped = invoke("sessions", "show", "long", env=env)
    assert "message 19" in piped.stdout
    assert not record.exists()


def test_roles_and_errors_are_coloured_on_a_terminal_only(spawn, invoke):
    assert invoke("chat", "-s", "c", "hi", env={"FOLIKO_MODEL": "echo"}).exit_code == 0
    coloured = spawn("sessions", "show", "c", "--format", "text")
    coloured.expect(pexpect.EOF)
    raw = coloured.before
    assert "\x1b[" in raw and "[user]" in plain(raw)
    error = spawn("sessions", "show", "ghost")
    error.expect(pexpect.EOF)
    assert re.search(r"\x1b\[[0-9;]*m", error.before.split("error:")[0] + "error:")
    no_colour = spawn("sessions", "show", "c", "--format", "text", env={"NO_COLOR": "1"})
    no_colour.expect(pexpect.EOF)
    assert "\x1b[" not in no_colour.before
    piped = invoke("sessions", "show", "c")
    assert "\x1b[" not in piped.stdout and "[user]" in piped.stdout


def test_sessions_tree_is_drawn_on_a_terminal_and_rows_in_a_pipe(spawn, invoke):
    echo = {"FOLIKO_MODEL": "echo"}
    assert invoke("chat", "-s", "root", "one", env=echo).exit_code == 0
    assert invoke("chat", "-s", "twig", "--from", "root", "two", env=echo).exit_code == 0
    drawn = [line for line in ended(spawn("sessions", "tree")).splitlines() if line]
    assert drawn == ["root · 2 message(s)", "└── twig · 4 message(s) · forked after turn 1"]
    piped = invoke("sessions", "tree").stdout.splitlines()
    assert piped == ["session_id\tparent\tturn", "root\t\t", "twig\troot\t1"]
