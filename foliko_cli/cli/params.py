"""Click parameters shared by commands: durations, timeouts, KEY=VALUE pairs,
session ids (positional or ``-s``), and the global options after the subcommand."""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import click

from foliko_cli.errors import UsageError

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")

# click's ParamType is generic only in its newer versions: subscripted for
# the type checker alone.
if TYPE_CHECKING:
    ParamType = click.ParamType[Any, Any]
else:
    ParamType = click.ParamType

INT64 = range(-(2**63), 2**63)


def _exact_int(text: str) -> int:
    number = int(text)
    if number not in INT64:
        raise ValueError(f"the integer {text} is beyond 64 bits and cannot be stored exactly")
    return number


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"the number {text} is too large to store")
    return number


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def parse_json_value(text: str) -> Any:
    """``text`` as a JSON value; integers beyond 64 bits are refused, never rounded."""
    import json

    try:
        return json.loads(
            text, parse_int=_exact_int, parse_float=_finite_float, parse_constant=_no_constant
        )
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{text!r} is not a JSON value ({exc.msg}); write text as a JSON string, e.g. '\"Ada\"'"
        ) from None
    except ValueError as exc:
        raise ValueError(f"{exc}; store it as text instead") from None


class Timeout(ParamType):
    """Seconds: a finite number greater than 0 (nan, inf, 0 and negatives are refused)."""

    name = "seconds"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds; write e.g. 30 or 2.5", param, ctx)
        if not math.isfinite(number) or number <= 0:
            self.fail(
                f"{value!r} is not a usable timeout; give a finite number of seconds above 0",
                param,
                ctx,
            )
        return number


class Duration(ParamType):
    """``90s``, ``15m``, ``12h``, ``30d``, ``2w`` (or combined, ``1d12h``) in milliseconds."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        from foliko_cli.common.clock import parse_duration

        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class Moment(ParamType):
    """A time in ms: that long ago (``7d``) or an ISO 8601 date or time (UTC unless
    it says otherwise)."""

    name = "when"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        if isinstance(value, int):
            return value
        from foliko_cli.common.clock import since_ms

        found = since_ms(str(value))
        if found is None:
            self.fail(
                f"{value!r} is neither a duration nor a date; write e.g. 7d, 2026-01-31 "
                "or 2026-01-31T12:00:00Z",
                param,
                ctx,
            )
        return found


class KeyValue(ParamType):
    """``KEY=VALUE``: VALUE is stored as the text given, or (``typed``) as JSON."""

    name = "key=value"

    def __init__(self, *, typed: bool = False) -> None:
        self.typed = typed

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, Any]:
        if isinstance(value, tuple):
            return value
        key, sep, raw = str(value).partition("=")
        flag = "--var-json" if self.typed else "--var"
        if not sep or not key.strip():
            example = "count=3" if self.typed else "name=Ada"
            self.fail(f"{value!r} is not KEY=VALUE; write e.g. {flag} {example}", param, ctx)
        if not self.typed:
            return key.strip(), raw
        try:
            return key.strip(), parse_json_value(raw)
        except ValueError as exc:
            self.fail(f"{flag} {key.strip()}: {exc}", param, ctx)


def complete_session_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Session ids from the configured storage; silent when storage is unavailable."""
    try:
        from foliko_cli.common.settings import load_settings
        from foliko_cli.service.facade import Foliko

        root = ctx.find_root()
        storage = (root.obj or {}).get("storage") or root.params.get("storage")
        settings = load_settings(storage=storage)
        with Foliko.from_settings(settings) as facade:
            return [i for i in facade.session_ids() if i.startswith(incomplete)]
    except Exception:
        return []


def session_option(help: str, *, required: bool = True) -> Callable[[F], F]:
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


def var_options(what: str) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """``--var K=V`` (text, exactly as given) and ``--var-json K=JSON`` (typed), repeatable.

    Both are collected, in order, as ``variables``.
    """

    def decorate(command: Callable[..., R]) -> Callable[..., R]:
        @click.option(
            "--var",
            "text_vars",
            type=KeyValue(),
            multiple=True,
            metavar="K=V",
            help=f"{what} to the text V, exactly as given (repeatable).",
        )
        @click.option(
            "--var-json",
            "json_vars",
            type=KeyValue(typed=True),
            multiple=True,
            metavar="K=JSON",
            help=f"{what} to a JSON value: a number, true, a list... (repeatable).",
        )
        @functools.wraps(command)
        def wrapper(
            *args: Any,
            text_vars: tuple[tuple[str, Any], ...],
            json_vars: tuple[tuple[str, Any], ...],
            **kwargs: Any,
        ) -> R:
            return command(*args, variables=(*text_vars, *json_vars), **kwargs)

        return wrapper

    return decorate


def timeout_option(help: str) -> Callable[[F], F]:
    return click.option("--timeout", type=Timeout(), metavar="SECONDS", help=help)


def yes_option(command: F) -> F:
    return click.option(
        "-y",
        "--yes",
        is_flag=True,
        help="Approve every MCP tool call of this run (no question on a terminal, "
        "no refusal in a pipe).",
    )(command)


GLOBAL_OPTIONS = {
    "storage": ("NAME|URL", "Session storage (as 'foliko --storage'); env: FOLIKO_STORAGE."),
    "user": ("NAME", "Act on this user's sessions (as 'foliko --user')."),
}


def _set_global(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.find_root().ensure_object(dict)[param.name] = value


def _global_settings(name: str) -> dict[str, Any]:
    metavar, help = GLOBAL_OPTIONS[name]
    return {
        "metavar": metavar,
        "expose_value": False,
        "is_eager": True,
        "callback": _set_global,
        "help": help,
    }


def global_option(name: str) -> click.Option:
    """``--storage`` or ``--user`` after a subcommand, as good as before it."""
    return click.Option([f"--{name}"], **_global_settings(name))


class CommandContext(click.Context):
    """A context that names itself in the usage errors raised while it parses
    (click leaves some without one), so the error can name the command's --help."""

    @contextlib.contextmanager
    def scope(self, cleanup: bool = True) -> Iterator[click.Context]:
        try:
            with super().scope(cleanup) as ctx:
                yield ctx
        except click.UsageError as exc:
            if exc.ctx is None:
                exc.ctx = self
            raise


def adopt(command: click.Command) -> click.Command:
    """``command`` and every command under it taking the global options (docs/cli.md:
    they work before the subcommand or after it), with contexts that name their
    command in usage errors; idempotent."""
    present = {param.name for param in command.params}
    command.params.extend(global_option(n) for n in GLOBAL_OPTIONS if n not in present)
    command.context_class = CommandContext
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            adopt(sub)
    return command


class LazyCommands(click.Group):
    """A group that imports a subcommand's module only when that subcommand runs
    (start-up, P1); ``lazy`` maps its name to (module, attribute)."""

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy:
            import importlib

            module, attribute = self.lazy[name]
            return adopt(getattr(importlib.import_module(module), attribute))
        return super().get_command(ctx, name)


def storage_option(command: F) -> F:
    """``--storage`` among the command's own options (every command gets it
    anyway, after its own, from ``adopt``)."""
    return click.option("--storage", **_global_settings("storage"))(command)


def one_session(session_ids: list[str], usage: str) -> str:
    """The one id ``sessions_argument`` gave; ``usage`` is the command's, after
    ``foliko sessions``."""
    if len(session_ids) != 1:
        what = "name one session" if not session_ids else "name only one session"
        raise UsageError(f"{what}: foliko sessions {usage}")
    return session_ids[0]


def json_flag(help: str) -> Callable[[F], F]:
    return click.option("--json", "as_json", is_flag=True, help=help)


def sessions_argument(*, many: bool = False) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Session ids as positional arguments or ``-s/--session ID`` (both accepted).

    The command receives ``session_ids``: the ``-s`` ids first, then the rest.
    """

    def decorate(command: Callable[..., R]) -> Callable[..., R]:
        @click.argument(
            "positional",
            nargs=-1,
            metavar="ID..." if many else "ID",
            shell_complete=complete_session_ids,
        )
        @click.option(
            "-s",
            "--session",
            "flagged",
            multiple=True,
            metavar="ID",
            shell_complete=complete_session_ids,
            help="The session (same as the ID argument).",
        )
        @functools.wraps(command)
        def wrapper(
            *args: Any, flagged: tuple[str, ...], positional: tuple[str, ...], **kwargs: Any
        ) -> R:
            return command(*args, session_ids=[*flagged, *positional], **kwargs)

        return wrapper

    return decorate
