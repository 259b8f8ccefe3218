"""What each configured OpenAI-compatible server serves, asked of all of them at once.

``served_models`` probes every distinct server behind the given specs (``GET
/v1/models``; Ollama ``GET /api/tags``) with a short timeout, in parallel. A
server that does not answer is reported with the reason, never as usable; one
that answers but lists nothing (an error status) is reachable with no models.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

PROBE_TIMEOUT = 2.0
PROBED_PROVIDERS = ("openai", "ollama")


class ServerReport(NamedTuple):
    """``models`` are (id, context window or None); ``problem`` is set when unreachable."""

    provider: str
    base_url: str
    models: list[tuple[str, int | None]]
    problem: str | None = None


def _window(entry: Mapping[str, Any]) -> int | None:
    meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
    for value in (meta.get("n_ctx"), entry.get("max_model_len"), entry.get("context_length")):
        if isinstance(value, int) and value > 0:
            return value
    return None


async def _probe(spec: Any, key: str | None, timeout: float, transport: Any) -> ServerReport:
    from foliko_cli.models.http import HttpModelClient

    headers = {"authorization": f"Bearer {key}"} if key else {}
    client = HttpModelClient.for_spec(spec, headers, key, transport)
    try:
        async with asyncio.timeout(timeout):
            if spec.provider == "ollama":
                root = client.base_url.removesuffix("/v1")
                data = await client.get_json(root + "/api/tags", timeout)
                models = [(m["name"], None) for m in data.get("models") or [] if m.get("name")]
            else:
                data = await client.get_json(client.base_url + "/models", timeout)
                models = [(m["id"], _window(m)) for m in data.get("data") or [] if m.get("id")]
    except client.status_errors():
        return ServerReport(spec.provider, client.base_url, [])  # it answers, lists nothing
    except TimeoutError:
        return ServerReport(spec.provider, client.base_url, [], f"no answer in {timeout:g}s")
    except Exception as exc:
        reason = client.redact(str(exc)) or type(exc).__name__
        return ServerReport(spec.provider, client.base_url, [], f"unreachable ({reason})")
    finally:
        await client.aclose()
    return ServerReport(spec.provider, client.base_url, sorted(models))


async def served_models(
    specs: Iterable[Any],
    env: Mapping[str, str],
    *,
    timeout: float = PROBE_TIMEOUT,
    transport: Any = None,
) -> dict[tuple[str, str], ServerReport]:
    """One report per (provider, base URL) among the usable OpenAI-compatible specs."""
    from foliko_cli.models import api_key, usable

    servers: dict[tuple[str, str], Any] = {}
    for spec in specs:
        if spec.provider in PROBED_PROVIDERS and spec.base_url and usable(spec, env) is None:
            servers.setdefault((spec.provider, spec.base_url.rstrip("/")), spec)
    reports = await asyncio.gather(
        *(_probe(spec, api_key(spec, env), timeout, transport) for spec in servers.values())
    )
    return dict(zip(servers, reports, strict=True))
