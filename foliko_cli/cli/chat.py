"""``foliko chat``: one turn in a named session, or an interactive loop."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from foliko_cli.cli.app import open_facade, settings_for
from foliko_cli.cli.output import emit_json, note
from foliko_cli.cli.params import (
    ParamType,
    complete_session_ids,
    parse_json_value,
    session_option,
    storage_option,
    timeout_option,
    var_options,
    yes_option,
)
from foliko_cli.cli.reply import SAVED_NOT_WRITTEN, ReplyWriter, turn_notes
from foliko_cli.cli.stdout import StdoutWriteError, output_failure
from foliko_cli.errors import ExitCode, FolikoError, Interrupted, TypedToolFailedError, UsageError

if TYPE_CHECKING:
    from foliko_cli.service.facade import Foliko
    from foliko_cli.service.library import Template, Tool
    from foliko_cli.service.values import TurnRequest, TurnResult

STDIN_NOTICE_AFTER = 2.0


class ModelOption(ParamType):
    """``-o KEY=VALUE``: VALUE as JSON when it parses (0.2, true, ["END"]), else text."""

    name = "key=value"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, Any]:
        if isinstance(value, tuple):
            return value
        key, sep, raw = str(value).partition("=")
        if not sep or not key.strip():
            self.fail(f"{value!r} is not KEY=VALUE; write e.g. -o temperature=0.2", param, ctx)
        try:
            parsed = parse_json_value(raw)
        except ValueError:
            parsed = raw
        return key.strip(), parsed


def stdin_is_terminal() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


def _silent_for(seconds: float) -> bool:
    """True when stdin is a pipe or socket that sends nothing for ``seconds``."""
    import os
    import select
    import stat

    try:
        fd = sys.stdin.fileno()
        mode = os.fstat(fd).st_mode
        if not stat.S_ISFIFO(mode) and not stat.S_ISSOCK(mode):
            return False
        readable, _, _ = select.select([fd], [], [], seconds)
    except (AttributeError, OSError, ValueError):
        return False
    return not readable


def read_stdin(*, skip: bool = False) -> str | None:
    """Piped input read to its end, or None when stdin is a terminal, closed or skipped.

    Nothing is dropped: a pipe that stays silent is waited for, with one
    line on stderr after STDIN_NOTICE_AFTER seconds saying how not to wait.
    """
    if skip or sys.stdin is None or stdin_is_terminal():
        return None
    if _silent_for(STDIN_NOTICE_AFTER):
        note(
            "waiting for input on stdin (a pipe that has sent nothing yet); "
            "to run without it, pass -n/--no-stdin or redirect </dev/null"
        )
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"stdin is not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "convert it first, e.g. with iconv -t UTF-8"
        ) from None


def compose_message(argument: str | None, piped: str | None) -> str | None:
    """The argument, the piped text, or both (the piped text follows as context)."""
    parts = [p for p in (argument, piped) if p is not None and p.strip()]
    if not parts and argument is not None:
        raise UsageError('the message is blank; write some text, e.g. foliko chat -s ID "hi"')
    return "\n\n".join(parts) if parts else None


def attachment_sources(
    ctx: click.Context, values: tuple[str, ...], agent: str | None
) -> tuple[list[Any], str | None, bool]:
    """The -a/--attach values as sources for the service, the agent, and whether
    stdin was attached (``-``, read here).

    ``-a NAME`` once meant ``--agent NAME``: a value that is no file, URL or
    ``-`` but names a configured agent is still taken as the agent, with a note.
    """
    if not values:
        return [], agent, False
    from foliko_cli.messages.attachments import STDIN_NAME, Attachment, is_url

    sources: list[Any] = []
    piped = False
    for value in values:
        if value == "-":
            if piped:
                raise UsageError("-a - attaches stdin, which can be attached once")
            if sys.stdin is None or stdin_is_terminal():
                raise UsageError(
                    "-a - attaches stdin, which is a terminal or closed; pipe the file in "
                    "(foliko chat -s ID -a - < FILE) or attach it by name"
                )
            sources.append(Attachment(STDIN_NAME, sys.stdin.buffer.read()))
            piped = True
        elif (
            agent is None
            and not is_url(value)
            and not os.path.lexists(value)
            and value in settings_for(ctx).agents
        ):
            note(f"-a {value} is taken as --agent {value}: -a now attaches files; use --agent")
            agent = value
        else:
            sources.append(value)
    return sources, agent, piped


def fragment_sources(
    fragments: tuple[str, ...], system_fragments: tuple[str, ...], piped: bool
) -> tuple[tuple[Any, ...], tuple[Any, ...] | None, bool]:
    """-f and --sf as the service takes them (None: no --sf, the system prompt is
    left alone), and whether stdin was one of them (``-``, read here, once)."""
    if not (fragments or system_fragments):
        return (), None, False
    dashes = [*fragments, *system_fragments].count("-")
    if dashes > 1 or (dashes and piped):
        raise UsageError("stdin (-) can be read once: give it to one -f, --sf or -a")
    from foliko_cli.cli.fragments import stdin_fragment

    found = tuple(stdin_fragment(value) for value in fragments)
    system = tuple(stdin_fragment(value) for value in system_fragments) or None
    return found, system, bool(dashes)


def failure_object(
    exc: BaseException, session_id: str | None, ids: dict[str, str | None]
) -> dict[str, Any]:
    if isinstance(exc, FolikoError):
        message, code = str(exc), exc.exit_code
    else:
        message, code = "interrupted; the turn was not saved", ExitCode.INTERRUPTED
    return {
        "success": False,
        "session_id": session_id,
        "request_id": ids.get("request_id"),
        "trace_id": ids.get("trace_id"),
        "error": {"message": message, "exit_code": code},
    }


def emit_json_quietly(value: dict[str, Any]) -> None:
    """A failure report on stdout; a stdout that fails too is left to the error line."""
    with contextlib.suppress(StdoutWriteError):
        emit_json(value)


@click.command()
@click.argument("message", required=False)
@session_option("Session name; created when new, continued otherwise.", required=False)
@click.option(
    "-c",
    "--continue",
    "continue_latest",
    is_flag=True,
    help="Continue the most recently active session (instead of -s).",
)
@click.option(
    "-n",
    "--no-stdin",
    is_flag=True,
    help="Never read stdin (it is read to its end whenever it is not a terminal).",
)
@click.option(
    "-m", "--model", metavar="MODEL", help="Model as provider:model, e.g. echo. Env: FOLIKO_MODEL."
)
@click.option(
    "--agent",
    metavar="NAME",
    help="Run the turn as agent NAME from the config ([agents.NAME]).",
)
@click.option(
    "-a",
    "--attach",
    "attach",
    multiple=True,
    metavar="FILE|URL|-",
    help="Attach a file, an http(s) URL, stdin (-) or an MCP resource (mcp:SERVER:URI) "
    "to the message (repeatable): text goes in as a fenced block under its name, a png, "
    "jpeg, webp or gif image as an image for models that take them.",
)
@click.option(
    "-f",
    "--fragment",
    "fragments",
    multiple=True,
    metavar="FILE|URL|-|NAME",
    help="Put a fragment's text before the message (repeatable): a file, an http(s) "
    "URL, stdin (-), or a fragment saved with 'foliko fragments set' (by name or "
    "hash). Stored once however often it is used.",
)
@click.option(
    "--sf",
    "--system-fragment",
    "system_fragments",
    multiple=True,
    metavar="FILE|URL|-|NAME",
    help="Put a fragment's text in the session's system prompt, before --system's "
    "(repeatable); kept for its later turns, as --system is.",
)
@click.option(
    "--new",
    is_flag=True,
    help="Start the session over (history and variables); the old one goes to the trash.",
)
@click.option(
    "--from",
    "fork_from",
    metavar="SRC",
    shell_complete=complete_session_ids,
    help="Fork SRC into this (new) session, then run the turn.",
)
@click.option(
    "--turns",
    type=click.IntRange(min=0),
    metavar="N",
    help="With --from: copy only SRC's first N turns (a turn is a user message and its replies).",
)
@click.option(
    "--regenerate",
    is_flag=True,
    help="Replace the session's last turn by a new answer to its message (give no MESSAGE).",
)
@click.option(
    "--system", metavar="TEXT", help="System prompt for this session; kept for its later turns."
)
@var_options("Set a session variable before the turn")
@timeout_option("Give up on the turn after this many seconds (default 120).")
@click.option(
    "--if-busy",
    type=click.Choice(["wait", "reject", "interrupt"]),
    default="wait",
    show_default=True,
    help="When another turn (here or elsewhere) holds the session: wait for it, reject "
    "this one at once (exit 4), or interrupt it (it stops unsaved, its command exits 5).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON object with the reply, ids, step count and usage; on failure "
    "{success: false, error: {message, exit_code}} (with --stream: NDJSON events, "
    "the last one 'done' or 'error').",
)
@click.option(
    "--stream/--no-stream",
    default=None,
    help="Write the reply as it arrives (default: on a terminal).",
)
@click.option(
    "-x",
    "--extract",
    "extract",
    flag_value="first",
    help="Print only the reply's first fenced code block (the whole reply when it has "
    "none); the reply is stored whole.",
)
@click.option(
    "--xl",
    "--extract-last",
    "extract",
    flag_value="last",
    help="Print only the reply's last fenced code block (as -x).",
)
@click.option(
    "-o",
    "--option",
    "model_options",
    type=ModelOption(),
    multiple=True,
    metavar="KEY=VALUE",
    help="A model option for this turn: temperature, top_p, seed, max_tokens, stop... "
    "(repeatable; VALUE is JSON or text).",
)
@click.option(
    "--schema",
    metavar="FILE|JSON",
    help="A JSON Schema the reply must follow (structured output); the reply is "
    "printed whole once it is checked, and an invalid one fails the turn.",
)
@click.option(
    "-t",
    "--template",
    metavar="NAME|FILE",
    help="Run the turn from a saved template (or a YAML template file): its prompt "
    "($input stands for the message), system prompt, model, options, schema and "
    "tools; the flags given win.",
)
@click.option(
    "-p",
    "--param",
    "params",
    type=(str, str),
    multiple=True,
    metavar="NAME VALUE",
    help="A value for the template's $NAME (repeatable).",
)
@click.option(
    "--save",
    metavar="NAME",
    help="Save this command's message, --system, -m, -o, -p (as defaults), --schema, "
    "-T and --functions as template NAME, and run no turn.",
)
@click.option(
    "-T",
    "--tool",
    "tools",
    multiple=True,
    metavar="NAME",
    help="Offer this tool in this turn too: a built-in, an installed plugin or "
    "module:function (repeatable).",
)
@click.option(
    "--functions",
    multiple=True,
    metavar="FILE.py|CODE",
    help="Offer each function a Python file (or Python code) defines as a tool in this "
    "turn; the code runs in this process (repeatable).",
)
@click.option(
    "-u",
    "--usage",
    "show_usage",
    is_flag=True,
    help="Print the turn's tokens and time (and cost, with prices) on stderr.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print, as JSON, what the model would be sent (the HTTP request itself "
    "included); send nothing, save nothing.",
)
@yes_option
@storage_option
@click.pass_context
def chat(
    ctx: click.Context,
    message: str | None,
    session_id: str | None,
    continue_latest: bool,
    turns: int | None,
    regenerate: bool,
    no_stdin: bool,
    model: str | None,
    agent: str | None,
    attach: tuple[str, ...],
    fragments: tuple[str, ...],
    system_fragments: tuple[str, ...],
    new: bool,
    fork_from: str | None,
    system: str | None,
    variables: tuple[tuple[str, object], ...],
    timeout: float | None,
    if_busy: str,
    as_json: bool,
    stream: bool | None,
    extract: str | None,
    model_options: tuple[tuple[str, object], ...],
    schema: str | None,
    template: str | None,
    params: tuple[tuple[str, str], ...],
    save: str | None,
    tools: tuple[str, ...],
    functions: tuple[str, ...],
    show_usage: bool,
    dry_run: bool,
    yes: bool,
) -> None:
    """Run one chat turn in session ID and print the reply.

    MESSAGE comes from the argument, from stdin, or both (stdin follows the
    argument). Stdin is read to its end whenever it is not a terminal and
    -n/--no-stdin is not given; a pipe silent for 2 s gets a note on stderr.
    With no message on a terminal, starts an interactive loop that saves
    after every turn (/help lists its commands; Ctrl-D ends it, Ctrl-C
    cancels the running turn). A message whose first line is /prompt
    SERVER__NAME key=value ... sends that MCP prompt (foliko mcp prompts).

    \b
    Examples:
      foliko chat --session s1 "hi"
      git diff | foliko chat -s review "Summarise this change"
      foliko chat -s s2 --from s1 "try another way"
      foliko chat -s s3 -t summarise -p lang French "..."
    """
    if save is not None:
        from foliko_cli.cli.templates import save_from_chat

        save_from_chat(
            ctx,
            save,
            read_message=lambda: compose_message(message, read_stdin(skip=no_stdin)),
            model=model,
            system=system,
            options=dict(model_options),
            params=dict(params),
            schema=schema,
            tools=tools,
            functions=functions,
            extract=extract,
        )
        return
    try:
        check_flags(session_id, continue_latest, turns, fork_from, regenerate, message)
        check_extract(extract, as_json=as_json, dry_run=dry_run)
        chosen = chosen_template(template, params)
        attachments, agent, piped_attachment = attachment_sources(ctx, attach, agent)
        fragment_values, system_values, piped_fragment = fragment_sources(
            fragments, system_fragments, piped_attachment
        )
        text = message_text(
            message,
            regenerate,
            piped_attachment or piped_fragment,
            bool(attachments or fragment_values),
            no_stdin,
        )
        compose = None
        if chosen is not None:
            from foliko_cli.cli.templates import apply_template

            asking = text is None and stdin_is_terminal()
            text, system, compose = apply_template(
                chosen, text, dict(params), system, regenerate=regenerate, interactive=asking
            )
            model = model or chosen.model
            model_options = (*chosen.options.items(), *model_options)
        facade = open_facade(ctx, model=model, timeout=timeout, yes=yes)
        if continue_latest:
            session_id = facade.latest_session_id()
        if text is None and not regenerate:
            check_interactive(dry_run=dry_run, as_json=as_json, extract=extract)
        assert session_id is not None  # -s names it or -c found it (checked above)
        from foliko_cli.service.values import TurnRequest

        turn = TurnRequest(
            session_id,
            text,
            model=model,
            new=new,
            fork_from=fork_from,
            variables=dict(variables),
            system=system,
            agent=agent,
            turns=turns,
            regenerate=regenerate,
            attachments=attachments,
            fragments=fragment_values,
            system_fragments=system_values,
            options=dict(model_options),
            schema=reply_schema(chosen, schema),
            tools=offered_tools(tools, functions, chosen, dry_run=dry_run),
            if_busy=if_busy,
        )
        turn = expanded(facade, turn)
    except FolikoError as exc:
        if as_json and not dry_run:
            report_json_failure(exc, session_id, {}, stream=bool(stream))
        raise
    if text is None and not regenerate:
        from foliko_cli.cli.interactive import interactive

        history = settings_for(ctx).home / "history"
        interactive(facade, turn, history=history, latest=continue_latest, compose=compose)
    elif dry_run:
        emit_json(facade.dry_run(turn, stream=streamed(stream, turn, as_json)), pretty=True)
    else:
        extract = code_to_print(extract, chosen, as_json)
        stream = extract is None and streamed(stream, turn, as_json)
        result = run_turn(
            facade, turn, as_json=as_json, stream=stream, timeout=timeout, extract=extract
        )
        report_turn(facade, turn, result, latest=continue_latest, show_usage=show_usage)
        check_typed_calls(result)


def streamed(stream: bool | None, turn: TurnRequest, as_json: bool) -> bool:
    """--stream/--no-stream, by default on a terminal; a reply with a schema is
    printed whole once it is checked."""
    if turn.schema is not None:
        return False
    return sys.stdout.isatty() and not as_json if stream is None else stream


def check_flags(
    session_id: str | None,
    continue_latest: bool,
    turns: int | None,
    fork_from: str | None,
    regenerate: bool,
    message: str | None,
) -> None:
    """Refuse flags that cannot go together, before anything is read or opened."""
    if continue_latest == (session_id is not None):
        raise UsageError(
            "name the session with -s/--session or continue the latest with -c/--continue "
            "(one of them)"
        )
    if turns is not None and fork_from is None:
        raise UsageError("--turns needs --from SRC: it says how many of SRC's turns to copy")
    if regenerate and message is not None:
        raise UsageError("--regenerate reuses the last turn's message; give no MESSAGE")


def chosen_template(template: str | None, params: tuple[tuple[str, str], ...]) -> Template | None:
    """The template -t names (None without -t, where -p has nothing to fill)."""
    if template is None:
        if params:
            raise UsageError(
                "-p/--param gives a template's $NAME a value; use it with -t NAME "
                "(or keep it as a default with --save NAME)"
            )
        return None
    from foliko_cli.service.library import load_template

    return load_template(template)


def reply_schema(chosen: Template | None, schema: str | None) -> Mapping[str, Any] | None:
    """--schema, else the template's, else none."""
    if schema is not None:
        from foliko_cli.messages.schema import load_schema

        return load_schema(schema)
    return chosen.schema if chosen is not None else None


def message_text(
    message: str | None, regenerate: bool, piped_attachment: bool, attached: bool, no_stdin: bool
) -> str | None:
    """The message: the argument, stdin or both (stdin is an attachment with -a -);
    none to regenerate a turn or to start the interactive loop, empty with only
    attachments."""
    if regenerate:
        return None
    if piped_attachment:
        return message if message is not None else ""
    text = compose_message(message, read_stdin(skip=no_stdin))
    return "" if text is None and attached else text


def offered_tools(
    tools: tuple[str, ...],
    functions: tuple[str, ...],
    chosen: Template | None,
    *,
    dry_run: bool,
) -> tuple[Tool, ...]:
    """The tools -T, --functions and the template offer in this turn."""
    if not (tools or functions or (chosen is not None and (chosen.tools or chosen.functions))):
        return ()
    from foliko_cli.cli.templates import turn_tools

    return turn_tools(tools, functions, chosen, run_code=not dry_run)


def check_extract(extract: str | None, *, as_json: bool, dry_run: bool) -> None:
    """-x/--xl print part of the reply: not with a JSON turn or a dry run."""
    if extract is None:
        return
    if dry_run:
        raise UsageError("--dry-run gets no reply for -x/--xl to cut a code block from; drop one")
    if as_json:
        raise UsageError(
            "-x/--xl print a code block of the reply, --json the whole turn; give one of them"
        )


def code_to_print(extract: str | None, chosen: Template | None, as_json: bool) -> str | None:
    """-x/--xl, else the template's extract or extract_last (the flags win: with
    --json the whole turn is printed)."""
    if extract is not None or chosen is None or as_json:
        return extract
    return chosen.extract_mode


def check_interactive(*, dry_run: bool, as_json: bool, extract: str | None = None) -> None:
    """No message: only a terminal may start the interactive loop."""
    if not stdin_is_terminal():
        raise UsageError(
            'no message: pass it as an argument (foliko chat -s ID "hi") or pipe it on stdin'
        )
    if dry_run or as_json or extract:
        raise UsageError("--dry-run, --json and -x/--xl need a message; pass MESSAGE")


def expanded(facade: Any, turn: TurnRequest) -> TurnRequest:
    """The turn with a ``/prompt SERVER__NAME ...`` first line expanded."""
    if not (turn.message or "").lstrip().startswith("/prompt"):  # is_prompt, without its module
        return turn
    from foliko_cli.cli.prompting import expand, is_prompt

    return expand(facade, turn) if is_prompt(turn.message) else turn


def report_turn(
    facade: Any, turn: TurnRequest, result: Any, *, latest: bool, show_usage: bool
) -> None:
    """What stderr says after the reply: a new start's trash entry, the turn's
    notes, its usage when asked for."""
    if turn.new:
        from foliko_cli.cli.trash import note_started_over

        note_started_over(facade, turn.session_id, result, latest=latest)
    for line in turn_notes(result, terminal=sys.stderr.isatty()):
        note(line)
    if show_usage:
        click.echo(usage_line(result), err=True)


def usage_line(result: TurnResult) -> str:
    """``N input, M output tokens, T s`` (and the cost when the model has prices)."""
    usage = result.usage
    given, made = usage.get("input_tokens", 0), usage.get("output_tokens", 0)
    line = f"{given:,} input, {made:,} output tokens"
    compression = usage.get("compression")
    if compression:
        line += (
            f" (and {compression.get('input_tokens', 0):,} input, "
            f"{compression.get('output_tokens', 0):,} output to compress the history)"
        )
    line += f", {result.duration_ms / 1000:.1f} s"
    return f"{line}, ${result.cost:.6f}" if result.cost is not None else line


def report_json_failure(
    exc: BaseException, session_id: str | None, ids: dict[str, str | None], *, stream: bool
) -> None:
    """The failure on stdout for --json: one object, or (streaming) a last 'error' event."""
    failure = failure_object(exc, session_id, ids)
    emit_json_quietly({"type": "error", **failure} if stream else failure)


def run_turn(
    facade: Foliko,
    turn: TurnRequest,
    *,
    as_json: bool,
    stream: bool,
    timeout: float | None,
    extract: str | None = None,
) -> Any:
    session_id = turn.session_id
    request = facade.request(timeout)
    ids: dict[str, str | None] = {"request_id": request.request_id, "trace_id": request.trace_id}
    writer = ReplyWriter()
    on_event = None
    if stream:
        on_event = emit_json_quietly if as_json else writer.on_event
    interrupted = None
    try:
        result = facade.chat(turn._replace(request=request), on_event=on_event)
    except Interrupted as exc:
        if exc.result is None:
            _failed(exc, session_id, ids, as_json=as_json, stream=stream, writer=writer)
            raise
        result, interrupted = exc.result, exc  # saved: printed, then reported
    except (FolikoError, KeyboardInterrupt) as exc:
        _failed(exc, session_id, ids, as_json=as_json, stream=stream, writer=writer)
        raise
    try:
        if as_json and stream:
            emit_json({"type": "done", "result": result.to_dict()})
        elif as_json:
            emit_json(result.to_dict())
        elif stream:
            writer.check()
            click.echo()
        else:
            from foliko_cli.messages.fences import extracted

            click.echo(extracted(result.message, extract))
    except StdoutWriteError as exc:
        raise output_failure(exc, after=SAVED_NOT_WRITTEN) from None
    if interrupted is not None:
        raise interrupted
    return result


def check_typed_calls(result: Any) -> None:
    """A ``/tool`` call the user typed that failed fails the command (exit 1),
    once the reply and the turn's notes are out."""
    if result.typed_failures:
        raise TypedToolFailedError(result.typed_failures)


def _failed(
    exc: BaseException,
    session_id: str,
    ids: dict[str, str | None],
    *,
    as_json: bool,
    stream: bool,
    writer: ReplyWriter,
) -> None:
    if as_json:
        report_json_failure(exc, session_id, ids, stream=stream)
    else:
        writer.end_line()
