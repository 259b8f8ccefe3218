"""Each server's tool list, kept between runs so a turn offers its tools without starting it.

One small JSON file per server config in ``FOLIKO_HOME/mcp-tools/`` (mode
0600), which holds what makes the server the one it is: its command,
arguments, environment and working directory, or its URL and headers, all
as the config writes them (a ``${VAR}`` stays unexpanded, so no secret is
stored), and is named by a checksum of it; an entry whose identity is not
the config's is a miss. Editing those keys makes a new entry;
``tools``, ``exclude``, timeouts and approval do not, as they change what
foliko offers, not what the server lists.

An entry is good for ``TTL_SECONDS``. Whenever the server runs it lists its
tools and its entry is rewritten: when it starts, and when it says its list
changed (``tools/list_changed``). A missing, outdated or unreadable entry is a
miss, and the server is started to list its tools; a cache that cannot be
written is skipped (the server then starts on every turn, as without it).

A server that failed to start leaves an entry saying so: for
``BACKOFF_SECONDS`` no turn starts it again (each says it is left out), so a
broken server does not cost every turn its start-up timeout; a change of the
keys above names another entry, which is tried at once.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

import orjson

from foliko_cli.mcp.connection import ServerTool
from foliko_cli.mcp.server_config import ServerConfig

DIRECTORY = "mcp-tools"
FORMAT = 2
TTL_SECONDS = 24 * 3600
BACKOFF_SECONDS = 60


def identity(config: ServerConfig) -> str:
    """What makes the server the one it is, as one JSON text. A stdio server
    without an absolute ``cwd`` runs relative to foliko's working directory,
    which is then part of it."""
    if config.command is not None:
        fields: dict[str, Any] = {
            "command": config.command,
            "args": list(config.args),
            "env": sorted(config.env),
            "cwd": os.path.join(os.getcwd(), os.path.expanduser(config.cwd or "")),
        }
    else:
        fields = {"url": config.url, "headers": sorted(config.headers)}
    return orjson.dumps(fields, option=orjson.OPT_SORT_KEYS).decode()


def config_key(config: ServerConfig) -> str:
    """The name of ``config``'s entry: a checksum of its identity (CRC-32, not a
    cryptographic hash: hashlib costs start-up time, and the entry holds the
    identity it is checked against)."""
    from foliko_cli.common.files import checksum_name

    return checksum_name(identity(config).encode())


class ToolCache:
    def __init__(self, home: Path):
        self.directory = Path(home) / DIRECTORY

    def path(self, config: ServerConfig) -> Path:
        return self.directory / f"{config_key(config)}.json"

    def load(self, config: ServerConfig, now: float | None = None) -> list[ServerTool] | None:
        """The tools last listed by this server, or None when there is no fresh entry."""
        try:
            entry = self._entry(config)
            if entry is None:
                return None
            age = (time.time() if now is None else now) - entry["listed_at"]
            if not 0 <= age <= TTL_SECONDS:
                return None
            return [
                ServerTool(t["name"], t["description"], t["input_schema"], bool(t["read_only"]))
                for t in entry["tools"]
            ]
        except (OSError, orjson.JSONDecodeError, AttributeError, KeyError, TypeError):
            return None

    def store(self, config: ServerConfig, tools: list[ServerTool]) -> None:
        self._write(
            config,
            {
                "format": FORMAT,
                "server": config.name,
                "identity": identity(config),
                "listed_at": time.time(),
                "tools": [
                    {
                        "name": t.name,
                        "description": t.description,
                        "input_schema": t.input_schema,
                        "read_only": t.read_only,
                    }
                    for t in tools
                ],
            },
        )

    def failed(self, config: ServerConfig, error: str | None) -> None:
        """The server could not start: no tools are offered, and the failure is kept."""
        self._write(
            config,
            {
                "format": FORMAT,
                "server": config.name,
                "identity": identity(config),
                "failed_at": time.time(),
                "error": error,
            },
        )

    def failure(self, config: ServerConfig, now: float | None = None) -> tuple[float, str] | None:
        """``(seconds ago, why)`` of the server's failure to start, within the back-off."""
        try:
            entry = self._entry(config)
            if entry is None:
                return None
            age = (time.time() if now is None else now) - entry["failed_at"]
            if 0 <= age < BACKOFF_SECONDS:
                return age, str(entry.get("error") or "it failed")
        except (OSError, orjson.JSONDecodeError, AttributeError, KeyError, TypeError):
            pass
        return None

    def _entry(self, config: ServerConfig) -> dict[str, Any] | None:
        """The entry of this very server (its identity checked), or None."""
        entry: dict[str, Any] = orjson.loads(self.path(config).read_bytes())
        if entry.get("format") != FORMAT or entry.get("identity") != identity(config):
            return None
        return entry

    def _write(self, config: ServerConfig, entry: dict[str, Any]) -> None:
        from foliko_cli.common.files import replaced

        with contextlib.suppress(OSError):
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            with replaced(self.path(config), text=False) as out:
                out.write(orjson.dumps(entry))

    def forget(self, config: ServerConfig) -> None:
        """Drop the entry (its list is outdated: the next turn lists the tools again)."""
        with contextlib.suppress(OSError):
            self.path(config).unlink(missing_ok=True)
