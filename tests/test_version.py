"""The version is written once: ``foliko_cli.__version__``, which the build reads."""

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import foliko_cli

ROOT = Path(__file__).resolve().parents[1]


def test_the_version_is_assigned_in_one_place_only():
    assigned = [
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "foliko_cli").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
    ]
    assert assigned == ["foliko_cli/__init__.py"]


def test_the_build_reads_that_version():
    from setuptools.config import expand

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    attribute = config["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert expand.read_attr(attribute, root_dir=ROOT) == foliko_cli.__version__


def test_foliko_version_prints_it():
    shown = subprocess.run(
        [sys.executable, "-m", "foliko_cli", "--version"], capture_output=True, text=True
    )
    assert shown.returncode == 0
    assert shown.stdout.split() == ["foliko,", "version", foliko_cli.__version__]
