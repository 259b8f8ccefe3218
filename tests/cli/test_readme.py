"""The README's and the documentation's examples, run as written.

Each page (README.md, then every docs/*.md) runs in an empty directory with its
own FOLIKO_HOME and user config, no keys: its ``console`` blocks command by
command (``$ `` lines; a line ending in `` \\`` goes on on the next; the lines
shown after a command are its exact stdout, ``...`` standing for any lines,
trailing blanks left out; an ``export`` holds for the rest of the page), its
``python`` blocks as scripts, in the order the page has them, so no example
may lean on a file made further down. A block after ``<!-- file: PATH -->`` is
written to PATH there (that is how a page makes the files its examples use).

A block after ``<!-- requires: NAME -->`` needs something a fresh home does not
have. It runs on its own: ``postgres`` and ``redis`` blocks against this
machine's servers (every ``postgresql://`` or ``redis://`` URL in the block is
replaced by the test server's, in a fresh schema or key prefix), and
``llama-server`` blocks against a llama-server of their own (every
``http://127.0.0.1:PORT`` replaced by its address); they skip when the server
or binary is missing, and fail then under FOLIKO_REQUIRE_SERVICES=1. A
``serve`` block runs beside a ``foliko serve`` started for it (on a free port
where the block says 8080; its ``$ foliko serve`` line is that server). The
other names are reported as skipped, with the reason in NEEDS.

Shell examples are ``console`` blocks (never ``sh``: those would not run), and
an option synopsis is a ``text`` block or a table, never a command to copy.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import orjson
import pytest
from e2e.server import REQUIRED, LlamaServer, binary_problem, free_port
from storage.services import fresh_prefix, fresh_schema, require_postgres, require_redis

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent
TRICKY_IDS = ["my notes", 'it\'s "quoted"', "-draft", "plain"]
MARK = re.compile(r"^<!--\s*(requires|file):\s*(\S+)\s*-->$")
README_MAX_LINES = 400

NEEDS = {
    "postgres": "a PostgreSQL server",
    "redis": "a Redis server",
    "checkout": "make in a fresh checkout: it builds .venv (.ci/run runs make test)",
    "llama-server": "llama.cpp's llama-server serving a model",
    "model-download": "a model downloaded and llama-server started (tests/e2e/server.py does it)",
    "openai": "OpenAI's service and a key",
    "serve": "foliko serve on port 8080",
    "npx": "npx downloading an MCP server (tests/mcp runs them where cached)",
    "browser": "a browser and a server behind OAuth (tests/mcp/test_mcp_oauth.py runs both)",
    "exports": "other tools' exports (tests/cli/imports covers each format)",
    "terminal": "a person at a terminal",
}


class Block(NamedTuple):
    page: Path
    line: int
    language: str
    text: str
    requires: str | None = None
    file: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page, each with the marker on the line before it."""
    found: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        fence = line.lstrip()
        if not fence.startswith("```"):
            index += 1
            continue
        indent = len(line) - len(fence)
        end = next(i for i in range(index + 1, len(lines)) if lines[i].strip() == "```")
        marker = MARK.match(lines[index - 1].strip()) if index else None
        kind, value = marker.groups() if marker else ("", "")
        found.append(
            Block(
                page,
                index + 1,
                fence[3:].strip(),
                "".join(f"{text[indent:]}\n" for text in lines[index + 1 : end]),
                requires=value if kind == "requires" else None,
                file=value if kind == "file" else None,
            )
        )
        index = end + 1
    return found


def console_steps(text: str) -> list[tuple[str, list[str]]]:
    """``$ command`` lines (joined over trailing backslashes) and the output shown."""
    steps: list[tuple[str, list[str]]] = []
    going_on = False
    for line in text.splitlines():
        if going_on:
            steps[-1] = (f"{steps[-1][0]}\n{line}", [])
        elif line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
        going_on = bool(steps) and not steps[-1][1] and line.endswith("\\")
    return steps


def shown_matches(shown: list[str], printed: list[str]) -> bool:
    """Line by line, ``...`` standing for any number of lines."""
    if not shown:
        return not printed
    if shown[0] == "...":
        return any(shown_matches(shown[1:], printed[i:]) for i in range(len(printed) + 1))
    return bool(printed) and shown[0] == printed[0] and shown_matches(shown[1:], printed[1:])


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

    def play(self, block: Block) -> None:
        """Run (or write) one block as the page shows it; fail on the first surprise."""
        if block.file:
            path = self.work / block.file
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.text, encoding="utf-8")
        elif block.language == "python":
            done = self.run([sys.executable, "-c", block.text])
            assert done.returncode == 0, (block.where, done.stderr.decode())
        elif block.language == "console":
            for command, shown in console_steps(block.text):
                done = self.bash(command + "\nenv -0 > ../env" if _exports(command) else command)
                if _exports(command) and done.returncode == 0:
                    pairs = (self.work.parent / "env").read_text().split("\0")
                    self.env = dict(pair.split("=", 1) for pair in pairs if pair)
                assert done.returncode == 0, (block.where, command, done.stderr.decode())
                printed = [line.rstrip() for line in done.stdout.decode().splitlines()]
                while printed and not printed[-1]:
                    printed.pop()
                assert not shown or shown_matches(shown, printed), (block.where, command, printed)


def _exports(command: str) -> bool:
    """``export`` holds for the commands after it on the page, as in a shell."""
    return command.startswith("export ")


def runs(block: Block) -> bool:
    return bool(block.file) or block.language in ("console", "python")


ALL = [block for page in PAGES for block in blocks(page)]
MARKED = [block for block in ALL if block.requires]


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_the_page_s_examples_run_in_order_on_a_fresh_home(page: Path, tmp_path: Path):
    sandbox = Sandbox(tmp_path)
    for block in blocks(page):
        if runs(block) and not block.requires:
            sandbox.play(block)


@pytest.mark.slow
@pytest.mark.parametrize("block", MARKED, ids=[block.where for block in MARKED])
def test_an_example_that_needs_a_service_runs_where_there_is_one(block: Block, tmp_path: Path):
    assert block.requires
    if block.requires == "postgres":
        url = require_postgres()
        with fresh_schema(url) as schema:
            _play_against(
                block, tmp_path, r"postgresql://\S+?(?=[\s'\"]|$)", f"{url}?schema={schema}"
            )
    elif block.requires == "redis":
        url = require_redis()
        with fresh_prefix(url) as prefix:
            _play_against(block, tmp_path, r"redis://\S+?(?=[\s'\"]|$)", f"{url}?prefix={prefix}")
    elif block.requires == "llama-server" and (problem := binary_problem()) is None:
        server = LlamaServer(tmp_path / "llama-server.log").start()
        try:
            _play_against(block, tmp_path, r"http://127\.0\.0\.1:\d+", server.url)
        finally:
            server.stop()
    elif block.requires == "serve":
        _play_beside_a_server(block, tmp_path)
    elif block.requires == "llama-server" and REQUIRED:
        pytest.fail(f"FOLIKO_REQUIRE_SERVICES=1 but {problem}")
    else:
        pytest.skip(f"{block.where} needs {NEEDS[block.requires]}")


def _play_beside_a_server(block: Block, tmp_path: Path) -> None:
    """``foliko serve`` started here (on a free port where the page says 8080), then
    the block's other commands."""
    sandbox = Sandbox(tmp_path)
    port = str(free_port())
    server = subprocess.Popen(
        [BIN / "foliko", "serve", "--port", port],
        cwd=sandbox.work,
        env=sandbox.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert server.stderr
        said = b""
        while b"listening on" not in said and (line := server.stderr.readline()):
            said += line  # until it listens, or ends (then the assert says why)
        assert b"listening on" in said, said.decode()
        lines = block.text.replace("8080", port).splitlines(keepends=True)
        sandbox.play(
            block._replace(
                text="".join(line for line in lines if not line.startswith("$ foliko serve"))
            )
        )
    finally:
        server.terminate()
        server.wait(timeout=60)


def _play_against(block: Block, tmp_path: Path, pattern: str, url: str) -> None:
    text = re.sub(pattern, lambda _match: url, block.text)
    assert text != block.text, f"{block.where}: no server URL to point at the test server"
    Sandbox(tmp_path).play(block._replace(text=text))


# The conventions, checked on every page (fast).


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_example_is_a_block_the_tests_run(page: Path):
    for block in blocks(page):
        assert block.language not in ("sh", "bash", "shell"), f"{block.where}: make it console"
        assert not block.requires or block.requires in NEEDS, f"{block.where}: unknown need"
        if block.language == "console":
            steps = console_steps(block.text)
            assert steps, f"{block.where}: a console block without a $ command"
            for command, _shown in steps:
                assert not re.search(r"\[--?\w|\w\.\.\.(\s|$)", command), (
                    f"{block.where}: an option synopsis is not a command: {command}"
                )


def test_the_readme_is_short_and_begins_with_the_two_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    first = blocks(README)[0]
    assert [command.partition("#")[0].strip() for command, _ in console_steps(first.text)] == [
        "make demo",
        "make test",
    ]
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)


def _slug(title: str) -> str:
    return re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", title.strip().lower()))


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {_slug(title) for title in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_link_to_a_file_of_the_repository_resolves(page: Path):
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"\w+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name}: {target}"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked), f"{page.name}: {target}"


def test_the_exit_codes_table_is_the_same_in_the_readme_and_the_docs():
    def table(page: Path) -> str:
        text = page.read_text(encoding="utf-8")
        return re.search(r"^\| code \| meaning \|\n(?:\|.*\n)+", text, re.M).group(0)

    assert table(README) == table(ROOT / "docs" / "cli.md")


@pytest.mark.slow
def test_the_documentation_site_builds_strictly(tmp_path: Path):
    done = subprocess.run(
        [BIN / "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "index.html").exists()


# The pipelines: sessions whose ids hold spaces, quotes and a leading dash.


def _seeded(tmp_path: Path) -> Sandbox:
    sandbox = Sandbox(tmp_path)
    (sandbox.work / "ids").write_text("".join(f"{i}\0" for i in TRICKY_IDS))
    done = sandbox.bash("xargs -0 -I{} foliko chat -s {} 'deploy the kubelet' < ids > /dev/null")
    assert done.returncode == 0, done.stderr.decode()
    return sandbox


@pytest.mark.slow
def test_the_pipelines_take_every_id_foliko_accepts(tmp_path: Path):
    (block,) = [b for b in ALL if b.language == "console" and "xargs -0" in b.text]
    sandbox = _seeded(tmp_path)
    show, first, export = [command for command, _ in console_steps(block.text)]

    shown = sandbox.bash(show)
    assert shown.returncode == 0, shown.stderr.decode()
    for session_id in TRICKY_IDS:
        assert f"session   {session_id}\n" in shown.stdout.decode()
    assert sandbox.bash(first).returncode == 0
    exported = sandbox.bash(export)
    assert exported.returncode == 0, exported.stderr.decode()
    sessions = orjson.loads((sandbox.work / "recent.json").read_bytes())
    assert sorted(s["session_id"] for s in sessions) == sorted(TRICKY_IDS)


@pytest.mark.slow
def test_the_old_pipelines_broke_on_those_ids(tmp_path: Path):
    """What the README showed before: ``-q | xargs`` splits and misreads these ids."""
    old = _seeded(tmp_path).bash(
        "foliko sessions list -q | xargs -r foliko sessions export > recent.json"
    )
    assert old.returncode != 0
