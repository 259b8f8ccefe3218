"""Printing results (stdout) and diagnostics (stderr)."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

import click
import orjson


def emit_json(value: Any, *, pretty: bool = False) -> None:
    option = orjson.OPT_INDENT_2 if pretty else 0
    click.echo(orjson.dumps(value, option=option | orjson.OPT_NON_STR_KEYS).decode())


def error(message: str) -> None:
    click.echo(f"foliko: error: {message}", err=True)


def note(message: str) -> None:
    click.echo(f"foliko: {message}", err=True)


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def format_ms(ms: int | None) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def table(rows: list[list[Any]], headers: list[str]) -> None:
    from tabulate import tabulate

    click.echo(tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True))
