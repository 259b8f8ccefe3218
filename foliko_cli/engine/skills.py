"""Skills: folders holding a ``SKILL.md`` with YAML front matter (F10).

The system prompt lists each skill by name and description; the model reads
a skill's full text with the ``load_skill`` tool when it needs it. A
malformed ``SKILL.md`` is reported by path and line and skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from foliko_cli.engine.tools import Tool
from foliko_cli.errors import ToolError

SKILL_FILE = "SKILL.md"


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    body: str
    path: Path
    allowed_tools: tuple[str, ...] = ()


@dataclass(frozen=True)
class SkillProblem:
    path: Path
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


@dataclass
class SkillSet:
    skills: dict[str, Skill] = field(default_factory=dict)
    problems: list[SkillProblem] = field(default_factory=list)


def parse_skill(path: Path) -> Skill | SkillProblem:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return SkillProblem(path, 1, f"cannot read it ({exc})")
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return SkillProblem(path, 1, "no front matter: start the file with a '---' line")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        return SkillProblem(path, len(lines), "front matter is not closed with a '---' line")
    import yaml

    try:
        meta = yaml.safe_load("\n".join(lines[1:end])) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 2 if mark is not None else 2
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return SkillProblem(path, line, f"invalid YAML front matter: {problem}")
    if not isinstance(meta, dict):
        return SkillProblem(path, 2, "front matter must be a mapping of keys to values")

    def line_of(key: str) -> int:
        """The file line that sets ``key`` in the front matter (2 when absent)."""
        for number in range(1, end):
            if re.match(rf"\s*{re.escape(key)}\s*:", lines[number]):
                return number + 1
        return 2

    for key in ("name", "description"):
        if not isinstance(meta.get(key), str) or not meta[key].strip():
            return SkillProblem(path, line_of(key), f"front matter needs a non-empty '{key}'")
    allowed = meta.get("allowed-tools", ())
    if isinstance(allowed, str):
        allowed = [t.strip() for t in allowed.replace(",", " ").split() if t.strip()]
    if not isinstance(allowed, list | tuple) or not all(isinstance(t, str) for t in allowed):
        return SkillProblem(
            path, line_of("allowed-tools"), "'allowed-tools' must be a list of tool names"
        )
    return Skill(
        name=meta["name"].strip(),
        description=" ".join(meta["description"].split()),
        body="\n".join(lines[end + 1 :]).strip(),
        path=path,
        allowed_tools=tuple(allowed),
    )


def _name_line(path: Path) -> int:
    """The line of ``name:`` in a parsed SKILL.md (2 when it cannot be found)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return 2
    return next((n for n, line in enumerate(lines, 1) if re.match(r"\s*name\s*:", line)), 2)


def discover_skills(directories: Iterable[Path]) -> SkillSet:
    """Every ``*/SKILL.md`` below the directories; later directories win by name.

    Within one directory the first folder (by name) keeps a name used twice.
    Either way the skill left out is reported as a problem naming the winner.
    """
    found = SkillSet()
    for directory in directories:
        if not directory.is_dir():
            continue
        here: dict[str, Path] = {}
        for path in sorted(directory.glob(f"*/{SKILL_FILE}")):
            parsed = parse_skill(path)
            if isinstance(parsed, SkillProblem):
                found.problems.append(parsed)
                continue
            if parsed.name in here:
                found.problems.append(
                    SkillProblem(
                        path,
                        _name_line(path),
                        f"the name {parsed.name!r} is already used by {here[parsed.name]}, "
                        "which is kept; rename one of them",
                    )
                )
                continue
            earlier = found.skills.get(parsed.name)
            if earlier is not None:
                found.problems.append(
                    SkillProblem(
                        earlier.path,
                        _name_line(earlier.path),
                        f"the skill {parsed.name!r} is overridden by {path}",
                    )
                )
            here[parsed.name] = path
            found.skills[parsed.name] = parsed
    return found


def skills_prompt(skills: Iterable[Skill]) -> str | None:
    listed = [f"- {s.name}: {s.description}" for s in skills]
    if not listed:
        return None
    return (
        "Skills you can use (read one with the load_skill tool before you follow it):\n"
        + "\n".join(listed)
    )


def load_skill_tool(skills: dict[str, Skill]) -> Tool:
    def load(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
        skill = skills.get(arguments["name"])
        if skill is None:
            raise ToolError(
                f"no skill named {arguments['name']!r}; available: {', '.join(skills) or 'none'}"
            )
        return {
            "name": skill.name,
            "instructions": skill.body,
            "allowed_tools": list(skill.allowed_tools),
        }

    return Tool(
        "load_skill",
        "Read the full instructions of a skill listed in the system prompt.",
        load,
        {
            "type": "object",
            "properties": {"name": {"type": "string", "enum": sorted(skills)}},
            "required": ["name"],
            "additionalProperties": False,
        },
    )
