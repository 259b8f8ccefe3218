"""Where state lives and which storage and model to use.

Precedence: explicit arguments (flags) > ``FOLIKO_*`` environment > defaults.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


def foliko_home(env: Mapping[str, str] | None = None) -> Path:
    """``$FOLIKO_HOME``, else the platform's user data directory."""
    env = os.environ if env is None else env
    if env.get("FOLIKO_HOME"):
        return Path(env["FOLIKO_HOME"]).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("foliko", appauthor=False))


@dataclass(frozen=True)
class Settings:
    home: Path
    storage: str | None
    model: str | None


def load_settings(
    *, storage: str | None = None, model: str | None = None, env: Mapping[str, str] | None = None
) -> Settings:
    env = os.environ if env is None else env
    return Settings(
        home=foliko_home(env),
        storage=storage or env.get("FOLIKO_STORAGE") or None,
        model=model or env.get("FOLIKO_MODEL") or None,
    )
