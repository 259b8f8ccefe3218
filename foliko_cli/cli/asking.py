"""Putting an MCP server's questions to the user: tool approvals and elicitations.

On a terminal (stdin and stderr both) the questions are asked on stderr
and answered on stdin. A line is read in a worker thread that a cancelled
turn (Ctrl-C) stops at once, so an abandoned question never swallows the
next line typed. In a pipe nothing is asked: a call that needs approval is
refused with one line saying how to approve it, and an elicitation gets
what the server's ``elicitation`` setting says (see foliko_cli/mcp/asking.py).
Either way a call's progress is a line on stderr when stderr is a terminal.
"""

from __future__ import annotations

import os
import select
import sys
from typing import TYPE_CHECKING, Any

import orjson

from foliko_cli.cli.output import note
from foliko_cli.common.loop import in_worker_thread

if TYPE_CHECKING:
    from foliko_cli.cli.progress import ProgressLine
    from foliko_cli.service.library import Answer, Decision, Elicitation, Field, Progress, ToolCall

SHOWN_ARGUMENTS = 400
READ_SIZE = 65536


def _read(descriptor: int, cancelled: int) -> str | None:
    """One line from ``descriptor``; None at end of input or when ``cancelled`` closes."""
    try:
        readable, _, _ = select.select([descriptor, cancelled], [], [])
        if cancelled in readable:
            return None
        data = os.read(descriptor, READ_SIZE)
        return data.decode("utf-8", errors="replace") if data else None
    finally:
        os.close(cancelled)


async def read_line(prompt: str) -> str | None:
    """The user's answer to ``prompt`` (without its newline); None at end of input."""
    sys.stderr.write(prompt)
    sys.stderr.flush()
    cancelled, cancel = os.pipe()
    try:
        line = await in_worker_thread(_read, sys.stdin.fileno(), cancelled)
    finally:
        os.close(cancel)
    if line is None:
        sys.stderr.write("\n")
    return None if line is None else line.rstrip("\r\n")


def _arguments(arguments: dict[str, Any]) -> str:
    text = orjson.dumps(arguments, default=str).decode()
    return text if len(text) <= SHOWN_ARGUMENTS else text[: SHOWN_ARGUMENTS - 1] + "…"


class _ShowsProgress:
    """A call's progress as one line on stderr (the line's code loaded at the first update)."""

    _line: ProgressLine | None = None

    def progress(self, update: Progress) -> None:
        if self._line is None:
            from foliko_cli.cli.progress import ProgressLine

            self._line = ProgressLine()
        self._line(update)


class TerminalAsker(_ShowsProgress):
    """Asks on the terminal; an ``a`` (always) answer holds for the rest of the run."""

    def __init__(self) -> None:
        self._always: set[tuple[str, str]] = set()

    async def approve(self, call: ToolCall) -> Decision:
        if (call.server, call.tool) in self._always:
            return "approved"
        note(f"MCP server {call.server!r} wants to run {call.tool} {_arguments(call.arguments)}")
        while True:
            answer = await read_line("  allow it? [y]es, [N]o, [a]lways (this tool, this run): ")
            choice = (answer or "n").strip().lower()
            if choice in ("y", "yes"):
                return "approved"
            if choice in ("n", "no"):
                return "declined"
            if choice in ("a", "always"):
                self._always.add((call.server, call.tool))
                return "approved"
            note("answer y, n or a")

    async def elicit(self, request: Elicitation) -> Answer | None:
        from foliko_cli.service.library import Answer
        from foliko_cli.service.library import form_fields as fields

        try:
            form = fields(request.schema or {})
        except ValueError as exc:
            note(
                f"MCP server {request.server!r} asked a question foliko cannot show ({exc}); "
                "it was declined"
            )
            return Answer("decline")
        note(f"MCP server {request.server!r} asks: {request.message}")
        values: dict[str, Any] = {f.name: f.default for f in form if f.has_default}
        while True:
            for field in form:
                entered = await self._field(field, values)
                if entered is None:
                    return Answer("cancel")
            shown = ", ".join(
                f"{f.name} = {f.shown(values[f.name])}" for f in form if f.name in values
            )
            choice = await read_line(
                f"  send {shown or 'nothing'}? [Y]es, [e]dit, [d]ecline, [c]ancel: "
            )
            choice = "c" if choice is None else (choice.strip().lower() or "y")
            if choice in ("y", "yes"):
                return Answer("accept", values)
            if choice in ("d", "decline"):
                return Answer("decline")
            if choice in ("c", "cancel"):
                return Answer("cancel")
            if choice not in ("e", "edit"):
                note("answer y, e, d or c")

    @staticmethod
    async def _field(field: Field, values: dict[str, Any]) -> bool | None:
        """Ask for one field until it is valid, into ``values``; None when input ends."""
        if field.description:
            note(f"  {field.name}: {field.description}")
        current = f" [{field.shown(values[field.name])}]" if field.name in values else ""
        while True:
            text = await read_line(f"  {field.describe()}{current}: ")
            if text is None:
                return None
            if not text.strip():
                if field.name in values or not field.required:
                    return True
                note(f"  {field.name} is required")
                continue
            try:
                values[field.name] = field.parse(text)
                return True
            except ValueError as exc:
                note(f"  {exc}")


class PipeAsker(_ShowsProgress):
    """Asks nothing (stdin is not a terminal): says once per tool how to approve it."""

    def __init__(self) -> None:
        self._told: set[tuple[str, str]] = set()

    async def approve(self, call: ToolCall) -> Decision:
        if (call.server, call.tool) not in self._told:
            self._told.add((call.server, call.tool))
            note(
                f"MCP tool {call.name!r} was refused: its calls need approval and stdin is not "
                f'a terminal to ask on; pass --yes, or set approve = "always" (or approve = '
                f'["{call.tool}"]) in [mcp_servers.{call.server}]'
            )
        return "unasked"

    async def elicit(self, request: Elicitation) -> Answer | None:
        return None


def asker() -> TerminalAsker | PipeAsker:
    """The asker for this process: on a terminal, or not."""
    terminal = all(s is not None and s.isatty() for s in (sys.stdin, sys.stderr))
    return TerminalAsker() if terminal else PipeAsker()
