"""Settings and where each came from.

Precedence: flags > ``FOLIKO_*`` environment > ``foliko.toml`` (project: the
nearest one in the current directory or above it, up to the repository root)
> the user file (``config.toml`` in the platform's config directory, or
``$FOLIKO_CONFIG``, which must exist) > defaults. ``FOLIKO_HOME`` moves the
sessions, never the user config file.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from foliko_cli.errors import UsageError

if TYPE_CHECKING:
    from foliko_cli.common.trust import TrustStore

PROJECT_FILE = "foliko.toml"


def _positive_float(value: Any) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError("must be a number of seconds, such as 30 or 2.5") from None
    if not math.isfinite(number) or number <= 0:
        raise ValueError("must be a finite number greater than 0")
    return number


def _positive_int(value: Any) -> int:
    try:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError("must be a whole number, such as 10") from None
    if not 1 <= number <= 2**31 - 1:
        raise ValueError("must be a whole number from 1 to 2,147,483,647")
    return number


def _names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("must be a list of names")
    return tuple(value)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("must be a string")
    return value


def parse_keep(value: Any) -> int:
    """A retention: a duration (``30d``, ``12h``) in milliseconds, or 0 (none)."""
    if value == 0 and not isinstance(value, bool):
        return 0
    if isinstance(value, str):
        if value.strip() == "0":
            return 0
        from foliko_cli.common.clock import parse_duration

        return parse_duration(value)
    raise ValueError("must be a duration such as 30d, or 0")


class Field(NamedTuple):
    parse: Callable[[Any], Any]
    default: Any
    help: str


FIELDS: dict[str, Field] = {
    "home": Field(_text, None, "where sessions and state live"),
    "storage": Field(_text, "sqlite", "memory, json, sqlite or a storage URL"),
    "model": Field(_text, None, "provider:model; unset means the offline echo model"),
    "timeout": Field(_positive_float, 120.0, "seconds a turn may take"),
    "max_steps": Field(_positive_int, 10, "model calls per turn (tool-call loop bound)"),
    "system_prompt": Field(_text, None, "system prompt for sessions without their own"),
    "context_window": Field(_positive_int, None, "token budget; unset means the model's own"),
    "tools": Field(_names, (), "plugin tools to enable: names or package.module:function"),
    "serve_tools": Field(
        _names, (), "the server's own tools foliko serve offers on HTTP turns (default: none)"
    ),
    "trash_keep": Field(
        parse_keep,
        30 * 86_400_000,
        "how long the trash keeps deleted, pruned, cleared, rewound or reset sessions (0: off)",
    ),
}
MODEL_KEYS = (
    "model",
    "base_url",
    "api_key_env",
    "api_key",
    "context_window",
    "max_tokens",
    "options",
    "price",
)
AGENT_KEYS = ("system_prompt", "model", "tools", "skills", "description", "mcp_servers")
MCP_OAUTH_KEYS = (
    "auth",
    "grant",
    "client_id",
    "client_secret_env",
    "client_metadata_url",
    "scopes",
    "token_endpoint_auth_method",
    "issuer",
    "redirect_port",
)
MCP_STDIO_KEYS = ("command", "args", "env", "cwd")
MCP_HTTP_KEYS = ("url", "headers", *MCP_OAUTH_KEYS)
MCP_COMMON_KEYS = (
    "tools",
    "exclude",
    "startup_timeout",
    "call_timeout",
    "enabled",
    "per_user",
    "approve",
    "elicitation",
)
TABLE_KEYS = {
    "models": MODEL_KEYS,
    "agents": AGENT_KEYS,
    "mcp_servers": (*MCP_STDIO_KEYS, *MCP_HTTP_KEYS, *MCP_COMMON_KEYS),
}
"""The keys each ``[TABLE.NAME]`` entry may hold."""
TABLES = tuple(TABLE_KEYS)
SECTIONS = {"trash": {"keep": "trash_keep"}}
"""Settings written in a table of their own (``[trash] keep = "30d"``): the
setting's name is the table's and the key's (``trash_keep``, FOLIKO_TRASH_KEEP)."""
_IN_SECTIONS = {name for keys in SECTIONS.values() for name in keys.values()}
SECRET = re.compile(r"key|token|secret|password|authorization|cookie", re.IGNORECASE)


def unknown_key(key: str, where: str, known: tuple[str, ...]) -> str:
    """The one line for a key the config does not know: the key, where it is,
    and the closest known key (or all of them)."""
    import difflib

    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}"
    return f"unknown key {key!r} in {where} ({hint}); fix or remove it"


def entry_problem(table: str, name: str, entry: Mapping[str, Any]) -> str | None:
    """The first key of the ``[TABLE.NAME]`` entry that the table does not know."""
    known = TABLE_KEYS[table]
    unknown = sorted(set(entry) - set(known))
    return unknown_key(unknown[0], f"[{table}.{name}]", known) if unknown else None


class ConfigProblem(NamedTuple):
    """An unknown key in a ``[TABLE.NAME]`` entry of ``path``; ``message`` says it."""

    table: str
    path: Path
    message: str


def env_name(key: str) -> str:
    return "FOLIKO_" + key.upper()


def _platform_dir(kind: str, env: Mapping[str, str]) -> Path:
    """The user's ``data``, ``config`` or ``cache`` directory for foliko.

    On Linux this is the XDG rule, read straight from the environment;
    platformdirs (a few milliseconds to import) answers for other systems.
    """
    if sys.platform.startswith("linux"):
        variable, fallback = {
            "data": ("XDG_DATA_HOME", ".local/share"),
            "config": ("XDG_CONFIG_HOME", ".config"),
            "cache": ("XDG_CACHE_HOME", ".cache"),
        }[kind]
        base = env.get(variable, "").strip()
        root = Path(base) if base and os.path.isabs(base) else Path.home() / fallback
        return root / "foliko"
    import platformdirs

    finder = {
        "data": platformdirs.user_data_dir,
        "config": platformdirs.user_config_dir,
        "cache": platformdirs.user_cache_dir,
    }[kind]
    return Path(finder("foliko", appauthor=False))


def default_home(env: Mapping[str, str] | None = None) -> Path:
    return _platform_dir("data", os.environ if env is None else env)


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where foliko keeps what it can rebuild (``$XDG_CACHE_HOME/foliko`` on Linux)."""
    return _platform_dir("cache", os.environ if env is None else env)


def config_dir(env: Mapping[str, str] | None = None) -> Path:
    """The user's foliko config directory (skills live in its ``skills/``)."""
    return user_config_path(env).parent


def find_project_file(cwd: Path) -> Path:
    """The nearest ``foliko.toml`` in ``cwd`` or above, stopping at a repository root.

    A directory holding ``.git`` is the last one searched (as git and ruff
    do); with none found, the path is ``cwd/foliko.toml``.
    """
    for directory in (cwd, *cwd.parents):
        candidate = directory / PROJECT_FILE
        if candidate.is_file():
            return candidate
        if (directory / ".git").exists():
            break
    return cwd / PROJECT_FILE


def user_config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("FOLIKO_CONFIG"):
        return Path(env["FOLIKO_CONFIG"]).expanduser()
    return _platform_dir("config", env) / "config.toml"


def skill_dirs(cwd: Path, env: Mapping[str, str] | None = None) -> list[Path]:
    """Where skills are found, lowest precedence first: the user's, then the project's."""
    return [config_dir(env) / "skills", cwd / ".foliko" / "skills"]


def read_toml(path: Path, *, required: str | None = None) -> dict[str, Any]:
    """The file's settings, or {} when it does not exist; bad files exit 2.

    ``required`` names what made the file required (e.g. ``FOLIKO_CONFIG``):
    then a missing file is an error too.
    """
    return parse_toml(path, _file_bytes(path, required))


def _file_bytes(path: Path, required: str | None = None) -> bytes | None:
    """The file's bytes, None when it does not exist (an error when ``required``)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        if required:
            raise UsageError(
                f"config file {path} (from {required}) does not exist; "
                f"create it or unset {required}"
            ) from None
        return None
    except OSError as exc:
        raise UsageError(
            f"cannot read config file {path}: {exc.strerror}; fix its permissions"
        ) from None


def parse_toml(path: Path, data: bytes | None) -> dict[str, Any]:
    """The settings in ``data``, the content of the config file ``path`` (None: {})."""
    if data is None:
        return {}
    from foliko_cli.common.toml_cache import load_toml

    table = load_toml(path, data, cache_dir())
    known = [*(k for k in FIELDS if k not in _IN_SECTIONS), *TABLES, *SECTIONS]
    unknown = sorted(set(table) - set(known))
    if unknown:
        message = unknown_key(unknown[0], "the top level", tuple(known))
        raise UsageError(f"config file {path}: {message.replace('key', 'setting', 1)}")
    for section, keys in SECTIONS.items():
        entries = table.pop(section, {})
        if not isinstance(entries, dict):
            raise UsageError(
                f"config file {path}: [{section}] must be a table of "
                f"{', '.join(keys)}; fix the file"
            )
        unknown = sorted(set(entries) - set(keys))
        if unknown:
            key = unknown[0]
            raise UsageError(
                f"config file {path}: unknown setting '{section}.{key}'; "
                f"known: {', '.join(f'{section}.{k}' for k in keys)}"
            )
        table.update((keys[key], value) for key, value in entries.items())
    for name in TABLES:
        entries = table.get(name, {})
        if not isinstance(entries, dict) or not all(isinstance(v, dict) for v in entries.values()):
            raise UsageError(
                f"config file {path}: [{name}] must hold tables like [{name}.NAME]; fix the file"
            )
    return table


HARMLESS = ("model", "timeout", "max_steps", "context_window")
"""The settings a project file applies before it is trusted: none of them runs
code, sends a key, moves the sessions or changes what is sent to the model."""
MODEL_SERVER_KEYS = ("base_url", "api_key_env", "api_key")
"""An alias holding one of these sends a key somewhere: it waits for trust."""


class Untrusted(NamedTuple):
    """A project file not (or no longer) trusted: what in it was left out."""

    path: Path
    held: tuple[str, ...]
    changed: bool

    def message(self) -> str:
        shown = ", ".join(self.held[:6]) + (
            f" and {len(self.held) - 6} more" if len(self.held) > 6 else ""
        )
        state = "has changed since it was trusted" if self.changed else "is not trusted"
        return (
            f"{self.path} {state}, so its {shown} are not used; review it, then "
            f"trust it with: foliko config trust {self.path}"
        )


def needs_trust(table: Mapping[str, Any]) -> tuple[str, ...]:
    """What in a project file's settings takes effect only once the file is
    trusted, named as the file spells it (``tools``, ``[mcp_servers.files]``)."""
    held = [display_name(key) for key in FIELDS if key in table and key not in HARMLESS]
    for name, entry in table.get("models", {}).items():
        if any(key in entry for key in MODEL_SERVER_KEYS):
            held.append(f"[models.{name}]")
    held += [f"[{t}.{name}]" for t in ("agents", "mcp_servers") for name in table.get(t, {})]
    return tuple(held)


def _trusted_part(table: dict[str, Any]) -> dict[str, Any]:
    """The part of a project file's settings that applies before it is trusted."""
    kept: dict[str, Any] = {key: table[key] for key in HARMLESS if key in table}
    kept["models"] = {
        name: entry
        for name, entry in table.get("models", {}).items()
        if not any(key in entry for key in MODEL_SERVER_KEYS)
    }
    return kept


class Settings(NamedTuple):
    home: Path
    storage: Any  # a storage spec, or an opened adapter (serve's per-user view)
    model: str | None
    timeout: float
    max_steps: int
    system_prompt: str | None
    context_window: int | None
    tools: tuple[str, ...]
    serve_tools: tuple[str, ...]
    trash_keep: int
    models: dict[str, dict[str, Any]]
    agents: dict[str, dict[str, Any]]
    mcp_servers: dict[str, dict[str, Any]]
    sources: dict[str, str]
    files: dict[str, Path]
    problems: tuple[ConfigProblem, ...] = ()
    """Unknown keys in the tables' entries: each command decides whether the
    ones in the tables it uses stop it (see ``cli.app``)."""
    untrusted: Untrusted | None = None
    """The project file, when some of it waits for the user's trust."""

    def shown(self) -> list[tuple[str, Any, str]]:
        """(key, value with secrets redacted, source) for ``config show``.

        The tables follow the settings, one row per entry: ``models.NAME.KEY``.
        """
        rows = [_shown_row(key, getattr(self, key), self.sources[key]) for key in FIELDS]
        for table in TABLES:
            for name, entry in sorted(getattr(self, table).items()):
                origin = self.sources.get(f"{table}.{name}", "default")
                rows.extend(
                    (f"{table}.{name}.{key}", redact(key, value), origin)
                    for key, value in entry.items()
                )
        return rows


def display_name(key: str) -> str:
    """A setting's name as a config file spells it: ``trash.keep`` for ``trash_keep``."""
    for section, keys in SECTIONS.items():
        for name, field in keys.items():
            if field == key:
                return f"{section}.{name}"
    return key


def _shown_row(key: str, value: Any, source: str) -> tuple[str, Any, str]:
    if FIELDS[key].parse is parse_keep:
        from foliko_cli.common.clock import format_duration

        value = format_duration(value)
    return display_name(key), redact(key, value), source


def redact(key: str, value: Any) -> Any:
    """``value`` as ``config show`` prints it: a secret's as ***, a URL's
    credentials hidden, a table's (MCP ``headers``) entry by entry."""
    if value is None:
        return None
    if SECRET.search(key) and not key.endswith("_env"):
        return "***"
    if isinstance(value, str):
        from foliko_cli.common.redaction import redact_url

        return redact_url(value)
    if isinstance(value, dict):
        return {name: redact(name, item) for name, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact(key, item) for item in value)
    return value


def load_settings(
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    **flags: Any,
) -> Settings:
    """Resolve every setting; ``flags`` that are None do not count."""
    env = os.environ if env is None else env
    user_path = user_config_path(env)
    project_path = find_project_file(cwd or Path.cwd())
    user = read_toml(user_path, required="FOLIKO_CONFIG" if env.get("FOLIKO_CONFIG") else None)
    written, project, untrusted = _project_settings(project_path, user_path, user, env)
    layers: list[tuple[str, Mapping[str, Any]]] = [
        ("flag", {k: v for k, v in flags.items() if v is not None}),
        ("env", {k: env[env_name(k)] for k in FIELDS if env.get(env_name(k))}),
        (f"project {project_path}", project),
        (f"user {user_path}", user),
    ]
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key in FIELDS:
        values[key], sources[key] = FIELDS[key].default, "default"
        for origin, layer in layers:
            if key in layer:
                where = f"env {env_name(key)}" if origin == "env" else origin
                values[key], sources[key] = _parsed(key, layer[key], where), where
                break
        if key in written and key not in project:  # held back, and checked all the same
            _parsed(key, written[key], f"project {project_path}")
    for table in TABLES:
        for origin, layer in layers[3:1:-1]:
            for name in layer.get(table, {}):
                sources[f"{table}.{name}"] = origin
    raw_home = values.pop("home")
    home = Path(raw_home).expanduser() if raw_home else default_home(env)
    problems = tuple(
        ConfigProblem(table, path, f"config file {path}: {message}")
        for path, layer in ((project_path, written), (user_path, user))
        for table in TABLES
        for name, entry in layer.get(table, {}).items()
        if (message := entry_problem(table, name, entry))
    )
    return Settings(
        home=home,
        **values,
        models={**user.get("models", {}), **project.get("models", {})},
        agents={**user.get("agents", {}), **project.get("agents", {})},
        mcp_servers={**user.get("mcp_servers", {}), **project.get("mcp_servers", {})},
        sources=sources,
        files={"user": user_path, "project": project_path},
        problems=problems,
        untrusted=untrusted,
    )


def _parsed(key: str, value: Any, where: str) -> Any:
    try:
        return FIELDS[key].parse(value)
    except (TypeError, ValueError) as exc:
        raise UsageError(
            f"setting {display_name(key)!r} from {where}: {exc} (got {value!r}); fix it"
        ) from None


def state_home(user: Mapping[str, Any], env: Mapping[str, str]) -> Path:
    """The foliko home as the user alone sets it (``FOLIKO_HOME``, the user
    file's ``home``, else the default): where the trust store is, which no
    project file can move."""
    configured = env.get("FOLIKO_HOME") or user.get("home")
    return Path(configured).expanduser() if isinstance(configured, str) else default_home(env)


def trust_store(env: Mapping[str, str] | None = None) -> TrustStore:
    """The user's store of trusted files (see ``common/trust.py``)."""
    from foliko_cli.common.trust import TrustStore

    env = os.environ if env is None else env
    user = read_toml(
        user_config_path(env), required="FOLIKO_CONFIG" if env.get("FOLIKO_CONFIG") else None
    )
    return TrustStore(state_home(user, env))


def _project_settings(
    path: Path, user_path: Path, user: Mapping[str, Any], env: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, Any], Untrusted | None]:
    """The project file's settings as written, those that apply, and what of it
    waits for trust.

    The file is hashed only when it holds something that needs trust; the one
    read of its bytes is both parsed and hashed.
    """
    data = _file_bytes(path)
    table = parse_toml(path, data)
    held = needs_trust(table)
    if not held or (user_path.exists() and path.resolve() == user_path.resolve()):
        return table, table, None
    from foliko_cli.common.trust import TrustStore

    assert data is not None
    state = TrustStore(state_home(user, env)).state(path, data)
    if state == "trusted":
        return table, table, None
    return table, _trusted_part(table), Untrusted(path, held, state == "changed")
