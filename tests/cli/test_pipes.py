"""The installed `foliko` in real pipelines: stdin, stdout for results only, stderr for
diagnostics, and every exit code of SPEC §4 (0, 1, 2, 3, 4, 130) provoked for real."""

from __future__ import annotations

import csv
import http.server
import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from .children import default_sigint
from .locks import has_open, held

BIN = Path(sys.executable).parent
FOLIKO = BIN / "foliko"
WAIT = 30  # seconds before a test gives up waiting for an event


@pytest.fixture
def env(foliko_home):
    return {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "FOLIKO_HOME": str(foliko_home),
        "FOLIKO_MODEL": "echo",
    }


def sh(command: str, env: dict, input: bytes | None = None) -> subprocess.CompletedProcess:
    """A real shell pipeline."""
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        input=input,
        capture_output=True,
        env=env,
        timeout=60,
    )


def foliko(*args: str, env: dict, input: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(FOLIKO), *args], input=input, capture_output=True, env=env, timeout=60
    )


def messages(env: dict, session_id: str, *global_args: str) -> list[tuple[str, str]]:
    result = foliko(*global_args, "sessions", "show", session_id, "--json", env=env)
    assert result.returncode == 0, result.stderr
    return [(m["role"], m["content"]) for m in orjson.loads(result.stdout)["messages"]]


def one_error_line(result: subprocess.CompletedProcess) -> str:
    """Errors: nothing on stdout, one 'foliko: error:' line last on stderr."""
    assert result.stdout == b"", result.stdout
    assert b"Traceback" not in result.stderr, result.stderr.decode()
    last = result.stderr.decode().strip().splitlines()[-1]
    assert last.startswith("foliko: error: "), result.stderr
    return last


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting until {what}")
        time.sleep(0.005)


# pipes


def test_printf_into_chat(env):
    result = sh("printf x | foliko chat -s a", env)
    assert result.returncode == 0
    assert result.stdout == b"x\n"
    assert result.stderr == b""
    assert messages(env, "a") == [("user", "x"), ("assistant", "x")]


def test_piped_context_follows_the_argument(env):
    result = sh("printf 'line 1\\nline 2\\n' | foliko chat -s a 'Summarise:'", env)
    assert result.returncode == 0
    assert messages(env, "a")[0] == ("user", "Summarise:\n\nline 1\nline 2\n")


def test_default_model_notice_goes_to_stderr_only(env):
    del env["FOLIKO_MODEL"]
    result = sh("printf hello | foliko chat -s a", env)
    assert result.stdout == b"hello\n"
    assert b"echo" in result.stderr and b"hello" not in result.stderr


def test_chat_output_feeds_the_next_command(env):
    result = sh("foliko chat -s a 'pass it on' | tr a-z A-Z", env)
    assert result.returncode == 0
    assert result.stdout == b"PASS IT ON\n"
    chained = sh("foliko chat -s a 'round trip' | foliko chat -s b", env)
    assert chained.returncode == 0
    assert chained.stdout == b"round trip\n\n"


def test_chat_json_into_python(env):
    result = sh(
        "foliko chat -s a hi --json | python -c "
        '\'import json,sys; d=json.load(sys.stdin); print(d["session_id"], d["message"])\'',
        env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"a hi\n"


def test_list_json_into_python(env):
    for sid in ("x1", "x2", "x3"):
        assert foliko("chat", "-s", sid, f"msg {sid}", env=env).returncode == 0
    result = sh(
        "foliko sessions list --json --sort name | python -c "
        '\'import json,sys; print(" ".join(r["session_id"] for r in json.load(sys.stdin)))\'',
        env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"x1 x2 x3\n"


def test_list_ndjson_lines_each_parse(env):
    for sid in ("n1", "n2"):
        foliko("chat", "-s", sid, "hello\tworld\nsecond line", env=env)
    result = sh('foliko sessions list --ndjson | while read -r line; do echo "$line"; done', env)
    assert result.returncode == 0
    lines = result.stdout.decode().splitlines()
    rows = [orjson.loads(line) for line in lines]
    assert sorted(r["session_id"] for r in rows) == ["n1", "n2"]
    assert all(r["message_count"] == 2 for r in rows)


def test_list_tsv_is_the_default_in_a_pipe_and_parses(env):
    foliko("chat", "-s", "t1", "tab\there\nnewline", env=env)
    result = sh("foliko sessions list | cat", env)
    rows = list(csv.DictReader(io.StringIO(result.stdout.decode()), delimiter="\t"))
    assert rows == [
        {
            "session_id": "t1",
            "message_count": "2",
            "updated_at": rows[0]["updated_at"],
            "preview": "tab here newline",
            "title": "",
        }
    ]
    assert int(rows[0]["updated_at"]) > 1e12
    ids = sh("foliko sessions list | tail -n +2 | cut -f1", env)
    assert ids.stdout == b"t1\n"


def test_export_pipes_into_import_on_another_backend(env):
    foliko("chat", "-s", "e1", "one", "--var-json", "k=[1]", env=env)
    foliko("chat", "-s", "e2", "two", "--system", "S", env=env)
    result = sh("foliko sessions export --all | foliko --storage json sessions import -", env)
    assert result.returncode == 0, result.stderr
    assert result.stderr.endswith(b"foliko: imported 2, unchanged 0, skipped 0\n")
    for sid in ("e1", "e2"):
        sqlite_view = orjson.loads(foliko("sessions", "show", sid, "--json", env=env).stdout)
        json_view = orjson.loads(
            foliko("--storage", "json", "sessions", "show", sid, "--json", env=env).stdout
        )
        assert json_view == sqlite_view  # saved_at too: the session as it was
    ndjson = sh(
        "foliko sessions export --all --format ndjson | foliko --storage memory sessions import -",
        env,
    )
    assert ndjson.stderr.endswith(b"foliko: imported 2, unchanged 0, skipped 0\n")


def test_delete_separates_results_from_errors(env):
    foliko("chat", "-s", "d1", "x", env=env)
    result = foliko("sessions", "delete", "d1", "ghost", env=env)
    assert result.returncode == 2
    assert result.stdout == b"d1\n"
    assert result.stderr == b"foliko: error: session 'ghost' not found\n"


def test_export_stdout_is_pure_json_even_with_notices(env):
    del env["FOLIKO_MODEL"]
    foliko("chat", "-s", "s", "x", env=env)
    result = sh("foliko sessions export s 2>/dev/null | python -m json.tool > /dev/null", env)
    assert result.returncode == 0


# exit codes


def test_exit_0_ok(env):
    result = foliko("chat", "-s", "ok", "fine", env=env)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"fine\n", b"")


class _Reject(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = orjson.dumps({"error": {"message": "Incorrect API key provided"}})
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def rejecting_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Reject)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_exit_1_model_failure(env, rejecting_server):
    foliko("chat", "-s", "m", "kept", env=env)
    before = foliko("sessions", "show", "m", "--json", env=env).stdout
    env.update(OPENAI_BASE_URL=rejecting_server, OPENAI_API_KEY="sk-test-SECRETVALUE")
    result = foliko("chat", "-s", "m", "hi", "-m", "openai:gpt-4o", env=env)
    assert result.returncode == 1
    line = one_error_line(result)
    assert "rejected the API key" in line and "401" in line
    assert b"SECRETVALUE" not in result.stderr
    assert foliko("sessions", "show", "m", "--json", env=env).stdout == before


@pytest.fixture
def silent_server():
    """Accepts connections and never answers: a model call that hangs."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    yield listener
    listener.close()


def test_exit_1_turn_timeout(env, silent_server):
    port = silent_server.getsockname()[1]
    env["OLLAMA_HOST"] = f"http://127.0.0.1:{port}"
    foliko("chat", "-s", "m", "kept", env=env)
    before = foliko("sessions", "show", "m", "--json", env=env).stdout
    result = foliko("chat", "-s", "m", "hi", "-m", "ollama:llama3", "--timeout", "0.5", env=env)
    assert result.returncode == 1
    line = one_error_line(result)
    # the turn's deadline and the HTTP client's own timeout race; either reports exit 1
    assert any(f in line for f in ("did not finish within 0.5s", "in time", "ReadTimeout")), line
    assert foliko("sessions", "show", "m", "--json", env=env).stdout == before


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["sessions", "show", "ghost"], "not found"),
        (["sessions", "list", "--since", "soon"], "not a duration"),
        (["chat", "-s", "s"], "no message"),
        (["chat", "-s", "s", "hi", "-m", "nosuch:model"], "unknown model"),
        (["--storage", "bogus", "sessions", "list"], "unknown storage"),
        (["sessions", "export"], "--all"),
        (["nosuchcommand"], "foliko: error: no such command 'nosuchcommand'"),
    ],
)
def test_exit_2_usage(env, args, fragment):
    result = foliko(*args, env=env)
    assert result.returncode == 2
    assert result.stdout == b""
    assert fragment in result.stderr.decode()


def test_exit_2_invalid_utf8_on_stdin(env):
    result = sh("printf 'caf\\xe9' | foliko chat -s u", env)
    assert result.returncode == 2
    assert "not valid UTF-8" in one_error_line(result)


def test_exit_3_sqlite_file_that_is_not_a_database(env, tmp_path):
    bogus = tmp_path / "bogus.db"
    content = b"this is not a database\n" * 200
    bogus.write_bytes(content)
    url = f"sqlite:///{bogus}"
    for args in (["sessions", "list"], ["chat", "-s", "s", "hi"], ["sessions", "show", "s"]):
        result = foliko("--storage", url, *args, env=env)
        assert result.returncode == 3, args
        assert "not a database" in one_error_line(result)
    assert bogus.read_bytes() == content


def test_listing_an_unreachable_home_finds_nothing_and_creates_nothing(env, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    env["FOLIKO_HOME"] = str(blocker / "home")
    result = foliko("sessions", "list", "--json", env=env)
    assert result.returncode == 0
    assert orjson.loads(result.stdout) == []
    assert blocker.read_text() == "not a directory"
    written = foliko("chat", "-s", "s", "hi", env=env)
    assert written.returncode == 3
    one_error_line(written)


def test_exit_3_corrupt_json_session_is_reported_and_never_overwritten(env, foliko_home):
    foliko("--storage", "json", "chat", "-s", "c", "hi", env=env)
    path = foliko_home / "sessions" / "c.json"
    path.write_bytes(b'{"sessionId": "c", "messages": [tru')
    for args in (["sessions", "show", "c"], ["chat", "-s", "c", "more"]):
        result = foliko("--storage", "json", *args, env=env)
        assert result.returncode == 3, args
        assert "corrupt" in one_error_line(result)
    assert path.read_bytes() == b'{"sessionId": "c", "messages": [tru'


def test_exit_4_session_busy_names_the_holder(env, foliko_home):
    foliko("chat", "-s", "busy", "first", env=env)
    with held(foliko_home, "busy", b"pid 4242 on the-test"):
        result = foliko("chat", "-s", "busy", "second", "--timeout", "0.5", env=env)
    assert result.returncode == 4
    line = one_error_line(result)
    assert "'busy' is busy" in line and "pid 4242 on the-test" in line
    assert messages(env, "busy") == [("user", "first"), ("assistant", "first")]
    assert foliko("chat", "-s", "busy", "third", env=env).returncode == 0


def test_exit_130_sigint_during_a_turn_waiting_for_the_lock(env, foliko_home):
    foliko("chat", "-s", "int", "first", env=env)
    with held(foliko_home, "int") as lock_file:
        process = subprocess.Popen(
            [str(FOLIKO), "chat", "-s", "int", "interrupted"],
            preexec_fn=default_sigint,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        try:
            wait_until(lambda: has_open(process.pid, lock_file), "the turn waits for the lock")
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=WAIT)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert process.returncode == 130
    result = subprocess.CompletedProcess(process.args, 130, out, err)
    assert "interrupted" in one_error_line(result)
    assert messages(env, "int") == [("user", "first"), ("assistant", "first")]


def test_exit_130_sigint_during_a_model_call(env, silent_server):
    env["OLLAMA_HOST"] = f"http://127.0.0.1:{silent_server.getsockname()[1]}"
    foliko("chat", "-s", "int", "first", env=env)
    process = subprocess.Popen(
        [str(FOLIKO), "chat", "-s", "int", "hangs", "-m", "ollama:llama3"],
        preexec_fn=default_sigint,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        silent_server.settimeout(WAIT)
        connection, _ = silent_server.accept()  # the model request is in flight
        with connection:
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=WAIT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130
    assert "interrupted" in one_error_line(subprocess.CompletedProcess(process.args, 130, out, err))
    assert messages(env, "int") == [("user", "first"), ("assistant", "first")]


def read_line_within(stream, seconds: float) -> bytes:
    """One line from a child's pipe, or b"" when none arrives in time."""
    import select

    ready, _, _ = select.select([stream], [], [], seconds)
    return stream.readline() if ready else b""


def test_a_pipe_silent_for_a_while_is_waited_for_and_nothing_is_dropped(env):
    """Was: a pipe silent for 2 s was dropped and only the argument was stored."""
    process = subprocess.Popen(
        [str(FOLIKO), "chat", "-s", "slow", "summarise"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        notice = read_line_within(process.stderr, WAIT)
        assert b"waiting for input on stdin" in notice
        assert b"-n/--no-stdin" in notice and b"</dev/null" in notice
        assert process.poll() is None
        process.stdin.write(b"data\n")
        process.stdin.close()
        assert process.wait(timeout=WAIT) == 0, process.stderr.read().decode()
    finally:
        if process.poll() is None:
            process.kill()
        process.stdout.close()
        process.stderr.close()
    assert messages(env, "slow")[0] == ("user", "summarise\n\ndata\n")


def test_no_stdin_leaves_an_open_silent_pipe_unread(env):
    process = subprocess.Popen(
        [str(FOLIKO), "chat", "-n", "-s", "quiet", "hello there"],
        env=env,
        stdin=subprocess.PIPE,  # open, never written, never closed
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.wait(timeout=WAIT) == 0, process.stderr.read().decode()
        assert process.stdout.read() == b"hello there\n"
        assert b"waiting" not in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
        process.stdin.close()
        process.stdout.close()
        process.stderr.close()


def test_a_slow_producer_in_a_real_pipeline_is_read_whole(env):
    result = sh("(sleep 3; echo data) | foliko chat -s s summarise", env)
    assert result.returncode == 0, result.stderr
    assert b"waiting for input on stdin" in result.stderr
    assert messages(env, "s")[0] == ("user", "summarise\n\ndata\n")


def test_a_closed_stdin_is_no_input(env):
    result = subprocess.run(
        [str(FOLIKO), "chat", "-s", "closed", "hi"],
        env=env,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        preexec_fn=lambda: os.close(0),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout == b"hi\n"
    nothing = subprocess.run(
        [str(FOLIKO), "chat", "-s", "closed"],
        env=env,
        capture_output=True,
        preexec_fn=lambda: os.close(0),
        timeout=60,
    )
    assert nothing.returncode == 2
    assert b"no message" in nothing.stderr
