"""``foliko workflow``: run and validate workflow files."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from foliko_cli.cli.app import open_facade, settings_for
from foliko_cli.cli.output import data_format_option, emit_json, error, note
from foliko_cli.cli.params import (
    session_option,
    storage_option,
    timeout_option,
    var_options,
    yes_option,
)
from foliko_cli.errors import ExitCode

if TYPE_CHECKING:
    from foliko_cli.service.workflows import Step


@click.group()
def workflow() -> None:
    """Run multi-step workflows inside a session.

    \b
    Example:
      foliko workflow run onboarding.toml --session s1 --var user=Ada
    """


@workflow.command()
@click.argument("file", type=click.Path(path_type=Path))
@session_option("The session the steps run in.")
@var_options("Set a session variable first")
@click.option(
    "-m",
    "--model",
    metavar="MODEL",
    help="Model for the prompt steps (overrides the file's model). Env: FOLIKO_MODEL.",
)
@timeout_option("Give up on each prompt step after this many seconds (default 120).")
@click.option(
    "--resume",
    is_flag=True,
    help="Continue a failed run from its failed step (steps done are skipped).",
)
@yes_option
@data_format_option
@storage_option
@click.pass_context
def run(
    ctx: click.Context,
    file: Path,
    session_id: str,
    variables: tuple[tuple[str, object], ...],
    model: str | None,
    timeout: float | None,
    resume: bool,
    yes: bool,
    fmt: str,
) -> None:
    """Run FILE's steps in session ID, in order; stop at the first failure.

    Prompt steps print their reply. A failed step is named in the error, the
    steps already done stay recorded, and --resume continues from it.

    \b
    Examples:
      foliko workflow run steps.toml -s s1 --var topic=tides
      foliko workflow run steps.toml -s s1 --resume
    """
    import dataclasses

    from foliko_cli.service.workflows import load_workflow, run_workflow

    as_json = fmt == "json"
    definition = load_workflow(file)
    if model is not None:
        definition = dataclasses.replace(definition, model=model)
    facade = open_facade(ctx, model=model, timeout=timeout, yes=yes)

    def report(step: Step, output: Any) -> None:
        note(f"step {step.name!r} done")
        if step.kind == "prompt" and not as_json:
            click.echo(output)

    result = run_workflow(
        facade, definition, session_id, variables=dict(variables), resume=resume, on_step=report
    )
    if as_json:
        emit_json(
            {
                "workflow": definition.name,
                "session_id": session_id,
                "ran": result.ran,
                "skipped": result.skipped,
                "outputs": result.outputs,
            }
        )


def known_tools(ctx: click.Context, agent: str | None) -> set[str]:
    """The tools a workflow's tool steps may call: built-ins, the config's, the
    agent's, by name (no plugin is imported: validating runs no code)."""
    from foliko_cli.service.library import BUILTIN_TOOLS, load_tool, no_code

    settings = settings_for(ctx)
    names = {tool.name for tool in BUILTIN_TOOLS}
    with no_code():
        names.update(load_tool(reference).name for reference in settings.tools)
    if agent:
        facade = open_facade(ctx)

        async def agent_tools() -> set[str]:
            with no_code():
                return set((await facade.service.agent_context(agent)).tools)

        names.update(facade.run(agent_tools()))
    return names


@workflow.command()
@click.argument("file", type=click.Path(path_type=Path))
@var_options("Count a variable as set (as workflow run --var would)")
@click.pass_context
def validate(ctx: click.Context, file: Path, variables: tuple[tuple[str, object], ...]) -> None:
    """Check FILE without running it; list every problem and exit 2 if any.

    Besides the file's form, it checks that tool steps call known tools and
    that every {{variable}} is set before its step: by --var, the file's
    vars, or an earlier step's save_as or set.

    \b
    Example:
      foliko workflow validate steps.toml --var topic=tides
    """
    from foliko_cli.service.workflows import problems_of, read_document, reference_problems

    document = read_document(file)
    problems = problems_of(document)
    if not problems:
        problems = reference_problems(
            document,
            tools=known_tools(ctx, document.get("agent")),
            variables={key for key, _ in variables},
        )
    for problem in problems:
        error(f"{file}: {problem}")
    if problems:
        raise click.exceptions.Exit(ExitCode.USAGE)
    count = len(document["steps"])
    click.echo(f"{file}: ok, {count} step{'' if count == 1 else 's'}")
