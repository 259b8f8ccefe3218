"""Model providers, chosen by a ``provider:model`` name or a configured alias.

``echo`` (offline), ``openai:MODEL`` (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``:
any OpenAI-compatible server), ``ollama:MODEL`` (``OLLAMA_HOST``, no key) and
``anthropic:MODEL`` (``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``). The
config's ``[models.NAME]`` tables define aliases with their own base URL, key
variable, context window, ``max_tokens``, ``options`` and ``price``. A key is
the environment's, else the config's ``api_key``, else the key store's
(``common/keys.py``: ``openai`` stands in for ``OPENAI_API_KEY``).

Providers are found in the ``foliko.models`` entry-point group: a plugin
registers ``NAME = "package.module:build"``, a function
``build(spec, api_key) -> ModelProvider``. The built-in ones are looked up
in ``BUILTIN_PROVIDERS`` first (the same references as their entry points),
which spares every start-up the scan of installed packages.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple, cast

from foliko_cli.errors import Hint, UnknownModelError, UsageError
from foliko_cli.models.base import TOKENS_LIMIT, ModelProvider, token_count

DEFAULT_MODEL = "echo"
FALLBACK_CONTEXT_WINDOW = 8192
ENTRY_POINT_GROUP = "foliko.models"
BUILTIN_PROVIDERS = {
    "echo": "foliko_cli.models.echo:build",
    "openai": "foliko_cli.models.openai:build",
    "ollama": "foliko_cli.models.openai:build",
    "anthropic": "foliko_cli.models.anthropic:build",
}
PROVIDERS = tuple(BUILTIN_PROVIDERS)

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

EXAMPLE = 'model = "openai:MODEL" (or echo, ollama:MODEL, anthropic:MODEL)'
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
    window_configured: bool = False
    options: Mapping[str, Any] = MappingProxyType({})
    price: Mapping[str, float] = MappingProxyType({})

    def settings(self) -> dict[str, Any]:
        """What every provider's constructor takes from the spec besides the model."""
        return {
            "context_window": self.context_window,
            "max_tokens": self.max_tokens,
            "window_configured": self.window_configured,
            "options": self.options,
            "price": self.price,
        }

    @property
    def key_hint(self) -> str | None:
        return self.key_env or ("the api_key in the config file" if self.api_key else None)

    @property
    def key_name(self) -> str | None:
        """The stored key that stands in for ``key_env`` (``openai`` for OPENAI_API_KEY)."""
        from foliko_cli.common.keys import key_name

        return key_name(self.key_env)


def known_context_window(model: str) -> int:
    matches = [prefix for prefix in KNOWN_CONTEXT_WINDOWS if model.startswith(prefix)]
    return KNOWN_CONTEXT_WINDOWS[max(matches, key=len)] if matches else FALLBACK_CONTEXT_WINDOW


def _ollama_base(env: Mapping[str, str]) -> str:
    host = env.get("OLLAMA_HOST") or "http://127.0.0.1:11434"
    if "://" not in host:
        host = "http://" + host
    return host.rstrip("/") + "/v1"


def plugin_providers() -> dict[str, Any]:
    """Installed provider plugins (group ``foliko.models``), by name, not loaded yet."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def provider_factory(provider: str) -> Callable[..., ModelProvider] | None:
    """The ``build`` function of a provider, or None when none has that name."""
    reference = BUILTIN_PROVIDERS.get(provider)
    if reference is not None:
        import importlib

        module, _, attribute = reference.partition(":")
        return cast(
            "Callable[..., ModelProvider]", getattr(importlib.import_module(module), attribute)
        )
    entry = plugin_providers().get(provider)
    if entry is None:
        return None
    try:
        return cast("Callable[..., ModelProvider]", entry.load())
    except Exception as exc:
        raise UsageError(
            f"model provider plugin {provider!r} failed to load ({exc}); "
            "reinstall or remove the plugin"
        ) from None


def _price(entry: Mapping[str, Any], name: str) -> dict[str, float]:
    price = entry.get("price") or {}
    if not isinstance(price, Mapping) or not all(
        isinstance(price.get(k, 0), int | float) for k in ("input", "output")
    ):
        raise UsageError(
            f"model {name!r}: price must be a table like {{input = 0.15, output = 0.60}} "
            "(dollars per million tokens); fix the config"
        )
    return {k: float(price[k]) for k in ("input", "output") if k in price}


def _options(entry: Mapping[str, Any], name: str) -> dict[str, Any]:
    options = entry.get("options") or {}
    if not isinstance(options, Mapping):
        raise UsageError(
            f"model {name!r}: options must be a table like {{temperature = 0.2}}; fix the config"
        )
    return dict(options)


def model_spec(
    name: str,
    configured: Mapping[str, Mapping[str, Any]] | None = None,
    env: Mapping[str, str] | None = None,
) -> ModelSpec:
    """The spec of ``name``: a ``[models.NAME]`` alias of ``configured`` (a problem
    names the alias and the key), else ``provider:model``."""
    env = os.environ if env is None else env
    configured = configured or {}
    entry: Mapping[str, Any] = configured.get(name, {})
    alias = name in configured
    target = name
    if alias:
        from foliko_cli.common.settings import entry_problem

        problem = entry_problem("models", name, entry)
        if problem:
            raise UsageError(problem)
        target = str(entry.get("model", name))
    provider, sep, model = target.partition(":")
    window = entry.get("context_window")
    for key in ("context_window", "max_tokens"):
        if entry.get(key) is not None and not token_count(entry[key]):
            raise UsageError(
                f"model {name!r}: {key} must be a whole number from 1 to {TOKENS_LIMIT:,}, "
                f"not {entry[key]!r}; fix the config"
            )
    extras: dict[str, Any] = {
        "window_configured": bool(window),
        "options": _options(entry, name),
        "price": _price(entry, name),
        "max_tokens": entry.get("max_tokens"),
    }
    if provider == "echo":
        return ModelSpec(
            name, "echo", "echo", None, None, None, int(window or FALLBACK_CONTEXT_WINDOW), **extras
        )
    known = provider in BUILTIN_PROVIDERS or (sep and model and provider in plugin_providers())
    if (not known or not sep or not model) and alias:
        if "model" not in entry:
            raise UnknownModelError(
                f"model {name!r} ([models.{name}]) has no model key", fix=f"add one: {EXAMPLE}"
            )
        raise UnknownModelError(
            f"model {name!r} ([models.{name}]): its model {target!r} is not provider:model "
            "with a provider foliko has",
            fix=f"write e.g. {EXAMPLE}",
        )
    if not known or not sep or not model:
        aliases = f"; configured: {', '.join(configured)}" if configured else ""
        raise UnknownModelError(
            f"unknown model {name!r}: use echo, openai:MODEL, ollama:MODEL or "
            f"anthropic:MODEL{aliases}",
            fix="choose one with the model setting",
            hint=Hint.MODEL,
        )
    if provider == "ollama":
        base, key_env = _ollama_base(env), None
    elif provider in _PROVIDER_DEFAULTS:
        base_var, default_base, key_env = _PROVIDER_DEFAULTS[provider]
        base = env.get(base_var) or default_base
    else:
        base, key_env = None, None
    base = entry.get("base_url") or base
    key_env = entry.get("api_key_env") or key_env
    return ModelSpec(
        name=name,
        provider=provider,
        model=model,
        base_url=str(base) if base else None,
        key_env=key_env,
        api_key=entry.get("api_key"),
        context_window=int(window or known_context_window(model)),
        key_required=bool(entry.get("api_key_env")),
        **extras,
    )


def api_key(
    spec: ModelSpec, env: Mapping[str, str], keys: Mapping[str, str] | None = None
) -> str | None:
    """The environment's key, else the config's ``api_key``, else the one ``keys``
    (the key store) holds under the variable's name."""
    found = (env.get(spec.key_env) if spec.key_env else None) or spec.api_key
    if found or not keys:
        return found
    name = spec.key_name
    return keys.get(name) if name else None


def key_needed(spec: ModelSpec) -> bool:
    """A key is needed for the provider's own service, and whenever the config
    names the variable that holds it (``api_key_env``); other servers (local
    ones, Ollama) may go without."""
    if spec.provider == "echo":
        return False
    if spec.key_required:
        return True
    default_base = _PROVIDER_DEFAULTS.get(spec.provider, (None, None, None))[1]
    return default_base is not None and spec.base_url == default_base


def usable(
    spec: ModelSpec, env: Mapping[str, str] | None = None, keys: Mapping[str, str] | None = None
) -> str | None:
    """Why the model cannot be used now (a key it needs is missing), or None."""
    env = os.environ if env is None else env
    if not key_needed(spec) or api_key(spec, env, keys):
        return None
    name = spec.key_name if keys is not None else None
    stored = f" and no key {name!r} is stored" if name else ""
    return f"{spec.key_env or 'an API key'} is not set{stored}"


def build_model(
    spec: ModelSpec,
    env: Mapping[str, str] | None = None,
    *,
    keys: Mapping[str, str] | None = None,
    transport: Any = None,
) -> ModelProvider:
    """The provider for ``spec``, its key from ``env``, the config or ``keys`` (the
    key store); ``transport`` replaces the network (tests)."""
    env = os.environ if env is None else env
    if spec.provider != "echo":
        problem = usable(spec, env, keys)
        if problem:
            stored = keys is not None and spec.key_name is not None
            raise UsageError(
                f"model {spec.name!r} needs an API key: {problem}",
                fix=f"export {spec.key_env} (or set api_key_env for this model in the config)"
                + (f", or store the key as {spec.key_name!r}" if stored else ""),
                hint=Hint.KEYS if stored else None,
            )
    factory = provider_factory(spec.provider)
    if factory is None:
        raise UnknownModelError(f"no model provider {spec.provider!r} is installed")
    key = None if spec.provider == "echo" else api_key(spec, env, keys)
    if transport is None:
        return factory(spec, key)
    return factory(spec, key, transport=transport)


def resolve_model(
    name: str | ModelProvider | None,
    configured: Mapping[str, Mapping[str, Any]] | None = None,
    env: Mapping[str, str] | None = None,
    keys: Mapping[str, str] | None = None,
) -> ModelProvider:
    """Turn a model name (or a provider instance) into a provider; ``keys`` is the
    key store, read only when the environment and the config have no key."""
    if isinstance(name, ModelProvider):
        return name
    spec = model_spec((name or DEFAULT_MODEL).strip(), configured, env)
    return build_model(spec, env, keys=keys)
