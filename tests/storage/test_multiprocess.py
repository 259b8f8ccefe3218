"""Real `foliko` processes at once on every backend, and processes killed with SIGKILL.

No sleeps: processes run flat out and the test waits for them (with timeouts
that only bound a hang); a lock holder says when it holds the lock.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import orjson
import pytest

FOLIKO = Path(sys.executable).with_name("foliko")

PROCESSES = 8
TURNS = 25
HANG = 300  # seconds: only ever reached when something hangs


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "FOLIKO_MODEL": "echo", "FOLIKO_HOME": str(tmp_path / "home")}


def foliko(*args: str, env: dict[str, str], timeout: float = HANG) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(FOLIKO), *args],
        env=env,
        capture_output=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def show(url: str, session_id: str, env: dict[str, str]) -> dict:
    result = foliko("--storage", url, "sessions", "show", session_id, "--json", env=env)
    assert result.returncode == 0, result.stderr.decode()
    return orjson.loads(result.stdout)


TURN_TAKER = textwrap.dedent(
    """
    import sys
    from click.testing import CliRunner
    from foliko_cli.cli.main import cli
    url, i, turns = sys.argv[1], sys.argv[2], int(sys.argv[3])
    runner = CliRunner()
    for j in range(turns):
        done = runner.invoke(cli, ["--storage", url, "chat", "-s", "same", f"p{i}-{j}"])
        if done.exit_code != 0 or done.stdout.strip() != f"p{i}-{j}":
            sys.exit(f"turn p{i}-{j}: exit {done.exit_code}: {done.stderr}")
    """
)
"""Each worker is one process running the whole `foliko chat` command for every
turn (settings, a new facade, the storage opened, locked, written and closed),
without paying for an interpreter start each time."""


def failures_of(scripts: list[list[str]], env: dict[str, str]) -> list[str]:
    """Run ``python -c SCRIPT ARGS...`` for each at once; the stderr of each that failed."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", *script],
            env=env,
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for script in scripts
    ]
    failures = []
    for process in processes:
        _, stderr = process.communicate(timeout=HANG)
        if process.returncode != 0:
            failures.append(stderr.decode())
    return failures


def test_eight_processes_taking_turns_on_one_session_lose_nothing(storage_url, env):
    workers = [[TURN_TAKER, storage_url, str(i), str(TURNS)] for i in range(PROCESSES)]
    assert failures_of(workers, env) == []

    messages = show(storage_url, "same", env)["messages"]
    assert len(messages) == 2 * PROCESSES * TURNS
    users = [m["content"] for m in messages[0::2]]
    assert [m["role"] for m in messages] == ["user", "assistant"] * (PROCESSES * TURNS)
    for user, reply in zip(messages[0::2], messages[1::2], strict=True):
        assert reply["content"] == user["content"]
        assert reply["request_id"] == user["request_id"]
    expected = {f"p{i}-{j}" for i in range(PROCESSES) for j in range(TURNS)}
    assert Counter(users) == Counter(expected)
    for i in range(PROCESSES):  # each process's own turns stay in its order
        own = [u for u in users if u.startswith(f"p{i}-")]
        assert own == [f"p{i}-{j}" for j in range(TURNS)]


HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from foliko_cli.storage import open_storage

    async def main():
        storage = open_storage(sys.argv[1], Path(sys.argv[2]))
        async with storage.lock("same", 10):
            print("locked", flush=True)
            await asyncio.to_thread(sys.stdin.readline)  # hold it, renewed, until killed

    asyncio.run(main())
    """
)


def test_a_lock_holder_killed_with_sigkill_does_not_block_the_session(storage_url, env, tmp_path):
    assert foliko("--storage", storage_url, "chat", "-s", "same", "before", env=env).returncode == 0
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, storage_url, str(tmp_path / "home")],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        line = holder.stdout.readline()
        if line != b"locked\n":
            holder.kill()
            pytest.fail(f"the holder did not lock: {line!r} {holder.stderr.read().decode()}")

        busy = foliko(
            "--storage", storage_url, "chat", "--timeout", "0.3", "-s", "same", "no", env=env
        )
        assert busy.returncode == 4, busy.stderr.decode()
        assert f"pid {holder.pid}".encode() in busy.stderr
        other = foliko("--storage", storage_url, "chat", "-s", "other", "free", env=env)
        assert other.returncode == 0, other.stderr.decode()

        os.kill(holder.pid, signal.SIGKILL)
        assert holder.wait(timeout=HANG) == -signal.SIGKILL
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=HANG)
        holder.stdin.close()
        holder.stdout.close()
        holder.stderr.close()

    after = foliko(
        "--storage", storage_url, "chat", "--timeout", "30", "-s", "same", "after", env=env
    )
    assert after.returncode == 0, after.stderr.decode()
    assert after.stdout == b"after\n"
    contents = [m["content"] for m in show(storage_url, "same", env)["messages"]]
    assert contents == ["before", "before", "after", "after"]


RACER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from foliko_cli.storage import open_storage
    from foliko_cli.errors import ConflictError
    from foliko_cli.messages.record import SessionState

    async def main():
        storage = open_storage(sys.argv[1], Path(sys.argv[2]))
        revision = await storage.revision("race")
        message = {"role": "user", "content": sys.argv[3]}
        state = SessionState({}, {"created_at": 1}, {})
        print("ready", flush=True)
        sys.stdin.readline()  # everyone starts together
        try:
            await storage.append("race", [message], state, expected_revision=revision)
            print("kept", flush=True)
        except ConflictError:
            print("conflict", flush=True)
        await storage.close()

    asyncio.run(main())
    """
)


def test_writers_that_skip_the_turn_lock_still_never_lose_an_update(storage_url, env, tmp_path):
    home = str(tmp_path / "home")
    seed = textwrap.dedent(
        """
        import asyncio, sys
        from pathlib import Path
        from foliko_cli.storage import open_storage
        from foliko_cli.messages.record import SessionState

        async def main():
            storage = open_storage(sys.argv[1], Path(sys.argv[2]))
            first = {"role": "user", "content": "first"}
            await storage.append("race", [first], SessionState({}, {}, {}), expected_revision=0)
            await storage.close()

        asyncio.run(main())
        """
    )
    subprocess.run(
        [sys.executable, "-c", seed, storage_url, home], env=env, check=True, timeout=HANG
    )
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, storage_url, home, f"racer {i}"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        for i in range(6)
    ]
    for racer in racers:
        assert racer.stdout.readline() == b"ready\n"
    for racer in racers:
        racer.stdin.write(b"go\n")
        racer.stdin.flush()
    outcomes = [racer.communicate(timeout=HANG)[0].strip() for racer in racers]
    assert all(racer.returncode == 0 for racer in racers)
    assert sorted(outcomes) == [b"conflict"] * 5 + [b"kept"]
    winner = outcomes.index(b"kept")
    contents = [m["content"] for m in show(storage_url, "race", env)["messages"]]
    assert contents == ["first", f"racer {winner}"]


def test_turns_on_different_sessions_never_wait_for_each_other(storage_url, env, tmp_path):
    """While one session is held, eight processes on eight other sessions all finish."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, storage_url, str(tmp_path / "home")],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert holder.stdout.readline() == b"locked\n", holder.stderr.read().decode()
        others = [
            subprocess.Popen(
                [
                    str(FOLIKO),
                    "--storage",
                    storage_url,
                    "chat",
                    "--timeout",
                    "60",
                    "-s",
                    f"other-{i}",
                    f"free {i}",
                ],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for i in range(PROCESSES)
        ]
        for i, process in enumerate(others):
            out, err = process.communicate(timeout=HANG)
            assert process.returncode == 0, err.decode()
            assert out == f"free {i}\n".encode()
        assert holder.poll() is None  # "same" was held the whole time
    finally:
        holder.kill()
        holder.communicate(timeout=HANG)


def test_a_writer_killed_at_random_moments_leaves_only_whole_turns(storage_url, env):
    """SIGKILL 50 times, somewhere between start and end of a turn: nothing half-saved."""
    rng = random.Random(1234)
    completed = 0
    for attempt in range(50):
        process = subprocess.Popen(
            [str(FOLIKO), "--storage", storage_url, "chat", "-s", "crash", f"turn {attempt}"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            process.wait(timeout=rng.uniform(0.0, 0.6))
            completed += process.returncode == 0
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=HANG)
    final = foliko("--storage", storage_url, "chat", "-s", "crash", "final", env=env)
    assert final.returncode == 0, final.stderr.decode()
    messages = show(storage_url, "crash", env)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"] * (len(messages) // 2)
    for user, reply in zip(messages[0::2], messages[1::2], strict=True):
        assert reply["content"] == user["content"]
        assert reply["request_id"] == user["request_id"]
    texts = [m["content"] for m in messages[0::2]]
    assert len(texts) == len(set(texts))
    assert texts[-1] == "final"
    assert len(texts) - 1 >= completed


# the trash: clear, delete and restore racing turns

TRASH_WRITERS, TRASH_TURNS, ROUNDS = 4, 15, 12

JANITOR = """
import sys
from click.testing import CliRunner
from foliko_cli.cli.main import cli
url, rounds = sys.argv[1], int(sys.argv[2])
runner = CliRunner()
while runner.invoke(cli, ["--storage", url, "sessions", "show", "same"]).exit_code:
    pass  # until the writers have made it
for k in range(rounds):
    for args in (
        ["sessions", "clear", "same"],
        ["sessions", "delete", "same"],
        ["sessions", "restore", "same", "--as", f"kept-{k}"],
    ):
        done = runner.invoke(cli, ["--storage", url, *args])
        if done.exit_code not in (0, 2):  # 2: nothing to clear, delete or restore just now
            sys.exit(f"{args}: exit {done.exit_code}: {done.stderr}")
"""


def test_writers_racing_clear_delete_and_restore_lose_and_duplicate_nothing(storage_url, env):
    writers = [[TURN_TAKER, storage_url, str(i), str(TRASH_TURNS)] for i in range(TRASH_WRITERS)]
    assert failures_of([*writers, [JANITOR, storage_url, str(ROUNDS)]], env) == []

    target = ("--storage", storage_url)
    rows = orjson.loads(foliko(*target, "sessions", "trash", "list", "--json", env=env).stdout)
    for n, row in enumerate(rows):  # everything still in the trash comes back too
        back = foliko(*target, "sessions", "restore", row["id"], "--as", f"rest-{n}", env=env)
        assert back.returncode == 0, back.stderr.decode()
    users = []
    listed = orjson.loads(foliko(*target, "sessions", "list", "--json", env=env).stdout)
    for row in listed:
        shown = foliko(*target, "sessions", "show", row["session_id"], "--json", env=env)
        messages = orjson.loads(shown.stdout)["messages"]
        assert [m["role"] for m in messages] == ["user", "assistant"] * (len(messages) // 2)
        users += [m["content"] for m in messages[0::2]]
    expected = [f"p{i}-{j}" for i in range(TRASH_WRITERS) for j in range(TRASH_TURNS)]
    assert sorted(users) == sorted(expected)  # every turn once: none lost, none doubled
    assert "kept-0" in [row["session_id"] for row in listed]
