"""Configs for the MCP test servers (imported by the tests and conftest.py).

tests/mcp has no __init__.py on purpose: as a package it would be named
``mcp`` and could shadow the real ``mcp`` package.
"""

from __future__ import annotations

import sys
from pathlib import Path

from trusting import trust

HERE = Path(__file__).parent
STDIO_SERVER = HERE / "stdio_server.py"
ASKING_SERVER = HERE / "asking_server.py"


def toml_value(value: object) -> str:
    """A TOML literal for the small values these configs use."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{ " + ", ".join(f"{toml_value(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
        )
    raise TypeError(value)


def write_config(path: Path, servers: dict[str, dict], agents: dict[str, dict] | None = None):
    """A foliko.toml with these [mcp_servers.NAME] (and [agents.NAME]) tables."""
    lines = []
    for kind, tables in (("mcp_servers", servers), ("agents", agents or {})):
        for name, table in tables.items():
            lines.append(f"[{kind}.{name}]")
            lines += [f"{key} = {toml_value(value)}" for key, value in table.items()]
            lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")
    trust(path)


def stdio_server(**options: object) -> dict:
    """The config of the test server in stdio_server.py."""
    return {"command": sys.executable, "args": [str(STDIO_SERVER)], **options}


def asking_server(**options: object) -> dict:
    """The config of the test server in asking_server.py."""
    return {"command": sys.executable, "args": [str(ASKING_SERVER)], **options}


RESOURCES_SERVER = HERE / "resources_server.py"


def resources_server(*args: str, **options: object) -> dict:
    """The config of the test server in resources_server.py (``bare``: tools only)."""
    return {"command": sys.executable, "args": [str(RESOURCES_SERVER), *args], **options}


def stored_messages(home: Path, session_id: str) -> list[dict]:
    """The messages the session holds in the SQLite store under ``home``."""
    from foliko_cli.service.facade import Foliko

    with Foliko("sqlite", "echo", home=home) as foliko:
        return foliko.get_session(session_id).messages


def session_exists(home: Path, session_id: str) -> bool:
    from foliko_cli.service.facade import Foliko

    with Foliko("sqlite", "echo", home=home) as foliko:
        return session_id in foliko.session_ids()
