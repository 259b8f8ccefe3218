"""``foliko sessions``: list, show, delete, forget, rename, clear, export, import, prune, vars
(export, import, search, compact, uncompact, tree, trash and restore have
modules of their own, loaded when they run)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click
import orjson

from foliko_cli.cli.app import open_facade
from foliko_cli.cli.output import (
    damaged,
    deferred_progress,
    emit_json,
    emit_rows,
    error,
    format_ms,
    list_options,
    note,
    page,
    paint,
)
from foliko_cli.cli.params import (
    Duration,
    LazyCommands,
    complete_session_ids,
    json_flag,
    one_session,
    parse_json_value,
    sessions_argument,
    storage_option,
)
from foliko_cli.common.clock import now_ms
from foliko_cli.errors import ExitCode, UsageError, VariableNotSetError
from foliko_cli.messages.public import record_to_dict, summary_to_dict
from foliko_cli.messages.record import covered_messages
from foliko_cli.messages.usage import with_usage

if TYPE_CHECKING:
    pass


@click.group(
    cls=LazyCommands,
    lazy={
        "export": ("foliko_cli.cli.imports", "export"),
        "import": ("foliko_cli.cli.imports", "import_"),
        "search": ("foliko_cli.cli.history", "search"),
        "compact": ("foliko_cli.cli.compaction", "compact"),
        "uncompact": ("foliko_cli.cli.compaction", "uncompact"),
        "tree": ("foliko_cli.cli.tree", "tree"),
        "trash": ("foliko_cli.cli.trash", "trash"),
        "restore": ("foliko_cli.cli.trash", "restore"),
    },
)
def sessions() -> None:
    """Manage stored sessions, non-interactively.

    \b
    Example:
      foliko sessions list --json
      foliko sessions delete old-1 old-2
    """


@sessions.command("list")
@click.option(
    "--sort",
    type=click.Choice(["updated", "created", "name", "messages"]),
    default="updated",
    show_default=True,
    help="Order: newest/largest first, or by name.",
)
@click.option("--limit", type=click.IntRange(min=1), help="Show at most this many.")
@click.option(
    "--since",
    type=Duration(),
    metavar="DURATION",
    help="Only sessions updated within this long (e.g. 7d, 12h).",
)
@list_options
@storage_option
@click.pass_context
def list_sessions(
    ctx: click.Context, sort: str, limit: int | None, since: int | None, fmt: str
) -> None:
    """List sessions, most recently updated first: each one's id, title (an
    import's, or one given), message count, last update and last prompt.

    \b
    Examples:
      foliko sessions list
      foliko sessions list --ids               # the ids alone, one a line
      foliko sessions list --json | python -c 'import json,sys; print(len(json.load(sys.stdin)))'
      foliko sessions list --sort messages --limit 5 --since 7d
    """
    cutoff = now_ms() - since if since is not None else None
    summaries = open_facade(ctx).list_sessions(sort=sort, limit=limit, since=cutoff)
    rows = [summary_to_dict(s) for s in summaries]
    for row in rows:
        if row.get("damaged"):
            note(damaged(row["session_id"], row["error"]))
    columns = {
        "session_id": "session",
        "message_count": "messages",
        "updated_at": "updated",
        "preview": "last prompt",
        "title": "title",
    }
    if fmt == "table":  # the title beside the id; TSV keeps it last, for cut -f
        columns = {"session_id": "session", "title": "title", **columns}
    emit_rows(rows, columns, fmt, human={"updated_at": format_ms, "title": short_title})


TITLE_WIDTH = 40


def short_title(title: str | None) -> str:
    """A title as a table shows it: on one line, cut with … past TITLE_WIDTH."""
    text = " ".join((title or "").split())
    return text if len(text) <= TITLE_WIDTH else text[: TITLE_WIDTH - 1] + "…"


ROLE_COLOURS = {"user": "cyan", "assistant": "green", "system": "magenta", "tool": "yellow"}


@sessions.command()
@sessions_argument()
@click.option("--tail", type=click.IntRange(min=0), metavar="N", help="Only the last N messages.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["markdown", "text", "json"]),
    help="Markdown transcript (default on a terminal), plain text (default in a pipe) or JSON.",
)
@click.option("--json", "fmt", flag_value="json", help="Same as --format json.")
@click.option(
    "--pager/--no-pager",
    default=True,
    help="On a terminal, page long output through $PAGER (default: less -FRX).",
)
@click.option(
    "--compactions",
    is_flag=True,
    help="List the session's compactions instead: each summary, the turns it stands "
    "for and its model call's usage (a JSON list with --json).",
)
@click.option(
    "-r",
    "--response",
    is_flag=True,
    help="Print only the session's last reply (without ID: the most recently active "
    "session's); with --json, that message as JSON.",
)
@click.option(
    "-x",
    "--extract",
    "extract",
    flag_value="first",
    help="Print only the first fenced code block of the last reply (the whole reply "
    "when it has none).",
)
@click.option(
    "--xl",
    "--extract-last",
    "extract",
    flag_value="last",
    help="Print only the last fenced code block of the last reply (as -x).",
)
@storage_option
@click.pass_context
def show(
    ctx: click.Context,
    session_ids: list[str],
    tail: int | None,
    fmt: str | None,
    pager: bool,
    compactions: bool,
    response: bool,
    extract: str | None,
) -> None:
    """Show a session's messages, variables and metadata.

    --json prints {session_id, messages, variables, metadata}. In a compacted
    session, a line marks the message where the model's view begins (the
    messages before it are in the summary). -r prints the last reply alone,
    -x/--xl a code block of it, as llm logs -r/-x/--xl do.

    \b
    Examples:
      foliko sessions show s1
      foliko sessions show -s s1 --json --tail 2
      foliko sessions show s1 --format markdown > s1.md
      foliko sessions show s1 --compactions
      foliko sessions show -r                  # the latest session's last reply
      foliko sessions show s1 -x > snippet.py  # the first code block of s1's last reply
    """
    if response or extract:
        print_reply(
            ctx, session_ids, fmt, extract, others={"--tail": tail, "--compactions": compactions}
        )
        return
    session_id = one_session(session_ids, "show ID")
    if compactions:
        from foliko_cli.cli.compaction import print_compactions

        entries = open_facade(ctx).compactions(session_id)
        print_compactions(session_id, entries, fmt == "json")
        return
    fmt = fmt or ("markdown" if sys.stdout.isatty() else "text")
    facade = open_facade(ctx)
    if tail is None or fmt == "json":  # the JSON form's usage totals are the whole history's
        record = facade.get_session(session_id)
        total = len(record.messages)
    else:  # a long history's last messages are read alone
        start, stop = (-tail, None) if tail else (0, 0)  # --tail 0: none of them
        record = facade.session_window(session_id, start, stop)
        total = record.metadata["message_count"]
    view_start = covered_messages(record, total)
    data = record_to_dict(record)
    data["metadata"]["message_count"] = total
    if tail is not None:
        data["messages"] = data["messages"][len(data["messages"]) - tail :] if tail else []
    if fmt == "json":
        emit_json(with_usage(data, record))
        return
    first = total - len(data["messages"])
    if fmt == "markdown":
        from foliko_cli.service.library import markdown_transcript

        record.messages = data["messages"]
        rendered = markdown_transcript(record, first_seq=first, view_start=view_start)
        shown = (paint(line, "cyan") if line.startswith("#") else line for line in rendered)
        page("\n".join(shown) + "\n", enabled=pager)
        return
    page("\n".join(text_view(data, first, view_start)) + "\n", enabled=pager)


def text_view(data: dict[str, Any], first: int, view_start: int) -> list[str]:
    """The plain view: the session's metadata, system prompt and variables, then
    each message (from number ``first``) with its tool calls' arguments."""
    meta = data["metadata"]
    lines = [f"session   {data['session_id']}"]
    if meta.get("title"):
        lines.append(f"title     {meta['title']}")
    if meta.get("forked_from"):
        lines.append(f"forked    from {meta['forked_from']}")
    lines += [
        f"messages  {meta['message_count']}",
        f"created   {format_ms(meta.get('created_at'))}",
        f"active    {format_ms(meta.get('last_active'))}",
    ]
    if meta.get("system_prompt"):
        lines.append(f"system    {meta['system_prompt']}")
    if meta.get("system_fragments"):
        from foliko_cli.messages.fragments import SYSTEM_KEY, describe, refs_of

        lines += [f"system fragment  {describe(ref)}" for ref in refs_of(meta, SYSTEM_KEY)]
    if view_start:
        lines.append(f"view      from message {view_start + 1} (see --compactions)")
    for key, value in sorted(data["variables"].items()):
        lines.append(f"var       {key} = {orjson.dumps(value).decode()}")
    for seq, message in enumerate(data["messages"], start=first):
        if seq == view_start and seq:
            from foliko_cli.service.library import view_begins

            lines.append(f"\n── {view_begins(seq)} ──")
        lines += message_lines(message)
    return lines


def message_lines(message: dict[str, Any]) -> list[str]:
    label = message["role"]
    if message.get("tool_calls"):
        label += " → " + ", ".join(c["name"] for c in message["tool_calls"])
    elif label == "tool" and message.get("name"):
        label += f" ← {message['name']}"
    label = paint(f"[{label}]", ROLE_COLOURS.get(message["role"], "white"))
    lines = [f"\n{label} {format_ms(message.get('created_at'))}"]
    if message["content"]:
        lines.append(message["content"])
    for call in message.get("tool_calls") or ():
        arguments = orjson.dumps(call.get("arguments", {})).decode()
        lines.append(f"tool call {call.get('name', '?')} {arguments}")
    if message.get("attachments"):
        from foliko_cli.messages.attachments import describe

        lines += [f"attached  {describe(part)}" for part in message["attachments"]]
    if message.get("fragments"):
        from foliko_cli.messages.fragments import describe as described
        from foliko_cli.messages.fragments import refs_of

        lines += [f"fragment  {described(ref)}" for ref in refs_of(message)]
    return lines


def print_reply(
    ctx: click.Context,
    session_ids: list[str],
    fmt: str | None,
    extract: str | None,
    *,
    others: dict[str, object],
) -> None:
    """``show -r`` (and ``-x``/``--xl``): the session's last reply, or a code block
    of it; without an id, the most recently active session's."""
    given = [flag for flag, value in others.items() if value not in (None, False)]
    if given:
        raise UsageError(f"-r, -x and --xl print the last reply alone; drop {given[0]}")
    if len(session_ids) > 1:
        raise UsageError("name one session: foliko sessions show [ID] -r")
    if fmt == "json" and extract is not None:
        raise UsageError("-x/--xl print a code block, --json the whole reply; give one")
    facade = open_facade(ctx)
    session_id = session_ids[0] if session_ids else facade.latest_session_id()
    record = facade.session_tail(session_id, lambda messages: any(map(_reply, messages)))
    replies = [m for m in record.messages if _reply(m)]
    if not replies:
        raise UsageError(f"session {session_id!r} has no reply yet", fix="run a turn in it first")
    if fmt == "json":
        emit_json(replies[-1])
        return
    from foliko_cli.messages.fences import extracted

    click.echo(extracted(replies[-1]["content"], extract))


def _reply(message: dict[str, Any]) -> bool:
    return message["role"] == "assistant" and bool(message.get("content"))


@sessions.command()
@sessions_argument(many=True)
@click.option(
    "--no-trash",
    is_flag=True,
    help="Delete for good, keeping no copy in the trash (frees the space at once).",
)
@json_flag("Print {deleted: [...], missing: [...]} as JSON.")
@storage_option
@click.pass_context
def delete(ctx: click.Context, session_ids: list[str], no_trash: bool, as_json: bool) -> None:
    """Delete sessions (no prompt); prints their ids. Unknown ids are reported and exit 2.

    They go to the trash (foliko sessions trash list) for the undo window:
    foliko sessions restore ID brings one back. When the storage is full
    and a session cannot go into the trash, it is not deleted (exit 3):
    --no-trash deletes it without a copy, which frees its space.

    \b
    Example:
      foliko sessions delete scratch old-1 old-2
    """
    if not session_ids:
        raise UsageError("name the sessions to delete: foliko sessions delete ID...")
    facade = open_facade(ctx)
    deleted, missing = facade.delete_sessions(session_ids, trash=not no_trash)
    if as_json:
        emit_json({"deleted": deleted, "missing": missing})
    else:
        for session_id in deleted:
            click.echo(session_id)
    for session_id in missing:
        error(f"session {session_id!r} not found")
    if missing:
        raise click.exceptions.Exit(ExitCode.USAGE)


@sessions.command()
@sessions_argument(many=True)
@click.option(
    "--message",
    "--messages",
    "messages",
    multiple=True,
    metavar="N|N..M",
    help="Forget only these messages of the session: N is a message's seq (from 0, as "
    "sessions search shows it), N..M a range, both included (repeatable).",
)
@click.option("-y", "--yes", is_flag=True, help="Do not ask first (needed without a terminal).")
@click.option("--dry-run", is_flag=True, help="Print what would be forgotten; remove nothing.")
@click.option(
    "--receipts", is_flag=True, help="List the receipts of earlier forgets instead (no ID)."
)
@json_flag("Print the receipt as JSON (with --receipts, the list of them).")
@storage_option
@click.pass_context
def forget(
    ctx: click.Context,
    session_ids: list[str],
    messages: tuple[str, ...],
    yes: bool,
    dry_run: bool,
    receipts: bool,
    as_json: bool,
) -> None:
    """Remove sessions, or some messages of one, for good, and print a receipt.

    Unlike delete, nothing goes to the trash: the session (or the messages)
    and every copy foliko keeps of it (its trash entries, a server's
    journals of its responses, its entries in the search index) go in one
    step that cannot half-happen, and a receipt (when, which sessions, how
    many messages, which copies and indexes; never the content) is stored
    and printed. Asks first, on a terminal; --yes does not. Unknown ids and
    bad ranges are exit 2, and nothing is forgotten.

    \b
    Examples:
      foliko sessions forget scratch old-1 --yes
      foliko sessions forget work --message 4 --dry-run
      foliko sessions forget work --messages 4..7 --json
      foliko sessions forget --receipts
    """
    facade = open_facade(ctx)
    if receipts:
        if session_ids or messages:
            raise UsageError("--receipts lists the receipts; give it no ID or --message")
        _list_receipts(facade.forget_receipts(), as_json)
        return
    preview = facade.forget(session_ids, messages=messages, dry_run=True)
    if not (dry_run or yes):
        if not (sys.stdin.isatty() and sys.stderr.isatty()):
            raise UsageError(
                "forget removes for good and asks first, but stdin is not a terminal",
                fix="pass --yes to forget without asking",
            )
        for entry in preview.sessions:
            note(f"will forget {_forgotten(entry)}")
        if not click.confirm("Forget for good? It cannot be undone", err=True):
            note("nothing was forgotten")
            raise click.exceptions.Exit(ExitCode.MODEL)
    receipt = preview if dry_run else facade.forget(session_ids, messages=messages)
    if as_json:
        emit_json(receipt.to_dict())
        return
    rows = [{**entry, "what": _forgotten(entry, named=False)} for entry in receipt.sessions]
    columns = {
        "session_id": "session",
        "what": "forgotten",
        "trash_copies": "trash copies",
        "server_records": "server records",
    }
    emit_rows(rows, columns, "table" if sys.stdout.isatty() else "tsv")
    indexes = ", ".join(receipt.indexes) or "none (a search reads the sessions)"
    if dry_run:
        note("dry run: nothing was forgotten")
    else:
        note(f"receipt {receipt.id}, {format_ms(receipt.forgotten_at)}, in {receipt.location}")
    note(f"search indexes {'to purge' if dry_run else 'purged'}: {indexes}")


def _list_receipts(receipts: list[Any], as_json: bool) -> None:
    if as_json:
        emit_json([receipt.to_dict() | {"dry_run": False} for receipt in receipts])
        return
    rows = [
        {
            "id": receipt.id,
            "forgotten_at": receipt.forgotten_at,
            "what": "; ".join(_forgotten(entry) for entry in receipt.sessions),
        }
        for receipt in receipts
    ]
    emit_rows(
        rows,
        {"id": "receipt", "forgotten_at": "forgotten", "what": "what"},
        "table" if sys.stdout.isatty() else "tsv",
        human={"forgotten_at": format_ms},
    )


def _forgotten(entry: dict[str, Any], *, named: bool = True) -> str:
    """What a receipt's entry says went: a session, or some of its messages."""
    what = f"{entry['messages']} message(s)"
    if not entry["whole"]:
        spans = ", ".join(f"{a}" if a == b else f"{a}..{b}" for a, b in entry["positions"])
        what += f" ({spans})"
    else:
        what = f"the whole session, {what}"
    return f"{entry['session_id']!r}: {what}" if named else what


@sessions.command()
@sessions_argument(many=True)
@json_flag("Print {renamed: OLD, to: NEW} as JSON.")
@storage_option
@click.pass_context
def rename(ctx: click.Context, session_ids: list[str], as_json: bool) -> None:
    """Rename session OLD to NEW (OLD may be given as -s OLD); refuses to overwrite NEW.

    \b
    Example:
      foliko sessions rename scratch project-notes
    """
    if len(session_ids) != 2:
        raise UsageError("name the session and its new name: foliko sessions rename OLD NEW")
    old, new = session_ids
    open_facade(ctx).rename_session(old, new)
    if as_json:
        emit_json({"renamed": old, "to": new})


@sessions.command()
@sessions_argument()
@click.option("--all", "everything", is_flag=True, help="Clear the variables too.")
@json_flag("Print {cleared: ID, variables_cleared: true|false} as JSON.")
@storage_option
@click.pass_context
def clear(ctx: click.Context, session_ids: list[str], everything: bool, as_json: bool) -> None:
    """Drop a session's history, keeping its variables (unless --all).

    The session as it was goes to the trash (foliko sessions restore).

    \b
    Example:
      foliko sessions clear s1
    """
    session_id = one_session(session_ids, "clear ID")
    facade = open_facade(ctx)
    facade.clear_session(session_id, variables=everything)
    if as_json:
        emit_json({"cleared": session_id, "variables_cleared": everything})
    from foliko_cli.cli.trash import note_reset

    note_reset(facade, session_id, "was cleared")


@sessions.command()
@sessions_argument()
@click.option(
    "--turns",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    metavar="N",
    help="How many of the last turns to remove.",
)
@json_flag("Print {rewound: ID, turns: N, messages: left} as JSON.")
@storage_option
@click.pass_context
def rewind(ctx: click.Context, session_ids: list[str], turns: int, as_json: bool) -> None:
    """Remove a session's last N turns (a user message and its replies each).

    The rest of the history, the variables and the metadata stay; a summary
    that stood for removed messages is dropped. The session as it was goes
    to the trash (foliko sessions restore).

    \b
    Example:
      foliko sessions rewind s1 --turns 2
    """
    session_id = one_session(session_ids, "rewind ID")
    facade = open_facade(ctx)
    record = facade.rewind_session(session_id, turns=turns)
    if as_json:
        emit_json({"rewound": session_id, "turns": turns, "messages": len(record.messages)})
    from foliko_cli.cli.trash import note_reset

    note_reset(facade, session_id, f"now has {len(record.messages)} message(s)")


@sessions.command()
@click.option(
    "--older-than",
    "older_than",
    type=Duration(),
    required=True,
    metavar="DURATION",
    help="Delete sessions not used for this long (e.g. 30d).",
)
@click.option("--dry-run", is_flag=True, help="List what would be deleted; delete nothing.")
@json_flag("Print {deleted|would_delete: [...]} as JSON instead of one id a line.")
@storage_option
@click.pass_context
def prune(ctx: click.Context, older_than: int, dry_run: bool, as_json: bool) -> None:
    """Delete sessions not used for a while; prints their ids.

    A session is used when foliko writes it: a turn, an import, a restore
    (never the dates of the messages inside). Pruned sessions go to the
    trash (foliko sessions restore).

    \b
    Example:
      foliko sessions prune --older-than 30d --dry-run
    """
    facade = open_facade(ctx)
    with deferred_progress("pruning") as (start, advance):
        report = facade.prune(older_than, dry_run=dry_run, progress=advance, on_total=start)
    if as_json:
        emit_json(
            {
                "would_delete" if dry_run else "deleted": report.deleted,
                "kept_active": report.active,
                "unreadable": report.unreadable,
            }
        )
    else:
        for session_id in report.deleted:
            click.echo(session_id)
    for session_id in report.active:
        note(f"kept {session_id!r}: it was used while prune waited for it")
    for session_id in report.unreadable:
        error(
            f"session {session_id!r} is unreadable and was not deleted; see 'foliko storage check'"
        )
    verb = "would delete" if dry_run else "deleted"
    from foliko_cli.cli.trash import trash_kept

    kept = trash_kept(facade)
    where = f"; the trash keeps them for {kept}" if kept and report.deleted and not dry_run else ""
    note(f"{verb} {len(report.deleted)} session(s){where}")
    if report.unreadable:
        raise click.exceptions.Exit(ExitCode.STORAGE)


VARS_USAGE = {"list": "", "get": " KEY", "set": " KEY VALUE", "unset": " KEY"}


@sessions.command()
@click.argument("words", nargs=-1, metavar="ID [list | get KEY | set KEY VALUE | unset KEY]")
@click.option(
    "-s",
    "--session",
    "flagged",
    metavar="ID",
    shell_complete=complete_session_ids,
    help="The session (instead of the ID argument).",
)
@list_options
@storage_option
@click.pass_context
def vars(ctx: click.Context, words: tuple[str, ...], flagged: str | None, fmt: str) -> None:
    """List, get, set or unset a session's variables.

    set stores VALUE as the text given, exactly; with --json, VALUE is parsed
    as JSON and stored typed (integers beyond 64 bits are refused), and get
    prints the value as JSON.

    \b
    Examples:
      foliko sessions vars s1
      foliko sessions vars s1 set city Paris
      foliko sessions vars -s s1 set --json retries 3
      foliko sessions vars s1 get city
      foliko sessions vars s1 unset city
    """
    rest = list(words)
    if flagged is None:
        if not rest:
            raise UsageError("name the session: foliko sessions vars ID [list|get|set|unset]")
        session_id = rest.pop(0)
    else:
        session_id = flagged
    action = rest.pop(0) if rest else "list"
    if action not in VARS_USAGE:
        raise UsageError(f"unknown action {action!r}; use list, get, set or unset")
    wanted = VARS_USAGE[action].count(" ")
    if len(rest) != wanted:
        raise UsageError(f"usage: foliko sessions vars ID {action}{VARS_USAGE[action]}")
    facade = open_facade(ctx)
    if action == "list":
        variables = facade.get_variables(session_id)
        emit_rows(
            [{"key": k, "value": v} for k, v in sorted(variables.items())],
            {"key": "key", "value": "value"},
            fmt,
        )
    elif action == "get":
        key = rest[0]
        variables = facade.get_variables(session_id)
        if key not in variables:
            raise VariableNotSetError(f"variable {key!r} is not set in session {session_id!r}")
        found = variables[key]
        if fmt == "json" or not isinstance(found, str):
            found = orjson.dumps(found).decode()
        click.echo(found)
    elif action == "set":
        key, value = rest
        if fmt == "json":
            try:
                value = parse_json_value(value)
            except ValueError as exc:
                raise UsageError(f"variable {key!r}: {exc}") from None
        facade.update_variables(session_id, {key: value})
    else:
        facade.update_variables(session_id, {}, unset=(rest[0],))
