"""``foliko workflow``: run and validate workflow files."""

from __future__ import annotations

from pathlib import Path

import click

from foliko_cli.cli.app import open_facade
from foliko_cli.cli.output import emit_json, note
from foliko_cli.cli.params import session_option, var_option
from foliko_cli.errors import ExitCode


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
@var_option("Set a session variable first (repeatable; V is JSON or text).")
@click.option(
    "--resume",
    is_flag=True,
    help="Continue a failed run from its failed step (steps done are skipped).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print a JSON summary: steps run, skipped, and each step's output.",
)
@click.pass_context
def run(
    ctx: click.Context,
    file: Path,
    session_id: str,
    variables: tuple[tuple[str, object], ...],
    resume: bool,
    as_json: bool,
) -> None:
    """Run FILE's steps in session ID, in order; stop at the first failure.

    Prompt steps print their reply. A failed step is named in the error, the
    steps already done stay recorded, and --resume continues from it.

    \b
    Examples:
      foliko workflow run steps.toml -s s1 --var topic=tides
      foliko workflow run steps.toml -s s1 --resume
    """
    from foliko_cli.workflow import load_workflow, run_workflow

    definition = load_workflow(file)
    facade = open_facade(ctx)

    def report(step, output) -> None:
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


@workflow.command()
@click.argument("file", type=click.Path(path_type=Path))
def validate(file: Path) -> None:
    """Check FILE without running it; list every problem and exit 2 if any.

    \b
    Example:
      foliko workflow validate steps.toml
    """
    from foliko_cli.workflow import problems_of, read_document

    document = read_document(file)
    problems = problems_of(document)
    for problem in problems:
        click.echo(f"{file}: {problem}", err=True)
    if problems:
        raise click.exceptions.Exit(ExitCode.USAGE)
    click.echo(f"{file}: ok, {len(document['steps'])} steps")
