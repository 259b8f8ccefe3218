"""Start-up stays light: the mcp package is imported only when a server is used."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from mcp_support import stdio_server, write_config

from foliko_cli.cli.main import cli


def _imported_modules(*args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "foliko_cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return {
        line.rsplit("|", 1)[-1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }


def test_commands_that_need_no_server_do_not_import_mcp(tmp_path: Path):
    write_config(tmp_path / "foliko.toml", {"files": stdio_server(enabled=False)})
    for args in (("sessions", "list"), ("chat", "-s", "s1", "hello")):
        modules = _imported_modules(*args)
        assert "foliko_cli.cli.main" in modules
        assert not {m for m in modules if m.split(".")[0] in ("mcp", "mcp_types", "anyio")}


def test_mcp_tools_completes_server_names(tmp_path: Path):
    write_config(tmp_path / "foliko.toml", {"files": stdio_server(), "fetch": stdio_server()})
    command = cli.get_command(None, "mcp").get_command(None, "tools")
    argument = next(p for p in command.params if p.name == "server")
    context = command.make_context("tools", [], resilient_parsing=True)
    assert [c.value for c in argument.shell_complete(context, "f")] == ["fetch", "files"]
    assert CliRunner().invoke(cli, ["mcp", "--help"]).exit_code == 0
