"""P1: a whole `foliko` process against the floor of importing its basics.

Three commands, timed alternately as real processes: the floor
``python -c "import click, sqlite3, orjson"`` (the venv's interpreter), one
``foliko chat -s S "hi"`` turn (echo model, SQLite, a short session in a
fresh FOLIKO_HOME) and ``foliko sessions list``. Target: each foliko command
takes at most 2x the floor. Also reports the top of ``-X importtime``.
"""

from __future__ import annotations

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
SESSION = "bench"
FLOOR = [PYTHON, "-c", "import click, sqlite3, orjson"]
TOP = 15


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
    chat = foliko("chat", "-s", SESSION, "hi")
    listing = foliko("sessions", "list")
    target = f"<= {LIMIT:g}x floor"
    try:
        for _ in range(2):  # create the database and the session; warm the page cache
            run_process(chat, env)
        run_process(listing, env)
        run_process(FLOOR, env)
        log(f"P1: {runs} runs each of the floor, chat and sessions list")
        times = interleaved(
            {
                "floor": lambda: run_process(FLOOR, env),
                "chat": lambda: run_process(chat, env),
                "list": lambda: run_process(listing, env),
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
