"""P1: a whole `foliko` process against the floor of importing its basics.

Four commands, timed alternately as real processes: the floor
``python -c "import click, sqlite3, orjson"`` (the venv's interpreter), one
``foliko chat -s S "hi"`` turn (echo model, SQLite, a short session in a
fresh FOLIKO_HOME), ``foliko sessions list``, and the same chat turn with one
stdio MCP server configured (tests/mcp/stdio_server.py) that the turn does
not call. Targets: each foliko command takes at most 2x the floor; the turn
with the MCP server at most 1.1x the turn without (its tool list is cached,
so it is not started). Also reports the top of ``-X importtime``.
"""

from __future__ import annotations

from pathlib import Path

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

LIMIT = 2.0
MCP_LIMIT = 1.1
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


def run(ws: Workspace, quick: bool = False) -> list[Result]:
    runs = 3 if quick else 21
    home = ws.fresh("p1-home")
    env = ws.env(FOLIKO_HOME=str(home), FOLIKO_MODEL="echo")
    config = home / "mcp.toml"
    config.write_text(f'[mcp_servers.bench]\ncommand = "{PYTHON}"\nargs = ["{MCP_SERVER}"]\n')
    mcp_env = {**env, "FOLIKO_CONFIG": str(config)}
    chat = foliko("chat", "-s", SESSION, "hi")
    mcp_chat = foliko("chat", "-s", SESSION + "-mcp", "hi")
    listing = foliko("sessions", "list")
    target = f"<= {LIMIT:g}x floor"
    try:
        for _ in range(2):  # create the database and the sessions; warm the page cache
            run_process(chat, env)
            run_process(mcp_chat, mcp_env)  # the first lists the server's tools
        run_process(listing, env)
        run_process(FLOOR, env)
        log(f"P1: {runs} runs each of the floor, chat, sessions list and chat with MCP")
        times = interleaved(
            {
                "floor": lambda: run_process(FLOOR, env),
                "chat": lambda: run_process(chat, env),
                "list": lambda: run_process(listing, env),
                "mcp": lambda: run_process(mcp_chat, mcp_env),
            },
            runs,
        )
    except Exception as exc:
        return [failed("P1", "foliko chat / sessions list", "s", target, exc)]
    floor = Result("P1", 'floor: python -c "import click, sqlite3, orjson"', "s", times["floor"])
    results = [floor]
    for key, figure in (
        ("chat", 'foliko chat -s S "hi" (echo, sqlite)'),
        ("list", "foliko sessions list"),
    ):
        result = Result("P1", figure, "s", times[key], ratio_label="of floor", target=target)
        result.ratio = result.median / floor.median
        result.met = result.ratio <= LIMIT
        results.append(result)
    with_mcp = Result(
        "P1",
        'foliko chat -s S "hi" with one stdio MCP server, no call',
        "s",
        times["mcp"],
        ratio_label="of chat",
        target=f"<= {MCP_LIMIT:g}x chat",
    )
    with_mcp.ratio = with_mcp.median / results[1].median
    with_mcp.met = with_mcp.ratio <= MCP_LIMIT
    results.append(with_mcp)
    try:
        command = ["-m", "foliko_cli", "chat", "-s", SESSION, "hi"]
        results[1].details["importtime"] = {
            "command": "python -X importtime " + " ".join(command),
            "top": importtime_top(command, env),
        }
    except Exception as exc:
        log(f"P1: -X importtime failed: {exc}")
    return results


if __name__ == "__main__":
    main_single(run, __doc__)
