"""Model providers, chosen by a ``provider:model`` name."""

from __future__ import annotations

from foliko_cli.errors import UnknownModelError
from foliko_cli.models.base import ModelProvider

DEFAULT_MODEL = "echo"


def resolve_model(name: str | ModelProvider | None) -> ModelProvider:
    """Turn a model name (or a provider instance) into a provider."""
    if isinstance(name, ModelProvider):
        return name
    spec = (name or DEFAULT_MODEL).strip()
    provider, _, _model = spec.partition(":")
    if provider == "echo":
        from foliko_cli.models.echo import EchoModel

        return EchoModel()
    raise UnknownModelError(
        f"unknown model {spec!r}: use 'echo' (offline); set it with -m or FOLIKO_MODEL"
    )


_announced = False


def announce_default_model() -> None:
    """Say once per process that the offline echo model is answering."""
    global _announced
    if _announced:
        return
    _announced = True
    import sys

    print(
        "foliko: no model configured; using the offline 'echo' model. "
        "Choose one with -m/--model or FOLIKO_MODEL (e.g. FOLIKO_MODEL=echo silences this).",
        file=sys.stderr,
    )
