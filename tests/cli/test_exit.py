"""How a ``foliko`` process ends (``cli.main.end_process``): without tearing the
interpreter down, yet with its output whole, its atexit handlers run and
its non-daemon threads waited for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson


def run_python(code: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, **kwargs)


def test_a_large_output_through_a_pipe_arrives_whole(run_foliko):
    message = "x" * 100_000  # the export holds it twice: more than a pipe buffers
    assert run_foliko("chat", "-s", "big", message).returncode == 0

    exported = run_foliko("sessions", "export", "big")

    assert exported.returncode == 0
    (session,) = orjson.loads(exported.stdout)
    assert [m["content"] for m in session["messages"]] == [message, message]


def test_the_exit_status_and_a_partial_last_line_survive(tmp_path: Path):
    done = run_python(
        "import sys; from foliko_cli.cli.main import end_process\n"
        "sys.stdout.write('no newline'); sys.stderr.write('half a line')\n"
        "end_process(3)"
    )
    assert (done.returncode, done.stdout, done.stderr) == (3, b"no newline", b"half a line")


def test_atexit_handlers_run(tmp_path: Path):
    marker = tmp_path / "ran"
    done = run_python(
        "import atexit, pathlib; from foliko_cli.cli.main import end_process\n"
        f"atexit.register(pathlib.Path({str(marker)!r}).write_text, 'yes')\n"
        "end_process(0)"
    )
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "yes"


def test_a_non_daemon_thread_still_working_is_waited_for(tmp_path: Path):
    marker = tmp_path / "finished"
    read_end, write_end = os.pipe()
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, pathlib, sys, threading\n"
            "from foliko_cli.cli.main import end_process\n"
            "def work():\n"
            f"    os.read({read_end}, 1)\n"
            f"    pathlib.Path({str(marker)!r}).write_text('done')\n"
            "threading.Thread(target=work).start()\n"
            "print('ending', flush=True)\n"
            "end_process(0)",
        ],
        stdout=subprocess.PIPE,
        pass_fds=(read_end,),
    )
    os.close(read_end)
    try:
        assert child.stdout.readline() == b"ending\n"
        os.write(write_end, b"go")
        assert child.wait(timeout=60) == 0
    finally:
        os.close(write_end)
        child.kill()
        child.wait()
    assert marker.read_text() == "done"


def test_a_status_that_is_not_a_number_exits_as_sys_exit_does():
    done = run_python("from foliko_cli.cli.main import end_process; end_process('gone wrong')")
    assert (done.returncode, done.stderr.strip()) == (1, b"gone wrong")
