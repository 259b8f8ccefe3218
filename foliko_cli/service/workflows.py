"""Workflows: steps run inside one session, state in its variables (seed §7.3).

A workflow file (TOML, YAML or JSON) holds ``steps``; each step has a unique
``name`` (default ``step N``) and exactly one of ``prompt`` (a chat turn), ``tool`` with ``args``
(a tool call) or ``set`` (session variables). Strings may use ``{{var}}``
from the session's variables; ``save_as`` stores a step's result in a
variable. Progress lives in the variable ``_workflow``: the steps done, and
the failed step with its error, so that ``--resume`` continues from it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import orjson

from foliko_cli.errors import FolikoError, Hint, StepFailed, UsageError, WorkflowError

STATE_VARIABLE = "_workflow"
STEP_KINDS = ("prompt", "tool", "set")
STEP_KEYS = {"name", "prompt", "tool", "args", "set", "save_as", "description"}
TOP_KEYS = {"name", "description", "steps", "vars", "model", "agent"}
_TEMPLATE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*\}\}")


@dataclass(frozen=True)
class Step:
    name: str
    kind: str
    body: Any
    args: dict[str, Any]
    save_as: str | None


@dataclass(frozen=True)
class Workflow:
    name: str
    steps: list[Step]
    variables: dict[str, Any]
    model: str | None
    agent: str | None
    digest: str


def _parse_text(path: Path, text: str) -> Any:
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            import tomllib

            return tomllib.loads(text)
        if suffix == ".json":
            return orjson.loads(text)
        import yaml

        return yaml.safe_load(text)
    except Exception as exc:
        kind = {".toml": "TOML", ".json": "JSON"}.get(suffix, "YAML")
        detail = " ".join(str(exc).split())
        raise WorkflowError(f"{path} is not valid {kind} ({detail}); fix the file") from None


def step_name(step: dict[str, Any], number: int) -> str:
    """The step's ``name``, or ``step N`` (its position) when it has none."""
    name = step.get("name")
    return name if isinstance(name, str) and name.strip() else f"step {number}"


def _placeholders(value: Any) -> list[str]:
    """The ``{{variables}}`` used anywhere inside ``value``, in order."""
    if isinstance(value, dict):
        return [name for v in value.values() for name in _placeholders(v)]
    if isinstance(value, list):
        return [name for v in value for name in _placeholders(v)]
    return _TEMPLATE.findall(value) if isinstance(value, str) else []


def reference_problems(
    document: dict[str, Any], *, tools: set[str], variables: set[str]
) -> list[str]:
    """Steps that call tools not in ``tools`` or use variables not set before them.

    A variable counts as set when given in ``variables`` (``--var``, the
    session), in the file's ``vars``, or by an earlier step's ``save_as`` or ``set``.
    """
    known = set(variables) | set(document.get("vars") or {}) | {STATE_VARIABLE}
    problems = []
    for number, step in enumerate(document["steps"], start=1):
        where = f"step {number} ({step_name(step, number)!r})"
        if "tool" in step and step["tool"] not in tools:
            problems.append(
                f"{where}: unknown tool {step['tool']!r}; known: {', '.join(sorted(tools))}"
            )
        used = _placeholders({k: step[k] for k in ("prompt", "args", "set") if k in step})
        for name in dict.fromkeys(used):
            if name not in known:
                problems.append(
                    f"{where}: the variable {name!r} is not set by then; set it when running "
                    "the workflow, in vars, or with an earlier step's save_as"
                )
        if isinstance(step.get("set"), dict):
            known.update(step["set"])
        if isinstance(step.get("save_as"), str):
            known.add(step["save_as"])
    return problems


def problems_of(document: Any) -> list[str]:
    """Every way ``document`` is not a valid workflow."""
    if not isinstance(document, dict):
        return ["the file must hold a table/mapping with a 'steps' list"]
    problems = [f"unknown key {key!r}" for key in sorted(set(document) - TOP_KEYS)]
    steps = document.get("steps")
    if not isinstance(steps, list) or not steps:
        return [*problems, "'steps' must be a non-empty list"]
    if not isinstance(document.get("vars", {}), dict):
        problems.append("'vars' must be a table of variables")
    seen: set[str] = set()
    for number, step in enumerate(steps, start=1):
        where = f"step {number}"
        if not isinstance(step, dict):
            problems.append(f"{where}: must be a table")
            continue
        name = step_name(step, number)
        if "name" in step and (not isinstance(step["name"], str) or not step["name"].strip()):
            problems.append(f"{where}: 'name' must be non-empty text (or left out)")
        elif name in seen:
            problems.append(f"{where}: the name {name!r} is used twice")
        else:
            seen.add(name)
            where = f"step {number} ({name!r})"
        problems.extend(f"{where}: unknown key {k!r}" for k in sorted(set(step) - STEP_KEYS))
        kinds = [k for k in STEP_KINDS if k in step]
        if len(kinds) != 1:
            problems.append(f"{where}: needs exactly one of prompt, tool, set")
            continue
        kind = kinds[0]
        if kind == "prompt" and not isinstance(step["prompt"], str):
            problems.append(f"{where}: 'prompt' must be text")
        if kind == "tool" and not isinstance(step["tool"], str):
            problems.append(f"{where}: 'tool' must be a tool name")
        if kind == "set" and not isinstance(step["set"], dict):
            problems.append(f"{where}: 'set' must be a table of variables")
        if "args" in step and (kind != "tool" or not isinstance(step["args"], dict)):
            problems.append(f"{where}: 'args' is a table, for tool steps only")
        if "save_as" in step and not isinstance(step["save_as"], str):
            problems.append(f"{where}: 'save_as' must be a variable name")
    return problems


def read_document(path: Path) -> Any:
    """The parsed file (TOML, JSON, or YAML by its extension), not yet checked."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkflowError(f"cannot read workflow {path} ({exc}); check the path") from None
    return _parse_text(path, text)


def load_workflow(path: Path) -> Workflow:
    document = read_document(path)
    problems = problems_of(document)
    if problems:
        more = len(problems) - 1
        raise WorkflowError(
            f"{path}: {problems[0]}" + (f" (and {more} more)" if more else ""),
            fix="validate the file to see them all" if more else None,
            hint=Hint.VALIDATE if more else None,
        )
    steps = []
    for number, raw in enumerate(document["steps"], start=1):
        kind = next(k for k in STEP_KINDS if k in raw)
        name = step_name(raw, number)
        steps.append(Step(name, kind, raw[kind], raw.get("args", {}), raw.get("save_as")))
    return Workflow(
        name=str(document.get("name") or path.stem),
        steps=steps,
        variables=document.get("vars", {}),
        model=document.get("model"),
        agent=document.get("agent"),
        digest=hashlib.sha256(orjson.dumps(document["steps"])).hexdigest()[:16],
    )


def render(value: Any, variables: dict[str, Any]) -> Any:
    """Fill ``{{var}}`` in every string inside ``value``.

    A string that is exactly one placeholder takes the variable's value as it
    is (a number stays a number); inside text, non-strings are written as JSON.
    """
    if isinstance(value, dict):
        return {k: render(v, variables) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, variables) for v in value]
    if not isinstance(value, str):
        return value

    def lookup(name: str) -> Any:
        if name not in variables:
            raise UsageError(f"the variable {name!r} is not set", fix="set it", hint=Hint.VARIABLE)
        return variables[name]

    whole = _TEMPLATE.fullmatch(value.strip())
    if whole:
        return lookup(whole.group(1))

    def text_of(match: re.Match[str]) -> str:
        found = lookup(match.group(1))
        return found if isinstance(found, str) else orjson.dumps(found).decode()

    return _TEMPLATE.sub(text_of, value)


@dataclass
class WorkflowRun:
    done: list[str]
    ran: list[str]
    skipped: list[str]
    outputs: dict[str, Any]


def run_workflow(
    facade: Any,
    workflow: Workflow,
    session_id: str,
    *,
    variables: dict[str, Any] | None = None,
    resume: bool = False,
    on_step: Callable[[Step, Any], None] | None = None,
) -> WorkflowRun:
    """Run the steps in order; stop at the first failure, recording it."""
    current = _session_variables(facade, session_id)
    state = current.get(STATE_VARIABLE)
    if resume:
        if not isinstance(state, dict) or state.get("status") not in ("failed", "running"):
            raise UsageError(
                f"session {session_id!r} has no failed workflow to resume",
                fix="run it from the start",
            )
        if state.get("digest") != workflow.digest:
            raise UsageError(
                "the workflow's steps changed since the failed run", fix="run it from the start"
            )
        done = list(state.get("done", []))
    else:
        done = []
    state = {
        "name": workflow.name,
        "digest": workflow.digest,
        "done": done,
        "status": "running",
        "failed": None,
        "error": None,
    }
    start = {**({} if resume else workflow.variables), **(variables or {})}
    facade.update_variables(session_id, {**start, STATE_VARIABLE: state}, create=True)
    run = WorkflowRun(done=done, ran=[], skipped=list(done), outputs={})
    total = len(workflow.steps)
    for position, step in enumerate(workflow.steps, start=1):
        if step.name in done:
            continue
        try:
            output = _run_step(facade, workflow, step, session_id)
        except BaseException as exc:
            reason = str(exc) or type(exc).__name__
            state.update(status="failed", failed=step.name, error=reason)
            facade.update_variables(session_id, {STATE_VARIABLE: state})
            if isinstance(exc, FolikoError):
                raise StepFailed(step.name, position, total, exc) from None
            raise
        done.append(step.name)
        run.ran.append(step.name)
        run.outputs[step.name] = output
        changes: dict[str, Any] = {STATE_VARIABLE: state}
        if step.save_as:
            changes[step.save_as] = output
        facade.update_variables(session_id, changes)
        if on_step:
            on_step(step, output)
    state["status"] = "done"
    facade.update_variables(session_id, {STATE_VARIABLE: state})
    return run


def _session_variables(facade: Any, session_id: str) -> dict[str, Any]:
    from foliko_cli.errors import SessionNotFoundError

    try:
        return cast("dict[str, Any]", facade.get_variables(session_id))
    except SessionNotFoundError:
        return {}


def _run_step(facade: Any, workflow: Workflow, step: Step, session_id: str) -> Any:
    variables = _session_variables(facade, session_id)
    if step.kind == "prompt":
        text = render(step.body, variables)
        result = facade.chat(session_id, str(text), model=workflow.model, agent=workflow.agent)
        return result.message
    if step.kind == "set":
        values = render(step.body, variables)
        facade.update_variables(session_id, values)
        return values
    arguments = render(step.args, variables)
    result = facade.call_tool(session_id, step.body, arguments, agent=workflow.agent)
    if result.is_error:
        raise FolikoError(result.content.removeprefix("error: "))
    try:
        return orjson.loads(result.content)
    except orjson.JSONDecodeError:
        return result.content
