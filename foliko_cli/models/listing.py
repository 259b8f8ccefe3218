"""``models list``: each model foliko can use, once, with the server it is reached
through, its window and its key.

``served_models`` asks every distinct OpenAI-compatible server (and Ollama)
behind the given specs what it serves (``GET /v1/models``; Ollama ``GET
/api/tags``) and each model's window the way a turn discovers it (llama.cpp's
``/props``, vLLM's ``max_model_len``, Ollama's ``/api/show``: see
``discovery``), all in parallel within a short timeout. A server that does not
answer is reported with the reason, never as usable; one that answers but lists
nothing (an error status) is reachable with no models.

``model_rows`` makes the listing: an alias stands for the served model it names
(or, on an OpenAI-compatible server that serves one model, that one, as
llama.cpp answers whatever name it is asked for), which is then not listed
again; a served model no name reaches says how to reach it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from foliko_cli.common.redaction import redact_url

PROBE_TIMEOUT = 2.0
PROBED_PROVIDERS = ("openai", "ollama")


class ServerReport(NamedTuple):
    """``models`` are (id, context window or None); ``problem`` is set when
    unreachable; ``spec`` is the model spec the server was asked through."""

    provider: str
    base_url: str
    models: list[tuple[str, int | None]]
    problem: str | None = None
    spec: Any = None


def server_of(spec: Any) -> tuple[str, str]:
    return spec.provider, (spec.base_url or "").rstrip("/")


async def _windows(
    client: Any, provider: str, entries: list[Any], budget: float
) -> list[int | None]:
    """Each listed model's window, as discovery finds it; None for those that take
    longer than ``budget`` seconds."""
    from foliko_cli.models.discovery import entry_window, ollama_window

    if provider == "ollama":
        asks = [ollama_window(client, name) for name in entries]
    else:
        asks = [entry_window(client, entry) for entry in entries]
    try:
        async with asyncio.timeout(max(budget, 0.01)):
            return list(await asyncio.gather(*asks))
    except TimeoutError:
        return [None] * len(entries)


async def _probe(
    spec: Any, key: str | None, timeout: float, transport: Any, cache_dir: Path | None
) -> ServerReport:
    from foliko_cli.models.discovery import write_cached
    from foliko_cli.models.http import HttpModelClient

    headers = {"authorization": f"Bearer {key}"} if key else {}
    client = HttpModelClient.for_spec(spec, headers, key, transport)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    report = ServerReport(spec.provider, client.base_url, [], spec=spec)
    try:
        async with asyncio.timeout(timeout):
            if spec.provider == "ollama":
                root = client.base_url.removesuffix("/v1")
                data = await client.get_json(root + "/api/tags", timeout)
                entries = [m["name"] for m in data.get("models") or [] if m.get("name")]
                names = entries
            else:
                data = await client.get_json(client.base_url + "/models", timeout)
                entries = [m for m in data.get("data") or [] if m.get("id")]
                names = [m["id"] for m in entries]
        windows = await _windows(client, spec.provider, entries, deadline - loop.time())
    except client.status_errors():
        return report  # it answers, lists nothing
    except TimeoutError:
        return report._replace(problem=f"no answer in {timeout:g}s")
    except Exception as exc:
        reason = client.redact(str(exc)) or type(exc).__name__
        return report._replace(problem=f"unreachable ({reason})")
    finally:
        await client.aclose()
    for name, window in zip(names, windows, strict=True):
        if window:
            write_cached(cache_dir, f"{client.base_url} {name}", window)
    return report._replace(models=sorted(zip(names, windows, strict=True)))


async def served_models(
    specs: Iterable[Any],
    env: Mapping[str, str],
    *,
    timeout: float = PROBE_TIMEOUT,
    transport: Any = None,
    cache_dir: Path | None = None,
    keys: Mapping[str, str] | None = None,
) -> dict[tuple[str, str], ServerReport]:
    """One report per (provider, base URL) among the usable OpenAI-compatible specs
    (their keys from ``env``, the config or ``keys``, the key store); the windows
    found are cached in ``cache_dir`` as a turn's discovery caches them."""
    from foliko_cli.models import api_key, usable

    servers: dict[tuple[str, str], Any] = {}
    for spec in specs:
        if spec.provider in PROBED_PROVIDERS and spec.base_url and usable(spec, env, keys) is None:
            servers.setdefault(server_of(spec), spec)
    reports = await asyncio.gather(
        *(
            _probe(spec, api_key(spec, env, keys), timeout, transport, cache_dir)
            for spec in servers.values()
        )
    )
    return dict(zip(servers, reports, strict=True))


def _claims(spec: Any, report: ServerReport | None) -> tuple[str, int | None] | None:
    """The served model an alias stands for, if its server lists it."""
    if report is None:
        return None
    for served in report.models:
        if served[0] == spec.model or (
            spec.provider == "ollama" and served[0] == f"{spec.model}:latest"
        ):
            return served
    if spec.provider == "openai" and len(report.models) == 1:
        return report.models[0]
    return None


def _window(
    spec: Any, served: int | None, setting: int | None, cache_dir: Path | None
) -> tuple[int, str]:
    """The window a turn would use, and where it comes from (the order of
    ``chat.AgentChatHandler``: the alias, the setting, the server, the known table)."""
    from foliko_cli.models import KNOWN_CONTEXT_WINDOWS
    from foliko_cli.models.discovery import read_cached

    if spec.window_configured:
        return spec.context_window, "config"
    if setting:
        return setting, "setting"
    if spec.provider in PROBED_PROVIDERS and spec.base_url:
        served = served or read_cached(cache_dir, f"{server_of(spec)[1]} {spec.model}")
        if served:
            return served, "server"
    known = any(spec.model.startswith(prefix) for prefix in KNOWN_CONTEXT_WINDOWS)
    return spec.context_window, "known" if known else "default"


def _row(
    name: str,
    spec: Any,
    *,
    env: Mapping[str, str],
    window: tuple[int | None, str | None],
    problem: str | None,
    default: str,
    served: bool,
    keys: Mapping[str, str] | None,
) -> dict[str, Any]:
    from foliko_cli.models import api_key, key_needed

    needed, present = key_needed(spec), bool(api_key(spec, env))
    held = spec.key_hint or "a key"
    key = f"{held} set" if present else f"{held} missing"
    if not present and api_key(spec, env, keys):
        present, key = True, f"stored as {spec.key_name!r}"
    return {
        "name": name,
        "provider": spec.provider,
        "model": spec.model,
        "base_url": redact_url(spec.base_url) if spec.base_url else None,
        "key_env": spec.key_env,
        "key_needed": needed,
        "key_present": present,
        "key": key if needed else "not needed",
        "context_window": window[0],
        "window_source": window[1],
        "usable": problem is None,
        "problem": problem,
        "default": name == default,
        "served": served,
    }


def model_rows(
    specs: Mapping[str, Any],
    aliases: Iterable[str],
    reports: Mapping[tuple[str, str], ServerReport],
    env: Mapping[str, str],
    *,
    default: str,
    window_setting: int | None = None,
    cache_dir: Path | None = None,
    keys: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The listing: ``specs`` by name (the providers' ``NAME:MODEL`` templates and
    the ``aliases``), then the served models no alias stands for."""
    from foliko_cli.models import model_spec, usable

    row = functools.partial(_row, env=env, default=default, keys=keys)
    aliases = set(aliases)
    claimed: set[tuple[str, str, str]] = set()
    rows = []
    for name, spec in specs.items():
        report = reports.get(server_of(spec))
        problem = usable(spec, env, keys)
        if problem is None and report is not None and report.problem:
            problem = f"server {report.problem}"
        served = _claims(spec, report) if name in aliases else None
        if served is not None:
            claimed.add((*server_of(spec), served[0]))
        window: tuple[int | None, str | None] = (None, None)  # a NAME:MODEL template has none
        if name in aliases or spec.provider == "echo":
            window = _window(spec, served and served[1], window_setting, cache_dir)
        rows.append(row(name, spec, window=window, problem=problem, served=served is not None))
    for (provider, base), report in reports.items():
        for model_id, served_window in report.models:
            if (provider, base, model_id) in claimed:
                continue
            name = f"{provider}:{model_id}"
            spec = model_spec(name, {}, env)
            problem = None
            if server_of(spec)[1] != base:
                problem = (
                    f"{name} goes to {redact_url(spec.base_url or '')}; reach this server's "
                    f'model through an alias: model = "{name}", base_url = "{redact_url(base)}"'
                )
                via = report.spec
                spec = spec._replace(
                    base_url=via.base_url,
                    key_env=via.key_env,
                    api_key=via.api_key,
                    key_required=via.key_required,
                )
            window = _window(spec, served_window, window_setting, cache_dir)
            rows.append(row(name, spec, window=window, problem=problem, served=True))
    return rows
