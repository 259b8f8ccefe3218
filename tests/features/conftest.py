"""Fixtures for agents, skills, tool plugins and workflows (SPEC F5, F10).

Every test gets a project directory as its cwd (``./foliko.toml``,
``./.foliko/skills/``), a user config file of its own through
``FOLIKO_CONFIG`` (its directory holds the user's ``skills/``), the offline
echo model, and ``plugin_pkg`` importable for ``plugin_pkg.tools:NAME``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from trusting import trust

from foliko_cli.cli.main import cli

FEATURES = Path(__file__).resolve().parent
ENTRY_POINT_DIST = "foliko_feature_plugins-0.1.dist-info"


@dataclass
class Project:
    root: Path
    user_dir: Path
    site: Path

    @property
    def config(self) -> Path:
        return self.root / "foliko.toml"

    @property
    def user_config(self) -> Path:
        return self.user_dir / "config.toml"

    def write_config(self, text: str) -> None:
        """Write ./foliko.toml and trust it (as foliko config trust does)."""
        self.config.write_text(text, encoding="utf-8")
        trust(self.config)

    def write_user_config(self, text: str) -> None:
        self.user_config.write_text(text, encoding="utf-8")

    def skill_dir(self, where: str = "project") -> Path:
        base = self.root / ".foliko" if where == "project" else self.user_dir
        return base / "skills"

    def write_skill(self, folder: str, text: str | bytes, where: str = "project") -> Path:
        path = self.skill_dir(where) / folder / "SKILL.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
        return path

    def skill(
        self,
        name: str,
        description: str,
        body: str = "",
        *,
        where: str = "project",
        folder: str | None = None,
        extra: str = "",
    ) -> Path:
        text = f"---\nname: {name}\ndescription: {description}\n{extra}---\n{body}\n"
        return self.write_skill(folder or name, text, where)

    def entry_point(self, name: str, value: str) -> None:
        """Declare a ``foliko.tools`` entry point in a dist-info on sys.path."""
        dist = self.site / ENTRY_POINT_DIST
        dist.mkdir(parents=True, exist_ok=True)
        (dist / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: foliko-feature-plugins\nVersion: 0.1\n"
        )
        points = dist / "entry_points.txt"
        old = points.read_text() if points.exists() else "[foliko.tools]\n"
        points.write_text(old + f"{name} = {value}\n")

    def write(self, name: str, text: str) -> Path:
        path = self.root / name
        path.write_text(text, encoding="utf-8")
        return path

    @property
    def pythonpath(self) -> str:
        """PYTHONPATH for a real ``foliko`` process to see what this process sees."""
        return os.pathsep.join([str(self.site), str(FEATURES)])


@pytest.fixture
def importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """``plugin_pkg`` (tests/features/plugin_pkg) can be imported."""
    monkeypatch.syspath_prepend(str(FEATURES))


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, importable: None) -> Project:
    root = tmp_path / "project"
    root.mkdir()
    user_dir = tmp_path / "user-config"
    user_dir.mkdir()
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.chdir(root)
    (user_dir / "config.toml").touch()
    monkeypatch.setenv("FOLIKO_CONFIG", str(user_dir / "config.toml"))
    monkeypatch.setenv("FOLIKO_MODEL", "echo")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.syspath_prepend(str(site))
    return Project(root=root, user_dir=user_dir, site=site)


@pytest.fixture
def invoke(project: Project):
    """Run a foliko command in-process in the project; stdout and stderr apart."""
    runner = CliRunner()

    def run(*args: str, input: str | None = None, env: dict[str, str] | None = None):
        return runner.invoke(cli, list(args), input=input, env=env, catch_exceptions=False)

    return run


@pytest.fixture
def chat(invoke):
    """``foliko chat -s SESSION *args MESSAGE``; asserts nothing."""

    def run(session_id: str, message: str, *args: str):
        return invoke("chat", "-s", session_id, *args, message)

    return run


@pytest.fixture
def show(invoke):
    def load(session_id: str) -> dict[str, Any]:
        result = invoke("sessions", "show", session_id, "--json")
        assert result.exit_code == 0, result.stderr
        return orjson.loads(result.stdout)

    return load


@pytest.fixture
def dry_run(invoke):
    """What the model would be sent for MESSAGE in SESSION (``chat --dry-run``)."""

    def run(session_id: str, message: str, *args: str) -> dict[str, Any]:
        result = invoke("chat", "-s", session_id, "--dry-run", *args, message)
        assert result.exit_code == 0, result.stderr
        return orjson.loads(result.stdout)

    return run


def tool_messages(session: dict[str, Any], name: str | None = None) -> list[dict[str, Any]]:
    return [
        m
        for m in session["messages"]
        if m["role"] == "tool" and (name is None or m.get("name") == name)
    ]


def stderr_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


def tool_call(name: str, arguments: dict[str, Any] | None = None) -> str:
    """The echo model's scripted tool call."""
    return f"/tool {name} {orjson.dumps(arguments or {}).decode()}"
