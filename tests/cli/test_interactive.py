"""The interactive loop of `foliko chat -s ID`, driven through a pseudo-terminal."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from .children import default_sigint
from .locks import has_open, held

pexpect = pytest.importorskip("pexpect")

FOLIKO = Path(sys.executable).with_name("foliko")
PROMPT = "> "
WAIT = 30  # seconds pexpect waits for expected output before failing the test


@pytest.fixture
def spawn(foliko_home):
    children = []

    def start(*args: str, model: str | None = "echo"):
        env = {**os.environ, "FOLIKO_HOME": str(foliko_home)}
        if model:
            env["FOLIKO_MODEL"] = model
        child = pexpect.spawn(
            str(FOLIKO),
            list(args),
            env=env,
            encoding="utf-8",
            echo=False,
            timeout=WAIT,
            preexec_fn=default_sigint,
        )
        children.append(child)
        return child

    yield start
    for child in children:
        child.close(force=True)


def finish(child) -> int:
    """Ctrl-D at the prompt; the exit status."""
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus


ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def plain(text: str) -> str:
    """``text`` without terminal control sequences (readline's bracketed-paste toggles)."""
    return ESCAPE.sub("", text)


def turn(child, text: str) -> str:
    """Type a line at the prompt; return what was printed before the next prompt."""
    child.sendline(text)
    child.expect_exact(PROMPT)
    return plain(child.before).replace("\r", "").removeprefix("\n")


def stored(invoke, session_id: str) -> list[tuple[str, str]]:
    result = invoke("sessions", "show", session_id, "--json")
    assert result.exit_code == 0, result.stderr
    return [(m["role"], m["content"]) for m in orjson.loads(result.stdout)["messages"]]


def wait_until(condition, what: str) -> None:
    """Poll for an observable state of the child (never a fixed sleep)."""
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting until {what}")
        time.sleep(0.005)


# read(2), then the calls readline waits in: select, pselect6, poll, ppoll (x86-64; arm64)
READ = {"0", "63"}
WAIT_FOR_INPUT = {"23", "270", "7", "271", "72", "73"}


def reading_the_terminal(pid: int) -> bool:
    """The process waits for terminal input: read(2) on fd 0, or readline's select/poll."""
    try:
        fields = Path(f"/proc/{pid}/syscall").read_text().split()
    except OSError:
        return True  # no /proc/PID/syscall here: the prompt has been printed, go on
    if len(fields) < 2:
        return False
    if fields[0] in READ:
        return int(fields[1], 16) == 0
    return fields[0] in WAIT_FOR_INPUT


def test_two_lines_then_ctrl_d(spawn, invoke):
    child = spawn("chat", "-s", "live")
    child.expect_exact(PROMPT)
    assert "session 'live'" in child.before and "Ctrl-D" in child.before
    assert turn(child, "hello there").splitlines() == ["hello there"]
    assert turn(child, "and again").splitlines() == ["and again"]
    assert finish(child) == 0
    assert stored(invoke, "live") == [
        ("user", "hello there"),
        ("assistant", "hello there"),
        ("user", "and again"),
        ("assistant", "and again"),
    ]


def test_a_template_with_input_shapes_every_message_typed(spawn, invoke, show):
    saved = invoke("chat", "--save", "tr", "--system", "Into $lang.", "$lang, please: $input")
    assert saved.exit_code == 0, saved.stderr
    child = spawn("chat", "-s", "live", "-t", "tr", "-p", "lang", "French")
    child.expect_exact(PROMPT)
    assert turn(child, "good night").splitlines() == ["French, please: good night"]
    assert turn(child, "thanks").splitlines() == ["French, please: thanks"]
    assert finish(child) == 0
    assert [m for role, m in stored(invoke, "live") if role == "user"] == [
        "French, please: good night",
        "French, please: thanks",
    ]
    assert show("live")["metadata"]["system_prompt"] == "Into French."


def test_a_template_whose_prompt_is_whole_runs_one_turn_without_the_loop(spawn, invoke):
    assert invoke("chat", "--save", "joke", "Tell me a joke").exit_code == 0
    child = spawn("chat", "-s", "once", "-t", "joke")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert plain(child.before).replace("\r", "").strip() == "Tell me a joke"
    assert stored(invoke, "once") == [("user", "Tell me a joke"), ("assistant", "Tell me a joke")]


def test_continue_new_says_once_which_session_it_started_over(spawn, invoke):
    for name in ("older", "latest"):
        assert invoke("chat", "-s", name, "before", env={"FOLIKO_MODEL": "echo"}).exit_code == 0
    child = spawn("chat", "-c", "--new")
    child.expect_exact(PROMPT)
    first = turn(child, "after")
    assert "session 'latest' started over; the old history is in the trash" in first
    assert "started over" not in turn(child, "and more")
    assert finish(child) == 0
    assert [m for _, m in stored(invoke, "latest")] == ["after", "after", "and more", "and more"]
    trashed = orjson.loads(invoke("sessions", "trash", "list", "--json").stdout)
    assert [(row["session_id"], row["reason"]) for row in trashed] == [("latest", "new")]


def test_each_turn_is_saved_before_the_next_prompt(spawn, invoke):
    child = spawn("chat", "-s", "live")
    child.expect_exact(PROMPT)
    turn(child, "first")
    # the loop is still running: the turn is already in storage
    assert stored(invoke, "live") == [("user", "first"), ("assistant", "first")]
    assert finish(child) == 0


def test_empty_lines_are_ignored(spawn, invoke):
    child = spawn("chat", "-s", "live")
    child.expect_exact(PROMPT)
    assert turn(child, "").strip() == ""
    assert turn(child, "   ").strip() == ""
    assert finish(child) == 0
    assert invoke("sessions", "show", "live").exit_code == 2  # never created
    child = spawn("chat", "-s", "live")
    child.expect_exact(PROMPT)
    turn(child, "real")
    turn(child, "")
    assert finish(child) == 0
    assert stored(invoke, "live") == [("user", "real"), ("assistant", "real")]


def test_ctrl_c_at_the_prompt_gives_a_new_prompt(spawn, invoke):
    child = spawn("chat", "-s", "live")
    child.expect_exact(PROMPT)
    wait_until(lambda: reading_the_terminal(child.pid), "the loop waits for a line")
    child.sendintr()
    child.expect_exact(PROMPT)
    assert child.isalive()
    assert turn(child, "still here").splitlines() == ["still here"]
    assert finish(child) == 0
    assert stored(invoke, "live") == [("user", "still here"), ("assistant", "still here")]


def test_ctrl_c_during_a_turn_cancels_only_that_turn(spawn, invoke, foliko_home):
    assert invoke("chat", "-s", "live", "before", env={"FOLIKO_MODEL": "echo"}).exit_code == 0
    child = spawn("chat", "-s", "live")
    child.expect_exact(PROMPT)
    with held(foliko_home, "live") as lock_file:
        child.sendline("blocked turn")
        # the turn has opened the lock file and waits for the lock we hold
        wait_until(lambda: has_open(child.pid, lock_file), "the turn waits for the lock")
        child.sendintr()
        child.expect_exact("turn cancelled; nothing saved")
        child.expect_exact(PROMPT)
        assert child.isalive()
        assert stored(invoke, "live") == [("user", "before"), ("assistant", "before")]
    assert turn(child, "after the lock").splitlines() == ["after the lock"]
    assert finish(child) == 0
    assert stored(invoke, "live") == [
        ("user", "before"),
        ("assistant", "before"),
        ("user", "after the lock"),
        ("assistant", "after the lock"),
    ]


def test_a_failing_turn_reports_and_the_loop_goes_on(spawn, invoke):
    child = spawn("chat", "-s", "live", "-m", "nosuch:model")
    child.expect_exact(PROMPT)
    out = turn(child, "hello")
    assert "error: unknown model 'nosuch:model'" in out
    assert child.isalive()
    assert finish(child) == 0
    assert invoke("sessions", "show", "live").exit_code == 2


def test_attach_goes_with_the_next_message_only(spawn, show, tmp_path):
    (tmp_path / "todo.txt").write_text("buy milk")
    child = spawn("chat", "-s", "live")
    child.expect_exact(PROMPT)
    child.sendline(f"/attach {tmp_path / 'todo.txt'}")
    child.expect_exact(PROMPT)
    assert "todo.txt goes with the next message" in child.before
    turn(child, "read this")
    turn(child, "thanks")
    assert finish(child) == 0
    users = [m for m in show("live")["messages"] if m["role"] == "user"]
    assert users[0]["content"] == "read this\n\ntodo.txt:\n```txt\nbuy milk\n```"
    assert [p["name"] for p in users[0]["attachments"]] == ["todo.txt"]
    assert users[1] == {**users[1], "content": "thanks"} and "attachments" not in users[1]


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda path: None, "no such file"),
        (lambda path: path.mkdir(), "not a file"),
        (lambda path: path.write_bytes(b"\x00\x01binary"), "neither UTF-8 text nor"),
        (lambda path: (path.write_text("secret"), path.chmod(0)), "Permission denied"),
    ],
    ids=["missing", "directory", "binary", "unreadable"],
)
def test_attach_checks_the_file_when_it_is_given(spawn, show, tmp_path, make, fragment):
    target = tmp_path / "notes.txt"
    make(target)
    if fragment == "Permission denied" and os.access(target, os.R_OK):
        pytest.skip("this user reads every file (root)")
    child = spawn("chat", "-s", "live")
    child.expect_exact(PROMPT)
    lines = turn(child, f"/attach {target}").splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"foliko: error: cannot attach {target}: ")
    assert fragment in lines[0] and lines[0].endswith("; nothing was attached")
    assert turn(child, "and now?").splitlines() == ["and now?"], "the next message goes on"
    assert finish(child) == 0
    users = [m for m in show("live")["messages"] if m["role"] == "user"]
    assert users == [{**users[0], "content": "and now?"}] and "attachments" not in users[0]


def test_attach_without_a_path_says_how(spawn):
    child = spawn("chat", "-s", "live")
    child.expect_exact(PROMPT)
    assert turn(child, "/attach").splitlines() == [
        "foliko: /attach needs a file or an http(s) URL: /attach PATH"
    ]
    assert finish(child) == 0


def test_the_loop_says_when_a_turn_stopped_short(spawn, monkeypatch):
    monkeypatch.setenv("FOLIKO_MAX_STEPS", "1")
    child = spawn("chat", "-s", "live")
    child.expect_exact(PROMPT)
    said = turn(child, "/tool get_session_info")
    assert "the turn stopped after 1 model calls" in said and "FOLIKO_MAX_STEPS" in said
    assert finish(child) == 0


def test_options_apply_to_the_first_turn_only(spawn, invoke, show):
    for text in ("old 1", "old 2"):
        assert invoke("chat", "-s", "live", text, env={"FOLIKO_MODEL": "echo"}).exit_code == 0
    child = spawn("chat", "-s", "live", "--new", "--var-json", "k=1", "--system", "S")
    child.expect_exact(PROMPT)
    turn(child, "one")
    turn(child, "two")
    assert finish(child) == 0
    data = show("live")
    assert [m["content"] for m in data["messages"]] == ["one", "one", "two", "two"]
    assert data["variables"] == {"k": 1}
    assert data["metadata"]["system_prompt"] == "S"


def test_dry_run_json_or_extract_need_a_message_on_a_terminal(spawn):
    for flag in ("--dry-run", "--json", "-x"):
        child = spawn("chat", "-s", "live", flag)
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 2
        assert "need a message" in child.before
        assert PROMPT not in child.before


@pytest.mark.parametrize("stdin", ["devnull", "empty pipe", "whitespace"])
def test_no_terminal_and_no_message_exits_2_without_prompting(foliko_home, stdin):
    env = {**os.environ, "FOLIKO_HOME": str(foliko_home), "FOLIKO_MODEL": "echo"}
    kwargs: dict = {"stdin": subprocess.DEVNULL} if stdin == "devnull" else {}
    if stdin != "devnull":
        kwargs["input"] = b"" if stdin == "empty pipe" else b"  \n\n"
    result = subprocess.run(
        [str(FOLIKO), "chat", "-s", "x"], capture_output=True, env=env, timeout=60, **kwargs
    )
    assert result.returncode == 2
    assert result.stdout == b""
    assert b"no message" in result.stderr
    assert b"> " not in result.stderr
    listing = subprocess.run(
        [str(FOLIKO), "sessions", "list", "--json"], capture_output=True, env=env, timeout=60
    )
    assert orjson.loads(listing.stdout) == []


# other output that depends on the terminal


def test_list_prints_a_table_on_a_terminal(spawn, invoke):
    assert invoke("chat", "-s", "tty1", "hello", env={"FOLIKO_MODEL": "echo"}).exit_code == 0
    child = spawn("sessions", "list")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    lines = child.before.splitlines()
    assert lines[0].split() == ["session", "title", "messages", "updated", "last", "prompt"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    assert lines[2].split()[0] == "tty1"


def test_migrate_shows_progress_only_on_a_terminal(spawn, invoke):
    for sid in ("p1", "p2"):
        assert invoke("--storage", "json", "chat", "-s", sid, "x").exit_code == 0
    child = spawn("storage", "migrate", "json", "sqlite")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert "migrating" in child.before and "100%" in child.before
    assert "copied 2 of 2 sessions" in child.before


@pytest.mark.parametrize(
    ("args", "label"),
    [
        (("sessions", "export", "--all", "-o", "all.json"), "exporting"),
        (("sessions", "prune", "--older-than", "0s"), "pruning"),
    ],
)
def test_long_session_commands_show_progress_only_on_a_terminal(spawn, invoke, args, label):
    for sid in ("p1", "p2", "p3"):
        assert invoke("chat", "-s", sid, "x").exit_code == 0
    if label == "exporting":
        assert label not in invoke(*args).stderr
    child = spawn(*args)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert label in child.before and "100%" in child.before


def test_import_shows_progress_only_on_a_terminal(spawn, invoke, tmp_path):
    for sid in ("p1", "p2"):
        assert invoke("chat", "-s", sid, "x").exit_code == 0
    exported = invoke("sessions", "export", "--all")
    (tmp_path / "backup.json").write_text(exported.stdout)
    piped = invoke("--storage", "json", "sessions", "import", str(tmp_path / "backup.json"))
    assert "importing" not in piped.stderr
    child = spawn(
        "--storage", "sqlite:///other.db", "sessions", "import", str(tmp_path / "backup.json")
    )
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert "importing" in child.before and "imported 2" in child.before


@pytest.fixture
def editor(tmp_path, monkeypatch):
    """$EDITOR set to a script that writes ``text`` into the file it is given
    (None: it leaves the file as it was; a number: it exits with that status)."""

    def use(text: str | None = None, status: int = 0) -> None:
        script = tmp_path / "editor.py"
        body = "" if text is None else f"open(sys.argv[1], 'w').write({text!r})\n"
        script.write_text(f"import sys\n{body}sys.exit({status})\n")
        monkeypatch.setenv("EDITOR", f"{sys.executable} {script}")
        monkeypatch.delenv("VISUAL", raising=False)

    return use


@pytest.mark.parametrize("command", ["!edit", "/edit"])
def test_edit_sends_what_was_written_in_the_editor(spawn, invoke, editor, command):
    editor("Line one\nline two\n")
    child = spawn("chat", "-s", "live")
    child.expect_exact(PROMPT)
    assert turn(child, command).splitlines() == ["Line one", "line two"]
    assert finish(child) == 0
    assert stored(invoke, "live") == [
        ("user", "Line one\nline two"),
        ("assistant", "Line one\nline two"),
    ]


@pytest.mark.parametrize(
    ("written", "status", "said"),
    [
        (None, 0, "foliko: the editor was closed without a message; nothing was sent"),
        ("  \n", 0, "foliko: the editor was closed without a message; nothing was sent"),
        ("never sent", 3, "foliko: the editor failed ("),
    ],
    ids=["not-saved", "blank", "failed"],
)
def test_edit_without_a_message_sends_nothing_and_the_loop_goes_on(
    spawn, invoke, editor, written, status, said
):
    editor(written, status)
    child = spawn("chat", "-s", "live")
    child.expect_exact(PROMPT)
    (line,) = turn(child, "!edit").splitlines()
    assert line.startswith(said)
    assert turn(child, "typed").splitlines() == ["typed"]
    assert finish(child) == 0
    assert stored(invoke, "live") == [("user", "typed"), ("assistant", "typed")]


def test_llms_multi_and_end_enter_several_lines(spawn, invoke):
    child = spawn("chat", "-s", "live")
    child.expect_exact(PROMPT)
    for line in ("!multi", "first", "second"):
        child.sendline(line)
        child.expect_exact("... ")
    assert turn(child, "!end").splitlines() == ["first", "second"]
    for line in ("!multi abc", "x", "!end", "y"):
        child.sendline(line)
        child.expect_exact("... ")
    assert turn(child, "!end abc").splitlines() == ["x", "!end", "y"]
    assert finish(child) == 0
    assert [m for role, m in stored(invoke, "live") if role == "user"] == [
        "first\nsecond",
        "x\n!end\ny",
    ]


def test_fragment_puts_texts_before_the_next_message_only(spawn, show, tmp_path):
    (tmp_path / "style.md").write_text("Be brief.")
    (tmp_path / "notes.md").write_text("Thursday.")
    child = spawn("chat", "-s", "live")
    child.expect_exact(PROMPT)
    child.sendline(f"!fragment {tmp_path / 'style.md'} {tmp_path / 'notes.md'}")
    child.expect_exact(PROMPT)
    assert turn(child, "first") == "Be brief.\nThursday.\nfirst\n"
    assert turn(child, "second") == "second\n"
    assert turn(child, "/fragment missing.md") == "foliko: missing.md go before the next message\n"
    assert "fragment missing.md not found" in turn(child, "third")
    assert finish(child) == 0
    users = [m for m in show("live")["messages"] if m["role"] == "user"]
    assert [len(m.get("fragments", ())) for m in users] == [2, 0]
