"""LAYOUT: the package's import graph and the modules one turn walks through.

Not a speed figure: what a reader must hold in mind. Printed, never judged.

- static: modules, import arrows between them (every import: module level,
  inside functions, under TYPE_CHECKING), the longest chain of arrows
  (floors), and loose modules at the package root.
- a turn's path: the foliko modules whose code runs during one turn, from
  the CLI (``foliko chat -s S hi``, echo model, SQLite) and over HTTP (one
  ``POST /v1/chat/completions`` and one ``POST /v1/responses`` in a conversation
  to ``foliko serve``'s app in this process),
  and how many times the walk enters a module it has already left.

    .venv/bin/python bench/layout.py
"""

from __future__ import annotations

import ast
import asyncio
import functools
import os
import sys
import tempfile
import threading
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "foliko_cli"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def static_graph() -> dict[str, object]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    arrows: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            for target in targets:
                found = owner(target) if target.startswith("foliko_cli") else None
                if found and found != name:
                    arrows[name].add(found)

    visiting: set[str] = set()

    @functools.cache
    def floor(name: str) -> int:
        """1 + the longest chain below ``name`` (an arrow back up a cycle counts 0)."""
        visiting.add(name)
        below = max((floor(t) for t in arrows[name] if t not in visiting), default=0)
        visiting.discard(name)
        return 1 + below

    sys.setrecursionlimit(10_000)
    loose = sorted(
        p.name
        for p in PACKAGE.glob("*.py")
        if p.name not in ("__init__.py", "__main__.py", "errors.py", "_version.py")
    )
    return {
        "modules": len(modules),
        "arrows": sum(len(t) for t in arrows.values()),
        "floors": max(floor(name) for name in modules),
        "loose modules at the root": len(loose),
    }


class Walk:
    """The foliko modules entered while ``on`` is set, in the order entered."""

    def __init__(self) -> None:
        self.on = False
        self.entered: list[str] = []

    def __call__(self, frame, event, arg):
        if event != "call" or not self.on:
            return
        file = frame.f_code.co_filename
        if file.startswith(str(PACKAGE)):
            name = module_name(Path(file))
            if not self.entered or self.entered[-1] != name:
                self.entered.append(name)

    def figures(self) -> dict[str, int]:
        left: set[str] = set()
        re_entered = 0
        for before, after in zip(self.entered, self.entered[1:], strict=False):
            left.add(before)
            re_entered += after in left
        return {"modules": len(set(self.entered)), "re-entries": re_entered}


def cli_turn(home: Path) -> dict[str, int]:
    from foliko_cli.cli.main import cli

    walk = Walk()
    sys.setprofile(walk)
    try:
        cli.main(["chat", "-s", "warm", "hi"], standalone_mode=False)
        walk.on = True
        cli.main(["chat", "-s", "walked", "hi"], standalone_mode=False)
    finally:
        walk.on = False
        sys.setprofile(None)
    return walk.figures()


def http_turn(home: Path, responses: bool = False) -> dict[str, int]:
    """One ``POST /v1/chat/completions`` with ``X-Session-Id`` (or, ``responses``,
    one ``POST /v1/responses`` continuing a conversation)."""
    import httpx2 as httpx

    from foliko_cli.serve.app import create_app

    walk = Walk()
    app = create_app()
    if responses:
        path = "/v1/responses"
        body: dict[str, object] = {"model": "echo", "input": "hi"}
    else:
        path = "/v1/chat/completions"
        body = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}

    async def turns() -> None:
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client,
        ):
            headers = {"X-Session-Id": "warm"}
            if responses:
                created = await client.post("/v1/conversations", json={})
                body["conversation"] = created.json()["id"]
                headers = {}
            (await client.post(path, json=body, headers=headers)).raise_for_status()
            sys.setprofile(walk)
            threading.setprofile(walk)
            walk.on = True
            headers = {} if responses else {"X-Session-Id": "walked"}
            reply = await client.post(path, json=body, headers=headers)
            walk.on = False
            sys.setprofile(None)
            reply.raise_for_status()

    asyncio.run(turns())
    return walk.figures()


def main() -> None:
    print("static:", static_graph())
    with tempfile.TemporaryDirectory() as home:
        os.environ.update(FOLIKO_HOME=home, FOLIKO_MODEL="echo", FOLIKO_STORAGE="sqlite")
        print("CLI turn:", cli_turn(Path(home)))
    with tempfile.TemporaryDirectory() as home:
        os.environ.update(FOLIKO_HOME=home)
        print("HTTP turn, chat completions:", http_turn(Path(home)))
    with tempfile.TemporaryDirectory() as home:
        os.environ.update(FOLIKO_HOME=home)
        print("HTTP turn, responses:", http_turn(Path(home), responses=True))


if __name__ == "__main__":
    main()
