"""Install lines that are true: a missing extra is answered with a command that
works for the interpreter running foliko (a checkout's venv or a wheel's
install) and leaves foliko's own install as it is; the README's install lines
keep an editable install editable."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from foliko_cli.common import extras
from foliko_cli.common.extras import extra_hint, extra_requirements, install_command

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = ("postgres", "redis", "mcp", "serve")


def test_each_extra_is_its_own_packages_from_foliko_s_metadata():
    assert extra_requirements("postgres") == ["psycopg[binary]>=3.1"]
    assert extra_requirements("redis") == ["redis>=5"]
    serve = extra_requirements("serve")
    assert "starlette>=0.37" in serve and "uvicorn>=0.29" in serve
    assert 'uvloop>=0.19; sys_platform != "win32"' in serve  # its own marker kept
    assert extra_requirements("no-such-extra") == []


@pytest.mark.parametrize("extra", EXTRAS)
def test_the_hint_names_this_interpreter_and_never_foliko_itself(extra):
    command = shlex.split(install_command(extra) or "")
    assert command[:4] == [sys.executable, "-m", "pip", "install"]
    assert not any(word.startswith(("foliko", ".")) for word in command[4:])
    assert shlex.split(extra_hint("X", extra).partition("install it with: ")[2]) == command


@pytest.mark.slow
@pytest.mark.parametrize("extra", EXTRAS)
def test_the_hint_runs_here_and_installs_nothing_over_foliko(extra):
    """pip resolves the command offline in this (dev) venv, where every extra is
    installed: it would install nothing, so an editable foliko stays editable."""
    command = shlex.split(install_command(extra) or "")
    checked = subprocess.run(
        [*command, "--dry-run", "--no-index", "--quiet", "--report", "-"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["install"] == []


def test_without_foliko_s_metadata_the_hint_names_the_extra(monkeypatch):
    monkeypatch.setattr(extras, "DISTRIBUTION", "no-such-distribution-anywhere")
    assert install_command("serve") is None
    assert extra_hint("foliko serve", "serve") == (
        "foliko serve needs the 'serve' extra; install foliko with it"
    )


def test_the_serve_command_without_its_extra_says_how_to_install_it(invoke, monkeypatch):
    monkeypatch.setitem(sys.modules, "starlette", None)  # import starlette -> ImportError
    result = invoke("serve")
    assert result.exit_code == 2
    assert result.stderr == f"foliko: error: {extra_hint('foliko serve', 'serve')}\n"


def test_the_readme_installs_extras_editable():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = [line for line in readme.splitlines() if re.search(r"\bpip install\b", line)]
    assert lines, "the README has no install line"
    for line in lines:
        assert "foliko-cli[" not in line, line  # not on a package index
        assert not re.search(r"pip install '?\.\[", line), line  # replaces an editable install
