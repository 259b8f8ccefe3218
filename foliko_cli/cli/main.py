"""The ``foliko`` command: global options, error-to-exit-code mapping, entry point."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from typing import IO, Any, NoReturn

import click

from foliko_cli import __version__
from foliko_cli.cli.output import error, render
from foliko_cli.cli.params import GLOBAL_OPTIONS, CommandContext, LazyCommands
from foliko_cli.cli.stdout import (
    ClosedPipe,
    flush_stdout,
    guard_stdout,
    output_failure,
    stdout_failed,
)
from foliko_cli.errors import ExitCode, FolikoError, OutputError


class OneLineUsageError(click.ClickException):
    """A click usage error shown as foliko's one line (exit 2), never click's usage block."""

    exit_code = ExitCode.USAGE

    def __init__(self, cause: click.UsageError):
        super().__init__(usage_line(cause))

    def show(self, file: IO[Any] | None = None) -> None:
        error(self.message)


def usage_line(exc: click.UsageError) -> str:
    """A bad option value, a missing argument, an unknown option or command, with the fix:
    the usage for what is missing, else the command's ``--help``."""
    if isinstance(exc, click.exceptions.NoArgsIsHelpError) and exc.ctx is not None:
        group = exc.ctx.command
        names = group.list_commands(exc.ctx) if isinstance(group, click.Group) else []
        where = exc.ctx.command_path
        return f"missing command: {where} COMMAND ({', '.join(names)}); see '{where} --help'"
    if isinstance(exc, click.exceptions.NoSuchOption | click.exceptions.NoSuchCommand):
        from foliko_cli.cli.llm_names import llm_equivalent

        equivalent = llm_equivalent(exc)
        if equivalent is not None:
            return equivalent
    possible = getattr(exc, "possibilities", None)
    if isinstance(exc, click.exceptions.NoSuchCommand) and not possible and exc.ctx is not None:
        import difflib

        group = exc.ctx.command
        names = group.list_commands(exc.ctx) if isinstance(group, click.Group) else []
        for option, value in exc.ctx.params.items():
            if value in names:
                return (
                    f"--{option} took {value!r} as its value; give it one: "
                    f"{exc.ctx.command_path} --{option} {GLOBAL_OPTIONS[option][0]} {value} ..."
                )
        possible = difflib.get_close_matches(exc.command_name, names)
    message = " ".join((exc.message if possible else exc.format_message()).split()).rstrip(".")
    message = message[:1].lower() + message[1:]
    if possible:
        message += f" (did you mean {' or '.join(repr(p) for p in possible)}?)"
    where = exc.ctx.command_path if exc.ctx is not None else "foliko"
    if isinstance(exc, click.MissingParameter) and exc.ctx is not None:
        usage = exc.ctx.get_usage().removeprefix("Usage: ")
        return f"{message}; usage: {' '.join(usage.split())} (see '{where} --help')"
    if "; " in message:
        return message
    return f"{message}; see '{where} --help'"


class FolikoGroup(click.Group):
    """Maps every foliko error to its one-line message and exit code (SPEC §4);
    click's usage errors too (its usage block is for ``--help`` only)."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            raise OneLineUsageError(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            try:
                return super().invoke(ctx)
            except click.UsageError as exc:
                raise OneLineUsageError(exc) from None
            except OSError as exc:
                if not stdout_failed(exc):
                    raise
                raise output_failure(exc) from None
        except ClosedPipe:
            raise click.exceptions.Exit(ExitCode.OK) from None
        except FolikoError as exc:
            error(render(exc))
            raise click.exceptions.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            error("interrupted")
            raise click.exceptions.Exit(ExitCode.INTERRUPTED) from None


class LazyGroup(LazyCommands, FolikoGroup):
    """The ``foliko`` group: its subcommands load when they run."""

    context_class = CommandContext


@click.group(
    "foliko",
    cls=LazyGroup,
    lazy={
        "chat": ("foliko_cli.cli.chat", "chat"),
        "sessions": ("foliko_cli.cli.sessions", "sessions"),
        "storage": ("foliko_cli.cli.storage", "storage"),
        "config": ("foliko_cli.cli.config", "config"),
        "models": ("foliko_cli.cli.models", "models"),
        "agents": ("foliko_cli.cli.agents", "agents"),
        "skills": ("foliko_cli.cli.agents", "skills"),
        "tools": ("foliko_cli.cli.agents", "tools"),
        "mcp": ("foliko_cli.cli.mcp", "mcp"),
        "workflow": ("foliko_cli.cli.workflow", "workflow"),
        "completion": ("foliko_cli.cli.shell_completion", "completion"),
        "usage": ("foliko_cli.cli.history", "usage"),
        "serve": ("foliko_cli.cli.serve", "serve"),
        "templates": ("foliko_cli.cli.templates", "templates"),
        "keys": ("foliko_cli.cli.keys", "keys"),
        "fragments": ("foliko_cli.cli.fragments", "fragments"),
        "audit": ("foliko_cli.cli.audit", "audit"),
    },
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--storage",
    metavar="NAME|URL",
    help="Session storage: memory, json, sqlite (default) or a URL: sqlite:////abs/x.db, "
    "json:///rel/dir, postgresql://user@host/db, redis://host:6379/0. Env: FOLIKO_STORAGE.",
)
@click.option(
    "--user",
    metavar="NAME",
    help="Act on this user's sessions (those `foliko serve --api-keys` keeps for NAME).",
)
@click.version_option(__version__, "-V", "--version", prog_name="foliko")
@click.pass_context
def cli(ctx: click.Context, storage: str | None, user: str | None) -> None:
    """Language-model conversations in named, persistent sessions.

    \b
    Example:
      foliko chat --session s1 "hi"
      foliko sessions list --json
    """
    ctx.obj = {"storage": storage, "user": user}


def main() -> None:
    # A command allocates most of its objects importing what it runs, and
    # frees them at exit: collecting its youngest objects every 700 allocations
    # (the default) is wasted start-up work (P1), and a full collection that
    # happens to fall in it costs a turn ~1.5 M instructions. Cycles are still
    # collected, only less often.
    gc.set_threshold(50_000, 20, 20)
    guard_stdout()
    try:
        cli.main(prog_name="foliko")
        status = ExitCode.OK
    except SystemExit as exc:
        status = exc.code
    except BrokenPipeError:
        sys.stderr.close()
        sys.exit(ExitCode.OK)
    try:
        flush_stdout()
    except OSError as exc:
        failure = output_failure(exc)
        if isinstance(failure, OutputError) and not status:
            error(str(failure))
            status = failure.exit_code
    end_process(status)


def end_process(status: object) -> NoReturn:
    """Exit once the command's output is out, without tearing the interpreter down.

    Freeing the ~300 modules and 20,000 objects a turn has loaded takes about
    20 ms, a sixth of a whole ``foliko chat`` (P1), and nothing of foliko's
    needs it: storage, connections and files are closed by then. The atexit
    handlers still run; with a non-daemon thread still at work, or a status
    that is not a number, the exit is the ordinary one.
    """
    import threading

    others = [t for t in threading.enumerate() if t is not threading.main_thread()]
    if not (status is None or isinstance(status, int)) or any(not t.daemon for t in others):
        sys.exit(status)  # type: ignore[arg-type]  # any object: Python prints a non-int one
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status or 0)
