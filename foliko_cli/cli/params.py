"""Click parameter types: durations, KEY=VALUE pairs, session ids that complete."""

from __future__ import annotations

import re
from typing import Any

import click
import orjson

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}


def parse_value(text: str) -> Any:
    """A JSON value when ``text`` parses as one (3, true, [1]), else the text itself."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


class Duration(click.ParamType):
    """``90s``, ``15m``, ``12h``, ``30d``, ``2w`` (or combined, ``1d12h``) in milliseconds."""

    name = "duration"

    def convert(self, value: Any, param, ctx) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().lower()
        parts = _DURATION.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            self.fail(
                f"{value!r} is not a duration; write e.g. 30d, 12h, 15m, 90s or 2w", param, ctx
            )
        return int(sum(float(n) * _UNIT_MS[u] for n, u in parts))


class KeyValue(click.ParamType):
    """``KEY=VALUE``; VALUE is JSON when it parses as JSON, else a string."""

    name = "key=value"

    def convert(self, value: Any, param, ctx) -> tuple[str, Any]:
        if isinstance(value, tuple):
            return value
        key, sep, raw = str(value).partition("=")
        if not sep or not key.strip():
            self.fail(f"{value!r} is not KEY=VALUE; write e.g. --var name=Ada", param, ctx)
        return key.strip(), parse_value(raw)


def complete_session_ids(ctx: click.Context, param, incomplete: str) -> list[str]:
    """Session ids from the configured storage; silent when storage is unavailable."""
    try:
        from foliko_cli.config import load_settings
        from foliko_cli.facade import Foliko

        root = ctx.find_root()
        settings = load_settings(storage=root.params.get("storage"))
        with Foliko.from_settings(settings) as facade:
            return [i for i in facade.session_ids() if i.startswith(incomplete)]
    except Exception:
        return []


def session_option(help: str, *, required: bool = True):
    """``-s/--session ID``, completing ids from storage."""
    return click.option(
        "-s",
        "--session",
        "session_id",
        required=required,
        metavar="ID",
        shell_complete=complete_session_ids,
        help=help,
    )


def var_option(help: str):
    """``--var K=V``, repeatable; collected as ``variables``."""
    return click.option(
        "--var", "variables", type=KeyValue(), multiple=True, metavar="K=V", help=help
    )
