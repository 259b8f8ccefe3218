"""``/mcp`` loads the MCP SDK off the event loop: the first request to it does
not stop the server answering the others meanwhile."""

from __future__ import annotations

import asyncio
import threading

import pytest

pytest.importorskip("mcp")

from foliko_cli.serve import mcp as endpoint_module


def test_the_sdk_is_imported_in_a_worker_thread(monkeypatch):
    release = threading.Event()
    loaded_in: list[threading.Thread] = []
    real = endpoint_module.load_sdk

    def slow_load():
        loaded_in.append(threading.current_thread())
        assert release.wait(30), "the event loop never got to release the import"
        return real()

    monkeypatch.setattr(endpoint_module, "load_sdk", slow_load)

    async def scenario() -> None:
        endpoint = endpoint_module.MCPEndpoint(max_body=1 << 20)
        starting = asyncio.ensure_future(endpoint._started())
        while not loaded_in:  # the loop runs while the import is under way
            await asyncio.sleep(0.01)
        answered = await asyncio.wait_for(asyncio.sleep(0, result="another request"), 5)
        assert answered == "another request" and not starting.done()
        release.set()
        assert await asyncio.wait_for(starting, 30) is not None
        await endpoint.aclose()

    asyncio.run(scenario())
    assert loaded_in[0] is not threading.main_thread()
