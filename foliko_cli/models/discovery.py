"""What context window a server gives a model, asked once a day (and never fatal).

llama.cpp reports its window in ``GET /props`` (``default_generation_settings.n_ctx``,
the window of one slot) and in ``GET /v1/models`` (``meta.n_ctx``); vLLM gives
``max_model_len`` in ``/v1/models``; Ollama ``context_length`` in ``POST /api/show``
(``model_info``). Answers are cached per base URL and model in a small JSON file
under FOLIKO_HOME (mode 0600) for a day. Discovery gives up after
``DISCOVERY_TIMEOUT`` seconds and then returns None: a turn never fails for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any, cast

import orjson

CACHE_FILE = "context-windows.json"
CACHE_SECONDS = 24 * 3600
DISCOVERY_TIMEOUT = 3.0


def read_cached(cache_dir: Path | None, key: str, now: float | None = None) -> int | None:
    if cache_dir is None:
        return None
    try:
        entry = orjson.loads((Path(cache_dir) / CACHE_FILE).read_bytes()).get(key)
    except (OSError, orjson.JSONDecodeError, AttributeError):
        return None
    now = time.time() if now is None else now
    if not isinstance(entry, dict) or now - entry.get("at", 0) > CACHE_SECONDS:
        return None
    window = entry.get("window")
    return window if isinstance(window, int) and window > 0 else None


def write_cached(cache_dir: Path | None, key: str, window: int) -> None:
    """Add ``key`` to the cache file; a cache that cannot be written is skipped."""
    if cache_dir is None:
        return
    path = Path(cache_dir) / CACHE_FILE
    try:
        entries = orjson.loads(path.read_bytes())
        if not isinstance(entries, dict):
            entries = {}
    except (OSError, orjson.JSONDecodeError):
        entries = {}
    now = time.time()
    entries = {k: v for k, v in entries.items() if now - v.get("at", 0) <= CACHE_SECONDS}
    entries[key] = {"window": window, "at": now}
    from foliko_cli.common.files import replaced

    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        with replaced(path, text=False) as out:
            out.write(orjson.dumps(entries))


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def server_root(base_url: str) -> str:
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


async def _ask_openai_compatible(client: Any, model: str) -> int | None:
    listing = await client.get_json(client.base_url + "/models", DISCOVERY_TIMEOUT)
    entries = [e for e in (listing or {}).get("data") or [] if isinstance(e, dict)]
    entry = next((e for e in entries if e.get("id") == model), None)
    if entry is None and len(entries) == 1:
        entry = entries[0]  # llama.cpp serves one model, whatever name it is asked for
    if entry is None:
        return None
    return await entry_window(client, entry)


async def entry_window(client: Any, entry: dict[str, Any]) -> int | None:
    """The window of a model listed by ``GET /v1/models``: llama.cpp's (``/props``,
    else ``meta.n_ctx``), vLLM's ``max_model_len`` or a ``context_length``."""
    if isinstance(entry.get("meta"), dict):
        with contextlib.suppress(Exception):
            props = await client.get_json(
                server_root(client.base_url) + "/props", DISCOVERY_TIMEOUT
            )
            window = _positive((props.get("default_generation_settings") or {}).get("n_ctx"))
            if window:
                return window
        return _positive(entry["meta"].get("n_ctx"))
    return _positive(entry.get("max_model_len")) or _positive(entry.get("context_length"))


async def ollama_window(client: Any, model: str) -> int | None:
    """What Ollama's ``/api/show`` says of ``model``'s window, or None; never raises."""
    try:
        return await _ask_ollama(client, model)
    except Exception:
        return None


async def _ask_ollama(client: Any, model: str) -> int | None:
    shown = await client.get_json(
        server_root(client.base_url) + "/api/show", DISCOVERY_TIMEOUT, body={"model": model}
    )
    info = (shown or {}).get("model_info") or {}
    for key, value in info.items():
        if key.endswith(".context_length") and _positive(value):
            return cast(int, value)
    return None


def remember_window(client: Any, model: str, window: int, cache_dir: Path | None) -> None:
    """Cache a window learned another way (a server's refusal names it)."""
    write_cached(cache_dir, f"{client.base_url} {model}", window)


async def discover_window(client: Any, model: str, kind: str, cache_dir: Path | None) -> int | None:
    """The window the server behind ``client`` reports for ``model`` (``kind``:
    ``openai`` for OpenAI-compatible servers, ``ollama``), or None."""
    key = f"{client.base_url} {model}"
    cached = read_cached(cache_dir, key)
    if cached:
        return cached
    ask = _ask_ollama if kind == "ollama" else _ask_openai_compatible
    try:
        async with asyncio.timeout(DISCOVERY_TIMEOUT):
            window = await ask(client, model)
    except Exception:
        return None
    if window:
        write_cached(cache_dir, key, window)
    return window
