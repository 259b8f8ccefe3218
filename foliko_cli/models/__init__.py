"""Model providers, chosen by a ``provider:model`` name or a configured alias.

``echo`` (offline), ``openai:MODEL`` (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``:
any OpenAI-compatible server), ``ollama:MODEL`` (``OLLAMA_HOST``, no key) and
``anthropic:MODEL`` (``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``). The
config's ``[models.NAME]`` tables define aliases with their own base URL, key
variable and context window.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any, NamedTuple

from foliko_cli.errors import UnknownModelError, UsageError
from foliko_cli.models.base import ModelProvider

DEFAULT_MODEL = "echo"
FALLBACK_CONTEXT_WINDOW = 8192
PROVIDERS = ("echo", "openai", "ollama", "anthropic")

# Longest matching prefix wins.
KNOWN_CONTEXT_WINDOWS = {
    "gpt-4o": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "gpt-5": 400_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4": 200_000,
    "claude": 200_000,
    "llama3.1": 131_072,
    "llama3.2": 131_072,
    "llama3.3": 131_072,
    "llama3": 8_192,
    "qwen2.5": 32_768,
    "mistral": 32_768,
    "deepseek": 65_536,
}

_PROVIDER_DEFAULTS = {
    "openai": ("OPENAI_BASE_URL", "https://api.openai.com/v1", "OPENAI_API_KEY"),
    "anthropic": ("ANTHROPIC_BASE_URL", "https://api.anthropic.com", "ANTHROPIC_API_KEY"),
}


class ModelSpec(NamedTuple):
    name: str
    provider: str
    model: str
    base_url: str | None
    key_env: str | None
    api_key: str | None
    context_window: int
    max_tokens: int | None = None
    key_required: bool = False

    @property
    def key_hint(self) -> str | None:
        return self.key_env or ("the api_key in the config file" if self.api_key else None)


def known_context_window(model: str) -> int:
    matches = [prefix for prefix in KNOWN_CONTEXT_WINDOWS if model.startswith(prefix)]
    return KNOWN_CONTEXT_WINDOWS[max(matches, key=len)] if matches else FALLBACK_CONTEXT_WINDOW


def _ollama_base(env: Mapping[str, str]) -> str:
    host = env.get("OLLAMA_HOST") or "http://127.0.0.1:11434"
    if "://" not in host:
        host = "http://" + host
    return host.rstrip("/") + "/v1"


def model_spec(
    name: str,
    configured: Mapping[str, Mapping[str, Any]] | None = None,
    env: Mapping[str, str] | None = None,
) -> ModelSpec:
    env = os.environ if env is None else env
    configured = configured or {}
    entry: Mapping[str, Any] = configured.get(name, {})
    target = str(entry.get("model", name)) if entry else name
    provider, sep, model = target.partition(":")
    if provider == "echo":
        window = int(entry.get("context_window") or FALLBACK_CONTEXT_WINDOW)
        return ModelSpec(name, "echo", "echo", None, None, None, window)
    if provider not in PROVIDERS or not sep or not model:
        aliases = f"; configured: {', '.join(configured)}" if configured else ""
        raise UnknownModelError(
            f"unknown model {name!r}: use echo, openai:MODEL, ollama:MODEL or "
            f"anthropic:MODEL{aliases}; set it with -m or FOLIKO_MODEL"
        )
    if provider == "ollama":
        base, key_env = _ollama_base(env), None
    else:
        base_var, default_base, key_env = _PROVIDER_DEFAULTS[provider]
        base = env.get(base_var) or default_base
    base = str(entry.get("base_url") or base)
    key_env = entry.get("api_key_env") or key_env
    return ModelSpec(
        name=name,
        provider=provider,
        model=model,
        base_url=base,
        key_env=key_env,
        api_key=entry.get("api_key"),
        context_window=int(entry.get("context_window") or known_context_window(model)),
        max_tokens=entry.get("max_tokens"),
        key_required=bool(entry.get("api_key_env")),
    )


def api_key(spec: ModelSpec, env: Mapping[str, str]) -> str | None:
    return (env.get(spec.key_env) if spec.key_env else None) or spec.api_key


def usable(spec: ModelSpec, env: Mapping[str, str] | None = None) -> str | None:
    """Why the model cannot be used now, or None when it can.

    A key is needed for the provider's own service, and whenever the config
    names the variable that holds it (``api_key_env``); other servers
    (local ones, Ollama) may go without.
    """
    env = os.environ if env is None else env
    if spec.provider == "echo" or api_key(spec, env):
        return None
    default_base = _PROVIDER_DEFAULTS.get(spec.provider, (None, None))[1]
    if spec.base_url != default_base and not spec.key_required:
        return None
    return f"{spec.key_env or 'an API key'} is not set"


def build_model(spec: ModelSpec, env: Mapping[str, str] | None = None) -> ModelProvider:
    env = os.environ if env is None else env
    if spec.provider == "echo":
        from foliko_cli.models.echo import EchoModel

        return EchoModel(spec.context_window)
    problem = usable(spec, env)
    if problem:
        raise UsageError(
            f"model {spec.name!r} needs an API key: {problem}; export {spec.key_env} "
            "(or set api_key_env for this model in the config)"
        )
    key = api_key(spec, env)
    from foliko_cli.models.http import HttpModelClient

    if spec.provider == "anthropic":
        from foliko_cli.models.anthropic import AnthropicModel, anthropic_headers

        client = HttpModelClient(
            "anthropic", spec.base_url, anthropic_headers(key), key_hint=spec.key_hint, secret=key
        )
        return AnthropicModel(
            spec.model,
            client=client,
            context_window=spec.context_window,
            max_tokens=spec.max_tokens,
        )
    from foliko_cli.models.openai import OpenAIChatModel

    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    client = HttpModelClient(
        spec.provider, spec.base_url, headers, key_hint=spec.key_hint, secret=key
    )
    return OpenAIChatModel(
        spec.model,
        client=client,
        provider=spec.provider,
        context_window=spec.context_window,
        max_tokens=spec.max_tokens,
    )


def resolve_model(
    name: str | ModelProvider | None,
    configured: Mapping[str, Mapping[str, Any]] | None = None,
    env: Mapping[str, str] | None = None,
) -> ModelProvider:
    """Turn a model name (or a provider instance) into a provider."""
    if isinstance(name, ModelProvider):
        return name
    return build_model(model_spec((name or DEFAULT_MODEL).strip(), configured, env), env)


_announced = False


def announce_default_model() -> None:
    """Say once per process that the offline echo model is answering."""
    global _announced
    if _announced:
        return
    _announced = True
    print(
        "foliko: no model configured; using the offline 'echo' model. "
        "Choose one with -m/--model or FOLIKO_MODEL (e.g. FOLIKO_MODEL=echo silences this).",
        file=sys.stderr,
    )
