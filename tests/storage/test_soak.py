"""A randomised soak: writer processes doing chat, fork, rename, vars and
import at random on a few sessions, killed with SIGKILL at random, on every
persistent backend, while sessions are damaged at random between writes (under
their lock, as tests/storage/damage.py does it: a message taken out, a count
changed, metadata removed, a symbolic link). Afterwards: every damage is
found by ``storage check`` and no writer changed a damaged session; once
repaired, every session loads, every turn is whole and held once per session,
every turn reported saved is there (or in a damaged session), every turn
reported failed is nowhere.

FOLIKO_SOAK_SECONDS sets how long each backend is soaked (``make soak``
runs minutes; the normal suite a few seconds). The seed is printed, and
FOLIKO_SOAK_SEED replays a run.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import orjson

from . import damage
from .backends import backend_of

SECONDS = float(os.environ.get("FOLIKO_SOAK_SECONDS", "6"))
WRITERS = 4
DAMAGES = 2
"""At most this many of the writers' three sessions are damaged (one always)."""

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


class Damages:
    """Sessions damaged while the writers run: under the session's lock, so no
    writer is half-way through it, and remembered as they were left (the raw
    snapshot) with the turns they held (whose writers may have reported them)."""

    def __init__(self, storage_url: str, home: Path, rng: random.Random):
        from foliko_cli.storage import open_storage

        self.loop = asyncio.Runner()
        self.storage = open_storage(storage_url, home)
        self.rng = rng
        self.kinds = sorted(set(backend_of(self.storage).holes) - {"no-content"})
        self.left: dict[str, object] = {}
        self.turns: dict[str, list[str]] = {}

    def maybe(self, ids: list[str]) -> None:
        if len(self.left) >= DAMAGES or (self.left and self.rng.random() < 0.5):
            return
        candidates = [sid for sid in ids if sid not in self.left]
        self.loop.run(self._damage(self.rng.choice(candidates), self.rng.choice(self.kinds)))

    async def _damage(self, session_id: str, kind: str) -> None:
        async with self.storage.lock(session_id, 60):
            record = await self.storage.load(session_id)
            if record is None or len(record.messages) < 2:
                return  # not there (renamed away) or too short yet: another time
            damage.damage(self.storage, session_id, kind)
            self.left[session_id] = damage.snapshot(self.storage, session_id)
            self.turns[session_id] = [m["content"] for m in record.messages if m["role"] == "user"]
            print(f"damaged {session_id!r}: {kind}")

    def assert_untouched(self) -> None:
        for session_id, left in self.left.items():
            assert damage.snapshot(self.storage, session_id) == left, f"{session_id} was written"

    def close(self) -> None:
        self.loop.run(self.storage.close())
        self.loop.close()


def test_random_writers_killed_at_random_lose_and_invent_nothing(storage_url, tmp_path):
    seed = int(os.environ.get("FOLIKO_SOAK_SEED", random.randrange(2**32)))
    print(f"soak seed {seed} (FOLIKO_SOAK_SEED={seed} replays it)")
    rng = random.Random(seed)
    env = {**os.environ, "FOLIKO_MODEL": "echo", "FOLIKO_HOME": str(tmp_path / "home")}
    ids = ["a", "b", "c"]
    logs: list[Path] = []
    running: list[subprocess.Popen] = []
    damages = Damages(storage_url, tmp_path / "home", random.Random(rng.randrange(2**32)))

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
        while time.monotonic() < deadline or not damages.left:
            assert time.monotonic() < deadline + 120, "no session grew long enough to damage"
            time.sleep(rng.uniform(0.3, 2.0))  # the moment of the next kill, at random
            damages.maybe(ids)
            victim = running.pop(rng.randrange(len(running)))
            victim.kill()
            victim.wait(timeout=60)
            start_writer()
    finally:
        for process in running:
            process.kill()
            process.wait(timeout=60)

    def foliko(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "foliko_cli", "--storage", storage_url, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    try:
        damages.assert_untouched()
        found = foliko("storage", "check", "--json")
        assert found.returncode == 3, found.stderr
        problems = [p for p in orjson.loads(found.stdout) if p["kind"] == "session"]
        assert sorted(p["session_id"] for p in problems) == sorted(damages.left), found.stdout
        repaired = foliko("storage", "check", "--repair")
        assert repaired.returncode == 0, repaired.stderr
    finally:
        damages.close()
    check = foliko("storage", "check")
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
    for held in damages.turns.values():  # moved aside with their damaged session
        seen.update(held)
    decided = outcomes(logs)
    assert sum(1 for v in decided.values() if v == "ok") > 0, "the soak ran no turn"
    for token, outcome in decided.items():
        if outcome == "ok":
            assert seen[token] >= 1, f"turn {token} exited 0 but is in no session"
        elif outcome == "fail":
            assert seen[token] == 0, f"turn {token} exited non-zero but was stored"
