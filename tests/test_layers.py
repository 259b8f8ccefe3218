"""The package's layers point one way, with no import cycles.

Every import counts: module level, inside functions and under
``TYPE_CHECKING`` alike, because each is a dependency someone must
understand. A module may import its own layer or any layer below it; the
import graph has no cycle at all.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "foliko_cli"

# Highest first; each layer is a folder. A module belongs to the first layer
# with a prefix it matches.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("entry points", ("foliko_cli.cli", "foliko_cli.serve", "foliko_cli.__main__")),
    ("the MCP server", ("foliko_cli.mcp_server",)),
    ("service", ("foliko_cli.service",)),
    ("MCP client", ("foliko_cli.mcp",)),
    ("engine", ("foliko_cli.engine",)),
    ("contexts", ("foliko_cli.context",)),
    ("formats", ("foliko_cli.formats",)),
    ("providers and backends", ("foliko_cli.models", "foliko_cli.storage")),
    ("messages", ("foliko_cli.messages",)),
    ("common", ("foliko_cli.common", "foliko_cli.errors")),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def owner(name: str) -> str:
    """The module a dotted import refers to (a package's ``__init__`` for its names)."""
    while name not in MODULES and "." in name:
        name = name.rpartition(".")[0]
    return name


def root_exports() -> dict[str, str]:
    """``foliko_cli``'s lazy names and the modules they come from (``_EXPORTS``)."""
    tree = ast.parse(MODULES["foliko_cli"].read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError("foliko_cli/__init__.py has no _EXPORTS")


EXPORTS = root_exports()


def imports(name: str) -> set[str]:
    """What ``name`` depends on; ``from foliko_cli import X`` is a dependency on
    the module X comes from, never a way around the layers."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "foliko_cli":
                found.update(EXPORTS[a.name] for a in node.names if a.name in EXPORTS)
            elif node.module.startswith("foliko_cli"):
                submodules = {f"{node.module}.{a.name}" for a in node.names} & set(MODULES)
                # ``from package import submodule`` depends on the submodule only
                found.update(submodules or {owner(node.module)})
        elif isinstance(node, ast.Import):
            found.update(owner(a.name) for a in node.names if a.name.startswith("foliko_cli"))
    return found - {name, "foliko_cli"}


NAMES = sorted(name for name in MODULES if name != "foliko_cli")


@functools.cache
def graph() -> dict[str, set[str]]:
    """Every module's dependencies; parsed when a test first asks (each test
    worker collects this file, only one runs it)."""
    return {name: imports(name) for name in NAMES}


def rank(name: str) -> int:
    for position, (_, prefixes) in enumerate(LAYERS):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return len(LAYERS) - position
    raise AssertionError(f"{name} is in no layer: add it to LAYERS in {__file__}")


@pytest.mark.parametrize("name", NAMES)
def test_module_imports_only_its_layer_or_below(name):
    wrong = sorted(dep for dep in graph()[name] if rank(dep) > rank(name))
    assert not wrong, f"{name} imports higher layers: {wrong}"


DOORS = ("foliko_cli.cli", "foliko_cli.serve", "foliko_cli.mcp_server", "foliko_cli.__main__")
SHARED = ("foliko_cli.messages", "foliko_cli.common", "foliko_cli.errors")


def reaches_past_the_service(name: str, deps: set[str]) -> list[str]:
    """What a door imports from under the service, other than the shared layers."""
    if not name.startswith(DOORS):
        return []
    service = rank("foliko_cli.service")
    return sorted(d for d in deps if rank(d) < service and not d.startswith(SHARED))


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith(DOORS)])
def test_the_doors_speak_only_to_the_service(name):
    """The CLI, foliko serve and the MCP server use the layers under the service
    through it (``foliko_cli.service.library`` names what it offers of them)."""
    assert reaches_past_the_service(name, graph()[name]) == []


def test_the_door_check_finds_a_door_reaching_past_the_service():
    deps = {"foliko_cli.engine.tools", "foliko_cli.service.library", "foliko_cli.errors"}
    assert reaches_past_the_service("foliko_cli.cli.chat", deps) == ["foliko_cli.engine.tools"]
    assert reaches_past_the_service("foliko_cli.service.turning", deps) == []


def test_what_the_service_names_of_the_layers_below_is_what_they_hold():
    from foliko_cli.service import library

    for name, (module, there) in library._LAZY.items():
        assert getattr(library, name) is getattr(importlib.import_module(module), there)
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        _ = library.missing


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in graph.get(node, ()):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_has_no_cycle():
    assert cycles(graph()) == []


def test_the_package_root_is_no_way_around_the_layers(tmp_path):
    """``from foliko_cli import AsyncFoliko`` in the engine imports the service."""
    assert EXPORTS["AsyncFoliko"] == "foliko_cli.service"
    module = tmp_path / "probe.py"
    module.write_text("from foliko_cli import AsyncFoliko, __version__\n")
    MODULES["foliko_cli.engine.probe"] = module
    try:
        assert imports("foliko_cli.engine.probe") == {"foliko_cli.service"}
    finally:
        del MODULES["foliko_cli.engine.probe"]


def test_the_checker_finds_a_cycle_and_a_wrong_way_import():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert rank("foliko_cli.cli.chat") > rank("foliko_cli.service") > rank("foliko_cli.errors")


FLAG = re.compile(r"(?<![\w-])(?:--[a-z][a-z-]+|-[a-zA-Z]\b)|'foliko [a-z]+")
NOT_FLAGS = {
    "-c ",  # libpq's connection options: -c name=value (storage/postgres.py)
    "-m pip install",  # pip's, in the command that installs an extra (common/extras.py)
}


def cli_speech(name: str) -> list[str]:
    """String literals (docstrings aside) in ``name`` that name a CLI flag or command."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        f"{name}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and node.value not in NOT_FLAGS
        and FLAG.search(node.value)
    ]


@pytest.mark.parametrize("name", [n for n in NAMES if rank(n) < len(LAYERS)])
def test_the_core_never_speaks_in_cli_flags(name):
    """Only cli/ (and serve/) turn an error's hint into a flag or a command name."""
    assert cli_speech(name) == []


def test_the_flag_check_finds_a_flag_and_a_command():
    assert FLAG.search("raise it with --timeout") and FLAG.search("see 'foliko sessions list'")
    assert FLAG.search("set it with -m or FOLIKO_MODEL")
    assert not FLAG.search("a -- b") and not FLAG.search("well-known")
    assert not FLAG.search("a -1 offset") and not FLAG.search("x-session-id")
    assert not FLAG.search("its -wal and -shm files")
