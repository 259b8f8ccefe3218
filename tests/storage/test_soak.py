"""A randomised soak: writer processes doing chat, fork, rename, vars and
import at random on a few sessions, killed with SIGKILL at random, on every
persistent backend. Afterwards: every session loads, every turn is whole and
held once per session, every turn reported saved is there, every turn
reported failed is nowhere.

FOLIKO_SOAK_SECONDS sets how long each backend is soaked (``make soak``
runs minutes; the normal suite a few seconds). The seed is printed, and
FOLIKO_SOAK_SEED replays a run.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import orjson

SECONDS = float(os.environ.get("FOLIKO_SOAK_SECONDS", "6"))
WRITERS = 4

# One writer: a seeded loop of CLI commands run in-process, each logged before
# ("start") and after ("ok"/"fail CODE") to its own file, flushed and fsynced,
# so a SIGKILL leaves only the command in flight undecided.
WRITER = textwrap.dedent(
    """
    import os, random, sys
    from click.testing import CliRunner
    from foliko_cli.cli.main import cli

    url, name, seed, log_path, *ids = sys.argv[1:]
    rng = random.Random(int(seed))
    runner = CliRunner()
    log = open(log_path, "a", buffering=1)

    def note(line):
        log.write(line + "\\n")
        log.flush()
        os.fsync(log.fileno())

    n = 0
    while True:
        n += 1
        token = f"{name}-{n}"
        op = rng.choice(["chat", "chat", "chat", "fork", "rename", "vars", "import"])
        sid = rng.choice(ids)
        if op == "chat":
            args = ["chat", "-s", sid, token, "--timeout", "30"]
        elif op == "fork":
            args = ["chat", "-s", f"fork-{token}", "--from", sid, token, "--timeout", "30"]
        elif op == "rename":
            args = ["sessions", "rename", sid, f"moved-{token}"]
        elif op == "vars":
            args = ["sessions", "vars", sid, "set", "last", token]
        else:
            exported = runner.invoke(cli, ["--storage", url, "sessions", "export", sid])
            if exported.exit_code != 0:
                continue
            args = ["sessions", "import", "-", "--on-conflict", "skip"]
        note(f"start {op} {token}")
        done = runner.invoke(
            cli, ["--storage", url, *args], input=exported.stdout if op == "import" else None
        )
        note(f"{'ok' if done.exit_code == 0 else 'fail ' + str(done.exit_code)} {op} {token}")
    """
)


def outcomes(logs: list[Path]) -> dict[str, str]:
    """Each chat or fork token: 'ok', 'fail' or 'undecided' (killed in flight).

    A line cut short by the kill (no newline yet) decides nothing: its token
    stays as its 'start' line left it."""
    found = {}
    for log in logs:
        if not log.exists():  # killed before it began
            continue
        for line in log.read_text().split("\n")[:-1]:
            word, *rest = line.split()
            op, token = rest[-2], rest[-1]
            if op not in ("chat", "fork"):
                continue
            found[token] = "undecided" if word == "start" else ("ok" if word == "ok" else "fail")
    return found


def test_random_writers_killed_at_random_lose_and_invent_nothing(storage_url, tmp_path):
    seed = int(os.environ.get("FOLIKO_SOAK_SEED", random.randrange(2**32)))
    print(f"soak seed {seed} (FOLIKO_SOAK_SEED={seed} replays it)")
    rng = random.Random(seed)
    env = {**os.environ, "FOLIKO_MODEL": "echo", "FOLIKO_HOME": str(tmp_path / "home")}
    ids = ["a", "b", "c"]
    logs: list[Path] = []
    running: list[subprocess.Popen] = []

    def start_writer() -> None:
        log = tmp_path / f"writer-{len(logs)}.log"
        logs.append(log)
        running.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    WRITER,
                    storage_url,
                    f"w{len(logs)}",
                    str(rng.randrange(2**32)),
                    str(log),
                    *ids,
                ],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        )

    for _ in range(WRITERS):
        start_writer()
    deadline = time.monotonic() + SECONDS
    try:
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(0.3, 2.0))  # the moment of the next kill, at random
            victim = running.pop(rng.randrange(len(running)))
            victim.kill()
            victim.wait(timeout=60)
            start_writer()
    finally:
        for process in running:
            process.kill()
            process.wait(timeout=60)

    check = subprocess.run(
        [sys.executable, "-m", "foliko_cli", "--storage", storage_url, "storage", "check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    exported = subprocess.run(
        [
            sys.executable,
            "-m",
            "foliko_cli",
            "--storage",
            storage_url,
            "sessions",
            "export",
            "--all",
            "--format",
            "ndjson",
        ],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert exported.returncode == 0, exported.stderr
    sessions = [orjson.loads(line) for line in exported.stdout.splitlines()]
    seen: Counter[str] = Counter()
    for session in sessions:
        messages = session["messages"]
        users = [m["content"] for m in messages if m["role"] == "user"]
        assert len(users) == len(set(users)), f"{session['session_id']}: a turn held twice"
        assert [m["role"] for m in messages] == ["user", "assistant"] * len(users)
        for user, reply in zip(messages[0::2], messages[1::2], strict=True):
            assert reply["content"] == user["content"]
            assert reply["request_id"] == user["request_id"]
        seen.update(users)
    decided = outcomes(logs)
    assert sum(1 for v in decided.values() if v == "ok") > 0, "the soak ran no turn"
    for token, outcome in decided.items():
        if outcome == "ok":
            assert seen[token] >= 1, f"turn {token} exited 0 but is in no session"
        elif outcome == "fail":
            assert seen[token] == 0, f"turn {token} exited non-zero but was stored"
