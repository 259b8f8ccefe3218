"""The README's examples, run as written: every ``sh``, ``console`` and ``python``
block is either run here (in bash, or Python, in an empty directory with its
own FOLIKO_HOME) or listed with the reason it cannot run offline. A new block
fails the test until it is one or the other.

The pipeline examples run over sessions whose ids hold spaces, quotes and a
leading dash, the names ``xargs`` without ``-0`` breaks on.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import orjson
import pytest

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"
BIN = Path(sys.executable).parent
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
TRICKY_IDS = ["my notes", 'it\'s "quoted"', "-draft", "plain"]


class Block(NamedTuple):
    language: str
    text: str

    @property
    def first(self) -> str:
        return self.text.strip().splitlines()[0]


def blocks() -> list[Block]:
    return [
        Block(language, text)
        for language, text in FENCE.findall(README.read_text(encoding="utf-8"))
        if language in ("sh", "console", "bash", "python")
    ]


class Run(NamedTuple):
    """How a block runs: ``setup`` (bash) first; lines holding one of ``leave_out``'s
    keys are left out, for the reason given."""

    setup: str = ""
    leave_out: tuple[tuple[str, str], ...] = ()
    each_line: bool = False
    """Each line is an example of its own, run after ``setup`` in a fresh directory."""


def seeded(ids: list[str]) -> str:
    """Bash that makes one session per id (the ids passed through a file, untouched)."""
    return (
        "printf '%s\\0' " + " ".join(_quote(i) for i in ids) + " > ids\n"
        "xargs -0 -I{} foliko chat -s {} 'deploy the kubelet: connection refused' < ids "
        "> /dev/null\n"
    )


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


RUN: dict[str, Run | str] = {
    "$ foliko chat --session s1": Run(),
    "make demo": "builds a virtualenv and runs the whole test suite",
    "foliko sessions list -0 | xargs -0": Run(setup=seeded(TRICKY_IDS)),
    'foliko chat -s s1 "hi"': Run(
        setup="git init -q . && printf '# notes\\nbuy milk\\n' > notes.md\n"
        + "printf 'def forecast(city: str) -> str:\\n    return city\\n' > mytools.py\n"
        + seeded(["s1"])
        + "foliko chat -s s1 'and a second turn' > /dev/null\n",
        each_line=True,
        leave_out=(
            ("foliko chat -s s1                            #", "the loop needs a terminal"),
            ("--schema person.json", "the offline echo model writes no JSON"),
            ("-m openai:gpt-4o", "needs OpenAI's service and a key"),
        ),
    ),
    "foliko sessions list [--sort": "a synopsis of each command's options, not commands",
    "foliko sessions compact s1 --keep 1": Run(
        setup=seeded(["s1"])
        + "foliko chat -s s1 'a second turn' > /dev/null\n"
        + "foliko chat -s s2 --from s1 --turns 1 'a fork' > /dev/null\n"
    ),
    "foliko sessions search deploy": Run(
        setup=seeded(["ops"]) + "foliko chat -s ops 'Größe' > /dev/null\n"
    ),
    "foliko usage ": Run(setup=seeded(["s1"])),
    "foliko sessions export --all -o backup.json": Run(setup=seeded(["s1"])),
    "foliko sessions import conversations.json": (
        "needs other tools' exports and logs (ChatGPT, llm, Claude Code, Codex, Open WebUI); "
        "the importer tests cover each"
    ),
    "foliko storage migrate json sqlite": Run(
        setup="FOLIKO_STORAGE=json foliko chat -s s1 hi > /dev/null\n",
        leave_out=(
            ("sqlite:////srv/a.db", "writes under /srv"),
            ("[--repair]", "a synopsis of the options"),
            ("[--json]", "a synopsis of the options"),
        ),
    ),
    "foliko models list": Run(setup="printf 'system_prompt = \"Be brief.\"\\n' > foliko.toml\n"),
    "cat foliko.toml": Run(
        setup="git init -q . && printf 'tools = [\"mytools:forecast\"]\\n' > foliko.toml\n"
        + "printf 'def forecast(city: str) -> str:\\n    return city\\n' > mytools.py\n"
    ),
    "foliko keys set openai < openai.key": Run(setup="printf 'sk-example\\n' > openai.key\n"),
    "$ foliko chat --save summarise": Run(),
    "cat > mytools.py": Run(),
    "OPENAI_BASE_URL=http://127.0.0.1:8000/v1": "needs an OpenAI-compatible server on port 8000",
    "mkdir -p .foliko/skills/packing": Run(),
    "mkdir -p docs": "npx downloads the MCP filesystem server (tests/mcp runs it where cached)",
    "foliko mcp login tracker": (
        "needs a server behind OAuth and a browser (tests/mcp/test_mcp_oauth.py runs both)"
    ),
    "foliko mcp resources everything": (
        "npx downloads the MCP reference server (tests/mcp/test_mcp_resources.py runs it)"
    ),
    "foliko mcp prompts everything": (
        "npx downloads the MCP reference server (tests/mcp/test_mcp_prompts.py runs it)"
    ),
    "FOLIKO_STORAGE=json foliko chat -s notes": Run(),
    ".venv/bin/pip install -e '.[postgres]'": "installs packages and needs PostgreSQL",
    ".venv/bin/pip install -e '.[serve]'": "installs packages and keeps a server running",
    "curl -s localhost:8080/v1/responses": "needs foliko serve running on port 8080",
    "from openai import OpenAI": "needs foliko serve running on port 8080",
    "from foliko_cli import Foliko": Run(),
    "import asyncio": Run(),
}


def plan_for(block: Block) -> Run | str | None:
    """The one entry of RUN whose key begins the block's first line."""
    found = [plan for key, plan in RUN.items() if block.first.startswith(key)]
    assert len(found) <= 1, block.first
    return found[0] if found else None


def test_every_example_is_run_or_says_why_not():
    unplanned = [block.first for block in blocks() if plan_for(block) is None]
    assert unplanned == [], "a new README example: run it here or say why not"
    stale = [key for key in RUN if not any(b.first.startswith(key) for b in blocks())]
    assert stale == [], "an example the README no longer has"


RUNNABLE = [b for b in blocks() if isinstance(plan_for(b), Run)]


class Sandbox:
    """An empty directory with its own FOLIKO_HOME and user config, no keys."""

    def __init__(self, root: Path):
        self.work = root / "work"
        self.work.mkdir(parents=True, exist_ok=True)
        config = root / "user-config.toml"
        config.touch()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FOLIKO_", "OPENAI_"))}
        self.env = {
            **env,
            "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            "FOLIKO_HOME": str(root / "home"),
            "FOLIKO_CONFIG": str(config),
            "OLLAMA_HOST": "127.0.0.1:9",
            "NO_COLOR": "1",
        }

    def bash(self, code: str) -> subprocess.CompletedProcess:
        return self.run(["bash", "-c", "set -euo pipefail\n" + code])

    def run(self, argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(
            argv,
            cwd=self.work,
            env=self.env,
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
        )


def prepared(root: Path, plan: Run) -> Sandbox:
    sandbox = Sandbox(root)
    if plan.setup:
        done = sandbox.bash(plan.setup)
        assert done.returncode == 0, done.stderr.decode()
    return sandbox


def kept_lines(block: Block, plan: Run, work: Path) -> list[str]:
    return [
        line.replace("/tmp/scratch.db", f"{work}/scratch.db")
        for line in block.text.splitlines()
        if not any(key in line for key, _reason in plan.leave_out)
    ]


def console_steps(text: str) -> list[tuple[str, list[str]]]:
    """``$ command`` lines and the output lines shown after each."""
    steps: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
    return steps


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.first[:40].strip() for b in RUNNABLE])
def test_the_example_runs_as_written(block: Block, tmp_path: Path):
    plan = plan_for(block)
    assert isinstance(plan, Run)
    if plan.each_line:
        template = tmp_path / "template"
        prepared(template, plan)
        for index, line in enumerate(kept_lines(block, plan, template / "work")):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            shutil.copytree(template, tmp_path / f"line{index}", symlinks=True)
            done = Sandbox(tmp_path / f"line{index}").bash(line)
            assert done.returncode == 0, (line, done.stderr.decode())
        return
    sandbox = prepared(tmp_path, plan)
    if block.language == "python":
        done = sandbox.run([sys.executable, "-c", block.text])
        assert done.returncode == 0, done.stderr.decode()
    elif block.language == "console":
        for command, shown in console_steps(block.text):
            done = sandbox.bash(command)
            assert done.returncode == 0, (command, done.stderr.decode())
            if shown:
                assert done.stdout.decode().splitlines() == shown, command
    else:
        done = sandbox.bash("\n".join(kept_lines(block, plan, sandbox.work)))
        assert done.returncode == 0, done.stderr.decode()


def test_the_pipelines_take_every_id_foliko_accepts(tmp_path: Path):
    (block,) = [b for b in blocks() if "xargs -0" in b.text]
    sandbox = prepared(tmp_path, Run(setup=seeded(TRICKY_IDS)))
    show, first, export = block.text.strip().splitlines()

    shown = sandbox.bash(show)
    assert shown.returncode == 0, shown.stderr.decode()
    for session_id in TRICKY_IDS:
        assert f"session   {session_id}\n" in shown.stdout.decode()
    assert sandbox.bash(first).returncode == 0
    exported = sandbox.bash(export)
    assert exported.returncode == 0, exported.stderr.decode()
    sessions = orjson.loads((sandbox.work / "recent.json").read_bytes())
    assert sorted(s["session_id"] for s in sessions) == sorted(TRICKY_IDS)


def test_the_old_pipelines_broke_on_those_ids(tmp_path: Path):
    """What the README showed before: ``-q | xargs`` splits and misreads these ids."""
    sandbox = prepared(tmp_path, Run(setup=seeded(TRICKY_IDS)))
    old = sandbox.bash("foliko sessions list -q | xargs -r foliko sessions export > recent.json")
    assert old.returncode != 0
