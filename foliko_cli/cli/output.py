"""Printing: results on stdout, diagnostics on stderr, lists in four formats."""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from typing import Any

import click
import orjson

FORMATS = ("table", "json", "ndjson", "tsv")


def emit_json(value: Any, *, pretty: bool = False) -> None:
    option = orjson.OPT_INDENT_2 if pretty else 0
    click.echo(orjson.dumps(value, option=option | orjson.OPT_NON_STR_KEYS).decode())


def error(message: str) -> None:
    click.echo(f"foliko: error: {message}", err=True)


def note(message: str) -> None:
    click.echo(f"foliko: {message}", err=True)


@contextlib.contextmanager
def progress(length: int, label: str) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr when it is a terminal (and there is work); else nothing."""
    if length and sys.stderr.isatty():
        with click.progressbar(length=length, label=label, file=sys.stderr) as bar:
            yield bar.update
    else:
        yield lambda count: None


@contextlib.contextmanager
def deferred_progress(label: str) -> Iterator[tuple[Callable[[int], None], Callable[[int], None]]]:
    """``(start, advance)`` for a progress bar whose length is known only once
    the work has begun: ``start(total)`` opens it, ``advance(n)`` moves it."""
    with contextlib.ExitStack() as stack:
        advance: list[Callable[[int], None]] = [lambda count: None]

        def start(total: int) -> None:
            advance[0] = stack.enter_context(progress(total, label))

        yield start, lambda count: advance[0](count)


def format_ms(ms: int | None) -> str:
    if not ms:
        return "-"
    from datetime import datetime

    return datetime.fromtimestamp(ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def format_option(command: Callable) -> Callable:
    """``--format table|json|ndjson|tsv`` plus ``--json`` / ``--ndjson`` shorthands.

    The default is a table on a terminal and TSV in a pipe.
    """

    @click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        help="Output format (default: table on a terminal, tsv otherwise).",
    )
    @click.option("--json", "fmt", flag_value="json", help="Same as --format json.")
    @click.option("--ndjson", "fmt", flag_value="ndjson", help="Same as --format ndjson.")
    @functools.wraps(command)
    def wrapper(*args, fmt: str | None, **kwargs):
        return command(*args, fmt=fmt or ("table" if sys.stdout.isatty() else "tsv"), **kwargs)

    return wrapper


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.replace("\t", " ").replace("\n", " ")
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return orjson.dumps(value).decode()


def _write_lines(lines) -> None:
    """One write for a whole listing: per-line echo costs seconds at 100,000 rows."""
    text = "".join(line + "\n" for line in lines)
    click.echo(text, nl=False)


def emit_rows(
    rows: list[dict[str, Any]],
    columns: dict[str, str],
    fmt: str,
    *,
    human: dict[str, Callable[[Any], str]] | None = None,
) -> None:
    """Print ``rows`` (dicts) in ``fmt``; ``columns`` maps keys to table headers.

    JSON and NDJSON carry every key of each row; table and TSV show ``columns``,
    the table using ``human`` formatters where given.
    """
    if fmt == "json":
        emit_json(rows)
    elif fmt == "ndjson":
        _write_lines(orjson.dumps(row, option=orjson.OPT_NON_STR_KEYS).decode() for row in rows)
    elif fmt == "tsv":
        header = ["\t".join(columns)]
        _write_lines([*header, *("\t".join(_cell(row.get(k)) for k in columns) for row in rows)])
    else:
        from tabulate import tabulate

        human = human or {}
        body = [
            [human[key](row.get(key)) if key in human else _cell(row.get(key)) for key in columns]
            for row in rows
        ]
        click.echo(
            tabulate(body, headers=list(columns.values()), tablefmt="simple", disable_numparse=True)
        )
