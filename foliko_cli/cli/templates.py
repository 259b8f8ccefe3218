"""``foliko templates``, and what ``chat`` does with ``-t``, ``--save``, ``-T`` and
``--functions``: templates applied and saved, tools offered for one turn."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from foliko_cli.cli.output import data_format_option, emit_json, emit_rows, list_options, note
from foliko_cli.errors import UsageError

if TYPE_CHECKING:
    from foliko_cli.service.library import Template, Tool

NEW_TEMPLATE = "prompt: \n"
NOT_SAVED = {
    "session_id": "-s/--session",
    "continue_latest": "-c/--continue",
    "template": "-t/--template",
    "new": "--new",
    "fork_from": "--from",
    "turns": "--turns",
    "regenerate": "--regenerate",
    "text_vars": "--var",
    "json_vars": "--var-json",
    "attach": "-a/--attach",
    "fragments": "-f/--fragment",
    "system_fragments": "--sf/--system-fragment",
    "agent": "--agent",
    "timeout": "--timeout",
    "if_busy": "--if-busy",
    "as_json": "--json",
    "stream": "--stream",
    "show_usage": "-u/--usage",
    "dry_run": "--dry-run",
    "yes": "-y/--yes",
}
"""chat's options a template does not keep: with --save, each is refused."""


# chat -t, -T, --functions, --save


def turn_tools(
    references: Sequence[str],
    functions: Sequence[str],
    template: Template | None = None,
    *,
    run_code: bool = True,
) -> tuple[Tool, ...]:
    """The tools one turn offers besides the configured ones: the template's, then
    ``-T`` names (a built-in, a plugin, module:function), then every function of the
    ``--functions`` files or code; a name given twice is refused. Without
    ``run_code`` (a dry run, a template being saved) no code is imported or run:
    the tools from code are stand-ins, by name."""
    from foliko_cli.service.library import no_code

    if template is not None:
        template.check_trusted()
    if not run_code:
        with no_code():
            return _turn_tools(references, functions, template)
    return _turn_tools(references, functions, template)


def _turn_tools(
    references: Sequence[str], functions: Sequence[str], template: Template | None
) -> tuple[Tool, ...]:
    from foliko_cli.service.library import function_tools, is_code, load_tool

    found: dict[str, tuple[Tool, str]] = {}

    def add(tool: Tool, source: str) -> None:
        if tool.name in found and found[tool.name][1] != source:
            raise UsageError(
                f"two tools for this turn are named {tool.name!r} ({found[tool.name][1]} "
                f"and {source})",
                fix="offer one of them",
            )
        found[tool.name] = (tool, source)

    base = template.path.parent if template is not None and template.path else None
    for reference in (*(template.tools if template else ()), *references):
        add(load_tool(reference), f"-T {reference}")
    for source, where in [
        *((s, base) for s in (template.functions if template else ())),
        *((s, None) for s in functions),
    ]:
        label = "--functions code" if is_code(source) else f"--functions {source.strip()}"
        for tool in function_tools(source, where):
            add(tool, label)
    return tuple(tool for tool, _ in found.values())


def apply_template(
    template: Template,
    text: str | None,
    params: dict[str, str],
    system: str | None,
    *,
    regenerate: bool,
    interactive: bool,
) -> tuple[str | None, str | None, Callable[[str], str] | None]:
    """The turn's message and system prompt with ``template`` applied, and, for an
    interactive loop, what turns each message typed into the one sent."""
    if regenerate:
        if template.prompt or template.uses_input:
            raise UsageError(
                f"--regenerate sends the last turn's message again, and {template.where} "
                "makes a message of its own; drop one of them"
            )
        return None, template.apply("", params, system)[1], None
    if interactive and (template.uses_input or not template.prompt):
        system = template.apply("", params, system)[1]
        if not template.prompt:
            return None, system, None

        def compose(message: str) -> str:
            return template.apply(message, params, system)[0] or message

        return None, system, compose
    text, system = template.apply(text, params, system)
    return text, system, None


def save_from_chat(
    ctx: click.Context,
    name: str,
    *,
    read_message: Callable[[], str | None],
    model: str | None,
    system: str | None,
    options: dict[str, Any],
    params: dict[str, str],
    schema: str | None,
    tools: Sequence[str],
    functions: Sequence[str],
    extract: str | None = None,
) -> None:
    """``chat --save NAME``: the command's message (``read_message``, called once the
    options are checked), system prompt, model, options, parameters (as defaults),
    -x/--xl, schema and tools as template NAME; no turn runs."""
    from foliko_cli.messages.schema import load_schema
    from foliko_cli.service.library import Template, check_options, is_code, save_template
    from foliko_cli.service.library import check_template_name as check_name

    check_name(name)
    source = click.core.ParameterSource
    given = [
        flag
        for key, flag in NOT_SAVED.items()
        if ctx.get_parameter_source(key) in (source.COMMANDLINE, source.ENVIRONMENT)
    ]
    if given:
        raise UsageError(
            f"--save NAME keeps a template and runs no turn, so {', '.join(given)} has no use "
            "there; drop it (a template keeps the message, --system, -m, -o, -p, -x/--xl, "
            "--schema, -T and --functions)"
        )
    if model is not None:
        from foliko_cli.cli.app import settings_for
        from foliko_cli.service.library import model_spec

        model_spec(model, settings_for(ctx).models)
    check_options(options)
    turn_tools(tools, functions, run_code=False)
    template = Template(
        name,
        prompt=read_message(),
        system=system,
        model=model,
        options=options,
        defaults=params,
        schema=load_schema(schema) if schema is not None else None,
        tools=tuple(tools),
        functions=tuple(s if is_code(s) else str(Path(s.strip()).resolve()) for s in functions),
        extract=extract == "first",
        extract_last=extract == "last",
    )
    if not template.to_dict():
        raise UsageError(
            "--save NAME has nothing to keep; give a message, --system, -m, -o or --schema"
        )
    template.variables()
    path, replaced = save_template(template)
    note(f"{'replaced' if replaced else 'saved'} template {name!r} ({path})")


# foliko templates


@click.group()
def templates() -> None:
    """Templates: saved prompts (llm's YAML format) used with chat -t NAME.

    \b
    Example:
      foliko chat --save summarise --system "Be brief." "Summarise this:"
      git log -5 | foliko chat -s log -t summarise
      foliko templates list
    """


@templates.command("list")
@list_options
def list_templates(fmt: str) -> None:
    """Every saved template: its model, system prompt and prompt; a file that is no
    valid template is named on stderr and left out.

    \b
    Example:
      foliko templates list --json
    """
    from foliko_cli.service.library import load_template
    from foliko_cli.service.library import saved_templates as saved_names

    rows = []
    for name in saved_names():
        try:
            template = load_template(name)
        except UsageError as exc:
            note(f"skipped {exc.problem}")
            continue
        rows.append(
            {
                "name": name,
                **template.to_dict(),
                "parameters": template.parameters(),
                "path": str(template.path),
            }
        )
    columns = {"name": "name", "model": "model", "system": "system", "prompt": "prompt"}
    emit_rows(rows, columns, fmt)


@templates.command("show")
@click.argument("name")
@data_format_option
def show_template(name: str, fmt: str) -> None:
    """A template's file as it is written (NAME, or the path of a YAML file), once it
    is checked; --json: its keys, parameters and path.

    \b
    Example:
      foliko templates show summarise
    """
    from foliko_cli.service.library import load_template

    template = load_template(name)
    assert template.path is not None
    if fmt == "json":
        details = {"name": template.name, **template.to_dict()}
        emit_json({**details, "parameters": template.parameters(), "path": str(template.path)})
        return
    click.echo(template.path.read_text(encoding="utf-8"), nl=False)


@templates.command("edit")
@click.argument("name")
def edit_template(name: str) -> None:
    """Open template NAME in $VISUAL or $EDITOR (a new one starts as 'prompt: '), then
    check it; a new template left as it was is not kept.

    \b
    Example:
      EDITOR=nano foliko templates edit summarise
    """
    from foliko_cli.service.library import load_template, template_path

    path = template_path(name)
    created = not path.exists()
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
    if not editor and not (sys.stdin is not None and sys.stdin.isatty()):
        raise UsageError(
            f"no editor to open {path} in; set EDITOR (e.g. EDITOR=nano), or edit the file"
        )
    if created:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.write_text(NEW_TEMPLATE, encoding="utf-8")
    try:
        click.edit(filename=str(path), editor=editor)
    except click.ClickException as exc:
        if created:
            path.unlink(missing_ok=True)
        raise UsageError(
            f"the editor failed ({exc.message}); set VISUAL or EDITOR to one that works"
        ) from None
    if created and path.read_text(encoding="utf-8") == NEW_TEMPLATE:
        path.unlink()
        note(f"template {name!r} was left as it was; nothing saved")
        return
    load_template(name)
    note(f"saved template {name!r} ({path})")


@templates.command("delete")
@click.argument("names", nargs=-1, required=True, metavar="NAME...")
def delete_templates(names: tuple[str, ...]) -> None:
    """Delete saved templates (all of them, or, when one is missing, none).

    \b
    Example:
      foliko templates delete summarise
    """
    from foliko_cli.service.library import load_template, template_path

    paths = [template_path(name) for name in names]
    for name, path in zip(names, paths, strict=True):
        if not path.is_file():
            load_template(name)  # names the one missing, with the close names
    for name, path in zip(names, paths, strict=True):
        path.unlink(missing_ok=True)
        note(f"deleted template {name!r}")


@templates.command("path")
def templates_path() -> None:
    """Print the directory that holds the saved templates.

    \b
    Example:
      ls "$(foliko templates path)"
    """
    from foliko_cli.service.library import templates_dir

    click.echo(str(templates_dir()))
