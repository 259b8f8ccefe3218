"""VS: foliko beside llm (the dev environment's llm 0.36) on the commands both have.

Each pair runs as real processes, alternately, in homes of their own holding
the same 200 conversations of 4 messages (llm's logs.db, foliko's SQLite):
``--version``; one turn of an offline model (foliko's ``echo``, llm's
``echo`` plugin when installed, else skipped); listing the conversations
(``sessions list`` / ``logs list --json -n 0`` — llm's cheapest listing of
all); a full-text search for a word in one of them. The figure is the
median of each and foliko's time as a share of llm's. Reported, no target:
what the README's comparison quotes.
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path

from common import PYTHON, Result, Workspace, failed, foliko, interleaved, log, main_single
from common import run_process as run_process

CONVERSATIONS = 200
LLM = str(Path(sys.executable).with_name("llm"))


def _seed_llm(home: Path) -> None:
    """llm's own database, made by llm's own migrations, then filled."""
    path = home / "logs.db"
    made = (
        "import sqlite_utils, llm.migrations as m, sys;"
        " m.migrate(sqlite_utils.Database(sys.argv[1]))"
    )
    run_process([PYTHON, "-c", made, str(path)], {}, capture=True)
    db = sqlite3.connect(path)
    with db:
        for n in range(CONVERSATIONS):
            cid = f"01conv{n:020d}"
            db.execute(
                "INSERT INTO conversations (id, name, model) VALUES (?, ?, ?)",
                (cid, f"conversation {n}", "echo"),
            )
            for turn in range(2):
                db.execute(
                    "INSERT INTO responses (id, model, prompt, response, conversation_id, "
                    "datetime_utc) VALUES (?, 'echo', ?, ?, ?, '2026-01-01T00:00:00')",
                    (f"01resp{n:016d}{turn}", f"question {n}.{turn} kubelet{n}", "an answer", cid),
                )
    db.close()


def run(ws: Workspace, quick: bool = False) -> list[Result]:
    runs = 3 if quick else 11
    if not Path(LLM).exists():
        return [failed("VS", "foliko beside llm", "s", "", RuntimeError("llm is not installed"))]
    foliko_home, llm_home = ws.fresh("vs-foliko"), ws.fresh("vs-llm")
    env = ws.env(FOLIKO_HOME=str(foliko_home), FOLIKO_MODEL="echo")
    llm_env = ws.env(LLM_USER_PATH=str(llm_home))
    try:
        _seed_llm(llm_home)
        imported = run_process(
            foliko("sessions", "import", "--format", "llm", str(llm_home / "logs.db")),
            env,
            capture=True,
        )
        if imported.returncode != 0:
            raise RuntimeError(imported.stderr.decode()[-300:])
    except Exception as exc:
        return [failed("VS", "foliko beside llm: the data", "s", "", exc)]
    pairs = {
        "--version": (foliko("--version"), [LLM, "--version"]),
        "list every conversation": (
            foliko("sessions", "list", "--json"),
            [LLM, "logs", "list", "--json", "-n", "0"],
        ),
        "search a word": (
            foliko("sessions", "search", "kubelet7"),
            [LLM, "logs", "list", "-q", "kubelet7", "--json"],
        ),
    }
    plugins = run_process([LLM, "models", "list"], llm_env, capture=True).stdout.decode()
    if "echo" in plugins:
        pairs["a turn (offline echo model)"] = (
            foliko("chat", "-s", "vs", "hi"),
            [LLM, "-m", "echo", "hi"],
        )
    else:
        log("VS: llm has no echo model here (llm-echo is not installed): no turn figure")
    results = []
    for figure, (ours, theirs) in pairs.items():
        log(f"VS: {runs} runs each of {figure}")
        times = interleaved(
            {
                "foliko": lambda a=ours: run_process(a, env),
                "llm": lambda b=theirs: run_process(b, llm_env),
            },
            runs,
        )
        mine = Result("VS", f"foliko, {figure}", "s", times["foliko"])
        mine.ratio = mine.median / Result("VS", "", "s", times["llm"]).median
        mine.ratio_label = "of llm's"
        results += [mine, Result("VS", f"llm, {figure}", "s", times["llm"])]
    return results


if __name__ == "__main__":
    assert shutil.which(PYTHON) or Path(PYTHON).exists()
    main_single(run, __doc__)
