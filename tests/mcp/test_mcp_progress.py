"""A server's progress notifications are a line on stderr when it is a terminal
(nothing in a pipe); its log messages go to the logger ``foliko.mcp.SERVER`` at
their level (and not to stderr unless the application configures logging)."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pexpect
import pytest
from mcp_support import resources_server, write_config

from foliko_cli.cli.progress import CLEAR, ProgressLine, progress_text
from foliko_cli.mcp.asking import Progress
from foliko_cli.mcp.logs import log_level
from foliko_cli.service.facade import Foliko

WORK = '/tool r__work {"steps": 3}'


@pytest.fixture
def configure(tmp_path: Path):
    write_config(tmp_path / "foliko.toml", {"r": resources_server(approve="always")})


def test_on_a_terminal_each_update_rewrites_one_line_cleared_at_the_end(configure, spawn):
    child = spawn("chat", "-s", "s", "--no-stream", WORK)
    for step in (1, 2, 3):
        share = round(100 * step / 3)
        child.expect_exact(f"{CLEAR}r__work: {step}/3 ({share}%) step {step}")
    child.expect_exact(f"{CLEAR}r__work returned: worked 3 steps")
    child.expect(pexpect.EOF)


def test_in_a_pipe_there_is_no_progress_line(configure, run_foliko):
    done = run_foliko("chat", "-s", "s", WORK)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"r__work returned: worked 3 steps\n"
    assert b"step 1" not in done.stderr and b"\x1b[K" not in done.stderr


def test_log_messages_are_not_printed_unless_logging_is_configured(configure, run_foliko):
    done = run_foliko("chat", "-s", "s", WORK)
    assert done.returncode == 0, done.stderr
    assert b"the work is done" not in done.stderr


def test_log_messages_reach_the_servers_logger_at_their_level(foliko_home, caplog):
    caplog.set_level(logging.DEBUG, logger="foliko.mcp")
    servers = {"r": resources_server(approve="always")}
    with Foliko("memory", "echo", home=foliko_home, mcp_servers=servers) as foliko:
        assert foliko.chat("s", WORK).message == "r__work returned: worked 3 steps"
    records = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
    assert records == [
        ("foliko.mcp.r", logging.DEBUG, "starting the work"),
        ("foliko.mcp.r", logging.INFO, 'worker: {"steps":3}'),
        ("foliko.mcp.r", logging.WARNING, "the work is done"),
        ("foliko.mcp.r", logging.ERROR, "nothing went wrong, really"),
    ]


def test_a_server_is_asked_for_the_messages_its_logger_records():
    logger = logging.getLogger("foliko.mcp.levels")
    for level, asked in [
        (logging.DEBUG, "debug"),
        (logging.INFO, "info"),
        (logging.WARNING, "warning"),
        (logging.ERROR, "error"),
        (logging.CRITICAL, "critical"),
    ]:
        logger.setLevel(level)
        assert log_level("levels") == asked
    logger.setLevel(logging.NOTSET)


def test_the_progress_text_with_and_without_a_total():
    assert progress_text(Progress("s", "s__t", 2, 8, "copying")) == "s__t: 2/8 (25%) copying"
    assert progress_text(Progress("s", "s__t", 0.5)) == "s__t: 0.5"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_line_is_cleared_only_when_one_was_shown():
    stream = _Terminal()
    line = ProgressLine(stream)
    line(Progress("s", "s__t", done=True))
    assert stream.getvalue() == ""
    line(Progress("s", "s__t", 1, 2))
    line(Progress("s", "s__t", done=True))
    assert stream.getvalue() == f"{CLEAR}s__t: 1/2 (50%){CLEAR}"
    piped = io.StringIO()
    ProgressLine(piped)(Progress("s", "s__t", 1, 2))
    assert piped.getvalue() == ""


def test_the_reference_servers_long_running_operation_shows_progress(
    everything_bin, tmp_path, spawn
):
    write_config(
        tmp_path / "foliko.toml",
        {"everything": {"command": str(everything_bin), "args": ["stdio"], "approve": "always"}},
    )
    child = spawn(
        "chat",
        "-s",
        "s",
        "--no-stream",
        '/tool everything__trigger-long-running-operation {"duration": 0.2, "steps": 2}',
    )
    child.expect_exact(f"{CLEAR}everything__trigger-long-running-operation: 1/2 (50%)")
    child.expect_exact(f"{CLEAR}everything__trigger-long-running-operation: 2/2 (100%)")
    child.expect_exact(f"{CLEAR}everything__trigger-long-running-operation returned: ")
    child.expect(pexpect.EOF)
