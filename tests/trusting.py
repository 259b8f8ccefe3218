"""Trusting a project foliko.toml (or a template file) in a test, as
``foliko config trust PATH`` does, in the test's FOLIKO_HOME."""

from __future__ import annotations

from pathlib import Path


def trust(path: Path, text: str | None = None, home: Path | None = None) -> Path:
    """Trust ``path`` as it is now, after writing ``text`` to it when given (in
    ``home``, else the user's state home)."""
    from foliko_cli.common.settings import trust_store
    from foliko_cli.common.trust import TrustStore

    if text is not None:
        path.write_text(text)
    store = TrustStore(home) if home is not None else trust_store()
    store.trust(path, path.read_bytes())
    return path
