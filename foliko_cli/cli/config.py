"""``foliko config``: the effective settings and where they come from."""

from __future__ import annotations

from pathlib import Path

import click

from foliko_cli.cli.app import settings_for
from foliko_cli.cli.output import emit_rows, list_options, note
from foliko_cli.errors import StorageError, UsageError


@click.group()
def config() -> None:
    """Show the effective configuration and the config file locations.

    Precedence: flags > FOLIKO_* environment > foliko.toml (the nearest in the
    current directory or above, up to the repository root) > user config file
    (FOLIKO_CONFIG, which must exist, or the platform's) > defaults.
    FOLIKO_HOME moves the sessions, not the user config file. A project
    foliko.toml applies only its harmless settings until you trust it
    (foliko config trust).

    \b
    Example:
      foliko config show
    """


@config.command()
@list_options
@click.pass_context
def show(ctx: click.Context, fmt: str) -> None:
    """Each setting's value (secrets redacted) and where it came from.

    The [models.NAME] and [agents.NAME] tables follow, one row per key.

    \b
    Example:
      FOLIKO_MODEL=echo foliko config show --json
    """
    settings = settings_for(ctx)
    rows = [
        {"key": key, "value": str(value) if key == "home" else value, "source": source}
        for key, value, source in settings.shown()
    ]
    emit_rows(rows, {"key": "key", "value": "value", "source": "source"}, fmt)


@config.command()
@click.pass_context
def path(ctx: click.Context) -> None:
    """Print the user config file, then the project config file.

    \b
    Example:
      $EDITOR "$(foliko config path | head -1)"
    """
    settings = settings_for(ctx)
    click.echo(settings.files["user"])
    click.echo(settings.files["project"])


def _named_file(path: Path | None) -> Path:
    """PATH, or the project file foliko finds here (which must exist)."""
    from foliko_cli.common.settings import find_project_file

    found = path if path is not None else find_project_file(Path.cwd())
    if not found.is_file():
        where = "" if path is not None else " in this directory or above it"
        raise UsageError(
            f"there is no file {found}{where}",
            fix="name the file: foliko config trust PATH",
        )
    return found


def _store_failed(store_path: Path, exc: OSError) -> StorageError:
    return StorageError(
        f"cannot write the trust store {store_path} ({exc.strerror or exc})",
        fix="make the foliko home writable (or free some space)",
    )


@config.command()
@click.argument("path", required=False, type=click.Path(dir_okay=False, path_type=Path))
def trust(path: Path | None) -> None:
    """Trust a project foliko.toml (or a template file) as it is now.

    Until then, what in a foliko.toml found here or above runs code or sends
    credentials (MCP servers, model base URLs and keys, tools, agents, the
    system prompt, storage, home, trash) is not used, and a template file's
    functions and module tools do not run. A file changed since needs
    trusting again. PATH defaults to the project's foliko.toml.

    \b
    Example:
      cat foliko.toml && foliko config trust
    """
    from foliko_cli.common.settings import trust_store, user_config_path

    path = _named_file(path)
    if path.resolve() == user_config_path().resolve():
        note(f"{path} is your own config file; it needs no trust")
        return
    store = trust_store()
    try:
        data = path.read_bytes()
        sha = store.trust(path, data)
    except OSError as exc:
        if exc.filename == str(path):
            raise UsageError(f"cannot read {path} ({exc.strerror})", fix="check the path") from None
        raise _store_failed(store.path, exc) from None
    note(f"trusted {path.resolve()} as it is now (sha256 {sha[:16]}…)")


@config.command()
@click.argument("path", required=False, type=click.Path(dir_okay=False, path_type=Path))
def untrust(path: Path | None) -> None:
    """Stop trusting a file (PATH defaults to the project's foliko.toml).

    \b
    Example:
      foliko config untrust ~/src/repo/foliko.toml
    """
    from foliko_cli.common.settings import find_project_file, trust_store

    path = path if path is not None else find_project_file(Path.cwd())
    store = trust_store()
    try:
        removed = store.untrust(path)
    except OSError as exc:
        raise _store_failed(store.path, exc) from None
    note(f"{path.resolve()} {'is no longer trusted' if removed else 'was not trusted'}")


@config.command()
@list_options
def trusted(fmt: str) -> None:
    """The files you trust: each one's path, the SHA-256 of the content trusted,
    and its state (trusted; changed: it needs trusting again; missing).

    \b
    Example:
      foliko config trusted -q | xargs -r -n1 foliko config untrust
    """
    from foliko_cli.common.settings import trust_store

    rows = [entry._asdict() for entry in trust_store().entries()]
    emit_rows(rows, {"path": "path", "state": "state", "sha256": "sha256"}, fmt)
