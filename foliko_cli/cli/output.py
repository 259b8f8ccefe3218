"""Printing: results on stdout, diagnostics on stderr, lists in four formats."""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, TypeVar

import click
import orjson

from foliko_cli.errors import FolikoError, Hint

R = TypeVar("R")

FORMATS = ("table", "json", "ndjson", "tsv")


def emit_json(value: Any, *, pretty: bool = False) -> None:
    option = orjson.OPT_INDENT_2 if pretty else 0
    click.echo(orjson.dumps(value, option=option | orjson.OPT_NON_STR_KEYS).decode())


def colour_on(stream: IO[str] | None) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (no-color.org)."""
    import os

    if os.environ.get("NO_COLOR"):
        return False
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):
        return False


def paint(text: str, colour: str, *, err: bool = False) -> str:
    stream = sys.stderr if err else sys.stdout
    return click.style(text, fg=colour, bold=True) if colour_on(stream) else text


FLAGS = {
    Hint.TIMEOUT: "--timeout",
    Hint.STORAGE: "--storage or FOLIKO_STORAGE",
    Hint.MODEL: "-m/--model or FOLIKO_MODEL",
    Hint.SESSIONS: "foliko sessions list",
    Hint.TOOLS: "foliko tools list",
    Hint.RESUME: "--resume",
    Hint.VARIABLE: "--var NAME=VALUE",
    Hint.VALIDATE: "foliko workflow validate",
    Hint.TRASH: "foliko sessions trash list",
    Hint.REPAIR: "foliko storage check --repair",
    Hint.FORMAT: "--format",
    Hint.PARAMETER: "-p/--param NAME VALUE",
    Hint.TEMPLATES: "foliko templates list",
    Hint.EDIT_TEMPLATE: "foliko templates edit NAME",
    Hint.KEEP: "--keep N",
    Hint.NO_TRASH: "foliko sessions delete --no-trash ID...",
    Hint.INIT: "foliko storage init URL",
    Hint.KEYS: "foliko keys set NAME",
    Hint.FRAGMENTS: "foliko fragments list",
    Hint.IF_BUSY: "--if-busy wait, --if-busy interrupt",
}


def render(exc: FolikoError) -> str:
    """The error's one line, its fix naming the flag or command that applies."""
    if exc.fix is None:
        return str(exc)
    where = FLAGS.get(exc.hint) if exc.hint else None
    return f"{exc.problem}; {exc.fix}" + (f" ({where})" if where else "")


def damaged(session_id: str, reason: str, left_out: str = "") -> str:
    """The line that reports a damaged session a command listed or ``left_out``."""
    verb = f"was {left_out}: it " if left_out else ""
    repair = FLAGS[Hint.REPAIR]
    return f"session {session_id!r} {verb}is damaged ({reason}); {repair} moves it aside"


def error(message: str) -> None:
    click.echo(f"foliko: {paint('error:', 'red', err=True)} {message}", err=True, color=True)


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


def format_option(command: Callable[..., R]) -> Callable[..., R]:
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
    def wrapper(*args: Any, fmt: str | None, **kwargs: Any) -> R:
        return command(*args, fmt=fmt or ("table" if sys.stdout.isatty() else "tsv"), **kwargs)

    return wrapper


LISTING = "foliko.listing"


def list_options(command: Callable[..., R]) -> Callable[..., R]:
    """``format_option`` plus ``-q/--quiet/--ids`` (ids only), ``-0/--null`` (ids for
    ``xargs -0``) and ``--no-header``, for lists.

    ``emit_rows`` honours both for the command that is running.
    """

    @click.option(
        "-q", "--quiet", "--ids", is_flag=True, help="Print only the ids (names), one a line."
    )
    @click.option(
        "-0",
        "--null",
        is_flag=True,
        help="Print only the ids (names), each ended by a NUL byte (for xargs -0).",
    )
    @click.option("--no-header", is_flag=True, help="Leave out the header row (table, tsv).")
    @format_option
    @functools.wraps(command)
    def wrapper(*args: Any, quiet: bool, null: bool, no_header: bool, **kwargs: Any) -> R:
        click.get_current_context().meta[LISTING] = {
            "quiet": quiet or null,
            "null": null,
            "no_header": no_header,
        }
        return command(*args, **kwargs)

    return wrapper


def _listing() -> dict[str, bool]:
    ctx = click.get_current_context(silent=True)
    return (ctx.meta.get(LISTING) if ctx else None) or {
        "quiet": False,
        "null": False,
        "no_header": False,
    }


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.replace("\t", " ").replace("\n", " ")
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return orjson.dumps(value).decode()


def _write_lines(lines: Iterable[str], end: str = "\n") -> None:
    """One write for a whole listing: per-line echo costs seconds at 100,000 rows."""
    text = "".join(line + end for line in lines)
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
    the table using ``human`` formatters where given. With ``-q`` only the
    first column is printed, one value a line (``-0``: each ended by a NUL, as
    it is); ``--no-header`` drops the header.
    A table on a terminal fits its width: the last column is cut short with ….
    """
    listing = _listing()
    if listing["quiet"]:
        first = next(iter(columns))
        if listing["null"]:
            _write_lines((str(row.get(first, "")) for row in rows), "\0")
        else:
            _write_lines(_cell(row.get(first)) for row in rows)
        return
    if fmt == "json":
        emit_json(rows)
    elif fmt == "ndjson":
        _write_lines(orjson.dumps(row, option=orjson.OPT_NON_STR_KEYS).decode() for row in rows)
    elif fmt == "tsv":
        header = [] if listing["no_header"] else ["\t".join(columns)]
        _write_lines([*header, *("\t".join(_cell(row.get(k)) for k in columns) for row in rows)])
    else:
        from tabulate import tabulate

        human = human or {}
        body = [
            [human[key](row.get(key)) if key in human else _cell(row.get(key)) for key in columns]
            for row in rows
        ]
        headers = [] if listing["no_header"] else list(columns.values())
        body = fit_width(body, headers, terminal_width())
        style = "simple" if headers else "plain"
        text = tabulate(body, headers=headers, tablefmt=style, disable_numparse=True)
        if text:
            click.echo(text)


def terminal_width() -> int | None:
    """The terminal's columns when stdout is one, else None (a pipe is never cut)."""
    if not sys.stdout.isatty():
        return None
    import shutil

    return shutil.get_terminal_size().columns


def fit_width(body: list[list[str]], headers: list[str], width: int | None) -> list[list[str]]:
    """Cut the last column's cells with … so that each table row fits ``width``."""
    if width is None or not body:
        return body
    count = len(body[0])
    padding = 2 if headers else 0  # tabulate's MIN_PADDING around header cells
    widths = [
        max([len(row[i]) for row in body] + ([len(headers[i]) + padding] if headers else []))
        for i in range(count)
    ]
    room = width - sum(widths[:-1]) - 2 * (count - 1)
    room = max(room, len(headers[-1]) if headers else 1, 8)
    if widths[-1] <= room:
        return body
    return [[*row[:-1], _cut(row[-1], room)] for row in body]


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[: room - 1] + "…"


def data_format_option(command: Callable[..., R]) -> Callable[..., R]:
    """``--format text|json`` plus ``--json``, for commands that print one record."""

    @click.option(
        "--format",
        "fmt",
        type=click.Choice(("text", "json")),
        default="text",
        show_default=True,
        help="Output format.",
    )
    @click.option("--json", "fmt", flag_value="json", help="Same as --format json.")
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> R:
        return command(*args, **kwargs)

    return wrapper


DEFAULT_PAGER = "less -FRX"


def page(text: str, *, enabled: bool = True) -> None:
    """Print ``text``; on a terminal, through $PAGER when it is taller than the screen.

    A pager that cannot be started is skipped: the text is printed as it is.
    """
    import os
    import shutil

    tall = text.count("\n") >= shutil.get_terminal_size().lines
    if not (enabled and tall and sys.stdout.isatty() and sys.stdin and sys.stdin.isatty()):
        click.echo(text, nl=False)
        return
    import shlex
    import subprocess

    command = shlex.split(os.environ.get("PAGER") or DEFAULT_PAGER)
    try:
        pager = subprocess.Popen(command, stdin=subprocess.PIPE)
    except OSError:
        click.echo(text, nl=False)
        return
    try:
        pager.communicate(text.encode("utf-8", errors="replace"))
    except (BrokenPipeError, KeyboardInterrupt):
        pager.wait()
