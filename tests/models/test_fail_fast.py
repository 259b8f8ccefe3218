"""Fail fast where retrying cannot help: a refused connection to this machine or a
host name that does not resolve is tried once more, then fails in one line;
other network errors keep their bounded backoff. Both clients (httpx2, and
http1 for plain-HTTP POSTs) are covered."""

from __future__ import annotations

import asyncio
import errno
import socket
import time

import httpx2
import pytest

from foliko_cli.errors import ModelError
from foliko_cli.models import http1
from foliko_cli.models.http import MAX_ATTEMPTS, HttpModelClient

from .fake_servers import OPENAI_KEY, free_port


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr("foliko_cli.models.http.BASE_DELAY", 0.001)
    monkeypatch.setattr("foliko_cli.models.http.HOPELESS_RETRY_DELAY", 0.001)


def refused() -> OSError:
    return ConnectionRefusedError(111, "Connect call failed")


def unknown_name() -> OSError:
    return socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def flaky_name() -> OSError:
    return socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")


def attempts_through_httpx2(base_url: str, cause: OSError) -> tuple[int, str]:
    """How often a POST was tried when every connection fails with ``cause``."""
    tried = []

    def fail(request):
        tried.append(request)
        try:
            raise cause
        except OSError as exc:
            raise httpx2.ConnectError("All connection attempts failed") from exc

    async def post() -> str:
        client = HttpModelClient(
            "openai", base_url, {}, key_hint=None, secret=None, transport=httpx2.MockTransport(fail)
        )
        with pytest.raises(ModelError) as failure:
            await client.post_json("/chat/completions", {}, time.monotonic() + 30)
        await client.aclose()
        return str(failure.value)

    message = asyncio.run(post())
    return len(tried), message


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]", "127.0.0.2"])
def test_a_refused_loopback_connection_is_tried_once_more(host):
    count, message = attempts_through_httpx2(f"http://{host}:8080/v1", refused())
    assert count == 2
    assert "the connection was refused, nothing listens there" in message
    assert "start the server or fix the base URL" in message


def test_a_host_name_that_does_not_resolve_is_tried_once_more():
    count, message = attempts_through_httpx2("https://api.example.invalid/v1", unknown_name())
    assert count == 2
    assert "its host name does not resolve" in message and "fix the base URL" in message


@pytest.mark.parametrize(
    "cause", [refused, flaky_name], ids=["refused elsewhere", "name service down"]
)
def test_other_network_errors_keep_their_backoff(cause):
    count, message = attempts_through_httpx2("http://gpu-box.example:8000/v1", cause())
    assert count == MAX_ATTEMPTS
    assert "is the server running and the base URL right?" in message


def test_the_http1_client_fails_fast_on_a_refused_loopback_port(monkeypatch):
    connects = []
    real = http1.Pool._connect

    async def counted(self, endpoint, timeout):
        connects.append(endpoint.port)
        return await real(self, endpoint, timeout)

    monkeypatch.setattr(http1.Pool, "_connect", counted)
    port = free_port()

    async def post() -> str:
        client = HttpModelClient(
            "openai", f"http://127.0.0.1:{port}/v1", {}, key_hint=None, secret=None
        )
        assert client._endpoint("/chat/completions") is not None, "plain HTTP goes through http1"
        with pytest.raises(ModelError) as failure:
            await client.post_json("/chat/completions", {}, time.monotonic() + 30)
        return str(failure.value)

    message = asyncio.run(post())
    assert connects == [port, port]
    assert "refused, nothing listens there" in message


def test_the_cli_says_nothing_listens_in_one_line(run_foliko):
    base_url = f"http://127.0.0.1:{free_port()}/v1"
    env = {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": OPENAI_KEY}

    result = run_foliko("chat", "-s", "s", "-m", "openai:m", "hi", env=env)

    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        f"foliko: error: cannot reach openai at {base_url}: the connection was refused, "
        "nothing listens there; start the server or fix the base URL"
    ]


def test_the_cli_says_the_host_name_does_not_resolve(run_foliko):
    env = {"OPENAI_BASE_URL": "http://no-such-host.invalid/v1", "OPENAI_API_KEY": OPENAI_KEY}

    result = run_foliko("chat", "-s", "s", "-m", "openai:m", "hi", env=env)

    assert result.returncode == 1
    (line,) = result.stderr.decode().splitlines()
    assert line.startswith("foliko: error: cannot reach openai at http://no-such-host.invalid/v1")
    assert "its host name does not resolve" in line


def test_every_address_of_a_loopback_name_refusing_is_refused_too():
    refused = f"[Errno {errno.ECONNREFUSED}] Connect call failed"
    both = OSError(f"Multiple exceptions: {refused} ('::1', 9, 0, 0), {refused} ('127.0.0.1', 9)")
    count, message = attempts_through_httpx2("http://localhost:9/v1", both)
    assert count == 2 and "nothing listens there" in message


def test_addresses_failing_in_different_ways_keep_the_backoff():
    mixed = OSError(
        f"Multiple exceptions: [Errno {errno.ECONNREFUSED}] Connect call failed ('::1', 9), "
        f"[Errno {errno.ENETUNREACH}] Network is unreachable"
    )
    count, _message = attempts_through_httpx2("http://localhost:9/v1", mixed)
    assert count == MAX_ATTEMPTS
