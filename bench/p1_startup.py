"""P1: a whole `foliko` process against the floor of importing its basics.

Four commands as real processes: the floor ``python -c "import click,
sqlite3, orjson"`` (the venv's interpreter), one ``foliko chat -s S "hi"``
turn (echo model, SQLite, a short session in a fresh FOLIKO_HOME), ``foliko
sessions list``, and the same chat turn with one stdio MCP server configured
(tests/mcp/stdio_server.py) that the turn does not call (its tool list is
cached, so it is not started); and, reported by time only, ``foliko mcp
serve`` from its start to its answer to a host's first ``tools/list``.

The judged figures count instructions (``valgrind --tool=callgrind``, one run
each: the count is the same whatever else the machine does), as SPEC P1 says:
chat at most 1.5x the floor, sessions list at most 1.25x, the turn with the
MCP server at most 1.05x the turn without. The times of the same commands,
run alternately, are reported beside them. Also reports the top of
``-X importtime``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import orjson
from common import (
    PYTHON,
    Result,
    Workspace,
    failed,
    foliko,
    interleaved,
    log,
    main_single,
    run_process,
)

LIMITS = {"chat": 1.5, "list": 1.25}
MCP_LIMIT = 1.05
SESSION = "bench"
FLOOR = [PYTHON, "-c", "import click, sqlite3, orjson"]
TOP = 15
MCP_SERVER = Path(__file__).resolve().parents[1] / "tests" / "mcp" / "stdio_server.py"


def importtime_top(argv: list[str], env: dict[str, str], top: int = TOP) -> list[list]:
    """[cumulative us, self us, module] of the ``top`` slowest imports by cumulative time."""
    proc = run_process([PYTHON, "-X", "importtime", *argv], env, capture=True)
    entries = []
    for line in proc.stderr.decode().splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        own, cumulative, name = line[len("import time:") :].split("|", 2)
        entries.append([int(cumulative), int(own), name.rstrip()])
    entries.sort(key=lambda entry: entry[0], reverse=True)
    return entries[:top]


def instructions(argv: list[str], env: dict[str, str]) -> float:
    """The instructions one process runs, by callgrind (millions)."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=True,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no count: {done.stderr[-200:]}")
    return int(found.group(1)) / 1e6


MCP_REQUESTS = b"".join(
    orjson.dumps(message) + b"\n"
    for message in (
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    )
)


def mcp_serve(env: dict[str, str]) -> None:
    """``foliko mcp serve`` from start to the answer of its first tools/list, then
    the end of its input: what a host waits for before it can offer the tools."""
    proc = subprocess.Popen(
        foliko("mcp", "serve"),
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(MCP_REQUESTS)
    proc.stdin.flush()
    answered = 0
    for line in proc.stdout:
        answered += 1
        if b'"id":2' in line:
            break
    proc.stdin.close()
    if proc.wait(120) != 0 or answered != 2:
        raise RuntimeError(f"foliko mcp serve exited {proc.returncode} after {answered} answers")


def run(ws: Workspace, quick: bool = False) -> list[Result]:
    runs = 3 if quick else 21
    home = ws.fresh("p1-home")
    env = ws.env(FOLIKO_HOME=str(home), FOLIKO_MODEL="echo")
    config = home / "mcp.toml"
    config.write_text(f'[mcp_servers.bench]\ncommand = "{PYTHON}"\nargs = ["{MCP_SERVER}"]\n')
    mcp_env = {**env, "FOLIKO_CONFIG": str(config)}
    commands = {
        "floor": (FLOOR, env),
        "chat": (foliko("chat", "-s", SESSION, "hi"), env),
        "list": (foliko("sessions", "list"), env),
        "mcp": (foliko("chat", "-s", SESSION + "-mcp", "hi"), mcp_env),
    }
    figures = {
        "floor": 'floor: python -c "import click, sqlite3, orjson"',
        "chat": 'foliko chat -s S "hi" (echo, sqlite)',
        "list": "foliko sessions list",
        "mcp": 'foliko chat -s S "hi" with one stdio MCP server, no call',
        "serve": "foliko mcp serve: started, initialize and tools/list answered, ended",
    }
    try:
        for _ in range(2):  # create the database and the sessions; warm the page cache
            for argv, environment in commands.values():
                run_process(argv, environment)  # the first MCP turn lists its tools
        log(f"P1: {runs} runs each of the floor, chat, sessions list and chat with MCP")
        timed = {key: (lambda c=command: run_process(*c)) for key, command in commands.items()}
        times = interleaved({**timed, "serve": lambda: mcp_serve(env)}, runs)
    except Exception as exc:
        return [failed("P1", "foliko chat / sessions list", "s", "reported", exc)]
    results = [Result("P1", figures[key] + ", time", "s", times[key]) for key in figures]
    if shutil.which("valgrind") is None:
        log("P1: valgrind is not installed: the instruction counts (the targets) are left out")
    else:
        results += counted(commands, figures)
    try:
        command = ["-m", "foliko_cli", "chat", "-s", SESSION, "hi"]
        results[1].details["importtime"] = {
            "command": "python -X importtime " + " ".join(command),
            "top": importtime_top(command, env),
        }
    except Exception as exc:
        log(f"P1: -X importtime failed: {exc}")
    return results


def counted(
    commands: dict[str, tuple[list[str], dict[str, str]]], figures: dict[str, str]
) -> list[Result]:
    """The instruction counts and their ratios against the targets."""
    try:
        count = {key: instructions(*command) for key, command in commands.items()}
    except Exception as exc:
        return [failed("P1", "instructions (callgrind)", "M instr", "<= 1.5x floor", exc)]
    results = [Result("P1", figures["floor"] + ", instructions", "M instr", [count["floor"]])]
    for key, limit in LIMITS.items():
        result = Result(
            "P1",
            figures[key] + ", instructions",
            "M instr",
            [count[key]],
            ratio=count[key] / count["floor"],
            ratio_label="of floor",
            target=f"<= {limit:g}x floor",
        )
        result.met = result.ratio is not None and result.ratio <= limit
        results.append(result)
    mcp = Result(
        "P1",
        figures["mcp"] + ", instructions",
        "M instr",
        [count["mcp"]],
        ratio=count["mcp"] / count["chat"],
        ratio_label="of chat",
        target=f"<= {MCP_LIMIT:g}x chat",
    )
    mcp.met = mcp.ratio is not None and mcp.ratio <= MCP_LIMIT
    return [*results, mcp]


if __name__ == "__main__":
    main_single(run, __doc__)
