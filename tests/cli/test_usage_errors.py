"""One error style: every bad option value, missing argument, missing option value
and unknown option or command is one ``foliko: error:`` line with the fix, exit 2
(a port ``foliko serve`` cannot listen on too, exit 3).
Click's usage block is for ``--help`` only. The command tree is walked, so a new
command is checked without being listed here."""

from __future__ import annotations

import socket

import click
import pytest

from foliko_cli.cli.main import cli
from foliko_cli.cli.params import Duration, KeyValue, Timeout

from .commands import LEAF_IDS, LEAVES, value_options


def one_error_line(result, *fragments: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    (line,) = lines
    assert line.startswith("foliko: error: "), line
    assert "Usage:" not in line and "Try '" not in line
    for fragment in fragments:
        assert fragment in line, line
    return line


def bad_value(option: click.Option) -> str | None:
    """A value the option's type refuses, or None when it takes any text."""
    kind = option.type
    if isinstance(kind, click.Choice):
        return "no-such-choice"
    if isinstance(kind, click.IntRange | click.FloatRange) or kind in (click.INT, click.FLOAT):
        return "not-a-number"
    if isinstance(kind, Timeout | Duration):
        return "soon"
    if isinstance(kind, KeyValue) or kind.name == "key=value":
        return "no-equals-sign"
    if isinstance(kind, click.Path) and not kind.dir_okay:
        return "."
    return None


BAD_VALUES = [
    pytest.param(path, option.opts[-1], value, id=f"{' '.join(path)} {option.opts[-1]}")
    for path, command in LEAVES.items()
    for option in value_options(command)
    if (value := bad_value(option)) is not None
]


@pytest.mark.parametrize(("path", "flag", "value"), BAD_VALUES)
def test_a_bad_option_value_is_one_line_naming_the_option(invoke, path, flag, value):
    line = one_error_line(invoke(*path, flag, value), flag, repr(value))
    assert "; " in line, "the line says how to fix it"


def test_every_kind_of_option_value_is_checked_somewhere():
    kinds = {
        type(option.type)
        for path, flag, value in (p.values for p in BAD_VALUES)
        for option in [next(o for o in value_options(LEAVES[path]) if flag in o.opts)]
    }
    assert {click.Choice, click.IntRange, click.FloatRange, Timeout, Duration, KeyValue} <= kinds


@pytest.mark.parametrize("path", list(LEAVES), ids=LEAF_IDS)
def test_an_unknown_option_is_one_line_naming_the_help(invoke, path):
    one_error_line(
        invoke(*path, "--no-such-flag"), "'--no-such-flag'", f"'foliko {' '.join(path)} --help'"
    )


@pytest.mark.parametrize(
    ("path", "option", "nargs"),
    [
        pytest.param(path, option.opts[-1], option.nargs, id=f"{' '.join(path)} {option.opts[-1]}")
        for path, command in LEAVES.items()
        for option in value_options(command)
    ],
)
def test_an_option_without_its_value_is_one_line(invoke, path, option, nargs):
    wanted = "requires an argument" if nargs == 1 else f"requires {nargs} arguments"
    one_error_line(invoke(*path, option), option, wanted, "--help")


REQUIRED = [
    pytest.param(path, id=" ".join(path))
    for path, command in LEAVES.items()
    if any(isinstance(p, click.Argument) and p.required for p in command.params)
]


@pytest.mark.parametrize("path", REQUIRED)
def test_a_missing_argument_is_one_line_with_the_usage(invoke, path):
    line = one_error_line(invoke(*path), "missing argument", f"usage: foliko {' '.join(path)}")
    assert "\n" not in line


def test_a_typo_in_a_command_suggests_the_command(invoke):
    one_error_line(invoke("sesions", "list"), "'sesions'", "did you mean 'sessions'?")
    one_error_line(invoke("sessions", "lst"), "'lst'", "'list'", "'foliko sessions --help'")


def test_a_global_option_that_swallowed_the_command_says_so(invoke):
    one_error_line(
        invoke("--storage", "sessions", "list"), "--storage took 'sessions' as its value"
    )


def test_help_still_shows_the_usage(invoke):
    result = invoke("sessions", "list", "--help")
    assert result.exit_code == 0
    assert result.stdout.startswith("Usage: foliko sessions list")


def test_the_real_process_prints_one_line_too(run_foliko):
    result = run_foliko("chat", "-s", "s", "--timeout", "abc", "hi")
    assert result.returncode == 2
    assert result.stderr.decode().splitlines() == [
        "foliko: error: invalid value for '--timeout': 'abc' is not a number of seconds; "
        "write e.g. 30 or 2.5"
    ]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_on_a_port_in_use_is_one_line_naming_it(run_foliko, workers):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_foliko("serve", "--port", str(port), "--workers", workers)

    assert result.returncode == 3
    assert result.stderr.decode().splitlines() == [
        f"foliko: error: port {port} on 127.0.0.1 is already in use; "
        "choose another with --port N (or stop what listens there)"
    ]


def groups(group: click.Group = cli, path: tuple[str, ...] = ()):
    if not group.invoke_without_command:  # foliko audit lists, foliko audit prune prunes
        yield path
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            yield from groups(command, (*path, name))


@pytest.mark.parametrize("path", list(groups()), ids=lambda p: " ".join(("foliko", *p)))
def test_a_group_without_its_command_lists_them_in_one_line(invoke, path):
    where = " ".join(("foliko", *path))
    line = one_error_line(invoke(*path), f"missing command: {where} COMMAND (", f"'{where} --help'")
    assert "chat" in line if not path else True
