"""Connection limits (header timeout, header size, keep-alive, connection cap)
and the lifetime of ``--workers N`` workers, on real ``foliko serve`` processes."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from foliko_cli.serve.connections import CoalescedWrites

from .servers import wait_until

BOUND_S = 8.0  # far under the defaults (10 s header timeout), far over the tests' 0.5 s
KEEP_ALIVE_BOUND_S = 4.0  # under the default keep-alive (15 s), over the tests' 0.5 s
PROC = Path("/proc")
linux_only = pytest.mark.skipif(not PROC.joinpath("self/stat").exists(), reason="needs /proc")


def address(server) -> tuple[str, int]:
    parts = urlsplit(server.url)
    return parts.hostname, parts.port


def read_until_closed(sock: socket.socket, bound: float = BOUND_S) -> bytes:
    """Everything the server sends until it closes; fails if it stays open."""
    sock.settimeout(bound)
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def parse(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines)
    return int(status_line.split()[1]), headers, body


def assert_openai_error(status: int, headers: dict, body: bytes, expected: int, code: str):
    assert status == expected, body
    assert headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code and error["message"]


WEBSOCKET_UPGRADE = (
    b"GET /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    b"Sec-WebSocket-Version: 13\r\n\r\n"
)


def healthz(host: str, port: int) -> int:
    conn = http.client.HTTPConnection(host, port, timeout=BOUND_S)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.mark.parametrize("workers", ["1", "2"])  # the limits travel to the workers
def test_a_half_sent_header_is_closed_within_the_timeout_while_others_are_served(
    start_server, workers
):
    server = start_server("--header-timeout", "0.5", "--workers", workers)
    host, port = address(server)
    silent = socket.create_connection((host, port))
    slow = [socket.create_connection((host, port)) for _ in range(20)]
    for sock in slow:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: yes")
    wait_until(lambda: healthz(host, port) == 200, what="the server to answer")
    for sock in slow:
        assert_openai_error(*parse(read_until_closed(sock)), 408, "request_timeout")
        sock.close()
    assert read_until_closed(silent) == b""  # nothing sent: closed without an answer
    silent.close()
    assert healthz(host, port) == 200


def test_a_huge_header_gets_431_in_openais_shape_and_a_large_one_passes(start_server):
    server = start_server("--max-header-bytes", "65536")
    host, port = address(server)
    with socket.create_connection((host, port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 2**20)
        raw = read_until_closed(sock)
    assert_openai_error(*parse(raw), 431, "request_header_fields_too_large")
    conn = http.client.HTTPConnection(host, port, timeout=BOUND_S)
    conn.request("GET", "/healthz", headers={"X-Big": "a" * 32_000})
    assert conn.getresponse().status == 200
    conn.close()


def test_malformed_http_is_400_in_openais_shape(start_server):
    host, port = address(start_server())
    with socket.create_connection((host, port)) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        assert_openai_error(*parse(read_until_closed(sock)), 400, "invalid_http_request")


def test_an_idle_keep_alive_connection_is_closed_after_the_keep_alive_timeout(start_server):
    host, port = address(start_server("--keep-alive", "0.5"))
    with socket.create_connection((host, port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        status, headers, body = parse(read_until_closed(sock, KEEP_ALIVE_BOUND_S))
    assert status == 200 and len(body) == int(headers["content-length"])


def test_past_max_connections_requests_get_503_in_openais_shape(start_server):
    host, port = address(start_server("--max-connections", "3", "--keep-alive", "60"))
    held = [http.client.HTTPConnection(host, port, timeout=BOUND_S) for _ in range(3)]
    for conn in held:  # each served, and kept open
        conn.request("GET", "/healthz")
        response = conn.getresponse()
        response.read()
        assert response.status == 200
    one_more = http.client.HTTPConnection(host, port, timeout=BOUND_S)
    one_more.request("GET", "/healthz")
    response = one_more.getresponse()
    assert response.getheader("retry-after") == "1"
    headers = {"content-type": response.getheader("content-type")}
    assert_openai_error(response.status, headers, response.read(), 503, "server_overloaded")
    one_more.close()
    with socket.create_connection((host, port)) as sock:
        sock.sendall(WEBSOCKET_UPGRADE)
        assert_openai_error(*parse(read_until_closed(sock)), 503, "server_overloaded")
    held.pop().close()
    wait_until(lambda: healthz(host, port) == 200, what="a freed connection to be usable")
    for conn in held:
        conn.close()


def workers_of(pid: int) -> set[int]:
    """Live (not zombie) worker processes of ``pid`` (not its resource tracker)."""
    found = set()
    for stat in PROC.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[1]) == pid and b"spawn_main" in command:
            found.add(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def refuses(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=BOUND_S).close()
    except ConnectionRefusedError:
        return True
    return False


def started_workers(server, count: int) -> set[int]:
    host, port = address(server)
    wait_until(lambda: len(workers_of(server.proc.pid)) == count, what=f"{count} workers")
    wait_until(lambda: healthz(host, port) == 200, what="the workers to serve")
    return workers_of(server.proc.pid)


@linux_only
def test_kill_9_of_the_parent_ends_its_workers_and_frees_the_port(start_server):
    server = start_server("--workers", "2")
    host, port = address(server)
    workers = started_workers(server, 2)
    server.proc.kill()
    server.proc.wait(BOUND_S)
    wait_until(lambda: not any(alive(pid) for pid in workers), BOUND_S, "the workers to end")
    assert refuses(host, port)
    again = start_server("--port", str(port))
    assert address(again) == (host, port)
    assert healthz(host, port) == 200


@linux_only
def test_a_killed_worker_is_replaced_while_the_parent_lives(start_server):
    server = start_server("--workers", "2")
    host, port = address(server)
    workers = started_workers(server, 2)
    victim = min(workers)
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: len(workers_of(server.proc.pid) - {victim}) == 2, 30, "a replacement worker")
    assert healthz(host, port) == 200
    assert server.stop() == 0


def test_a_worker_whose_parent_is_gone_sends_itself_sigterm():
    """The portable watch, without PR_SET_PDEATHSIG: a process told its parent is
    some other pid sees it is not and ends by SIGTERM."""
    code = (
        "import os; from foliko_cli.serve.lifetime import _watch; "
        "_watch(os.getppid() + 1, 30, False)"
    )
    done = subprocess.run([sys.executable, "-c", code], timeout=30)
    assert done.returncode == -signal.SIGTERM


class RecordingTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.calls: list[str] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.calls.append("close")
        self.closing = True

    def write_eof(self) -> None:
        self.calls.append("write_eof")

    def abort(self) -> None:
        self.calls.append("abort")
        self.closing = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str):
        return ("127.0.0.1", 1) if name == "peername" else None


def coalesced(scenario):
    async def run():
        transport = RecordingTransport()
        wrapper = CoalescedWrites(transport, asyncio.get_running_loop())
        await scenario(wrapper)
        await asyncio.sleep(0)  # the loop iteration in which a pending flush runs
        return transport

    return asyncio.run(run())


def test_the_writes_of_one_loop_iteration_go_out_as_one():
    async def scenario(wrapper):
        wrapper.write(b"HTTP/1.1 200 OK\r\n\r\n")
        wrapper.write(b"")
        wrapper.write(b"body")
        assert wrapper.get_write_buffer_size() == len(b"HTTP/1.1 200 OK\r\n\r\nbody")
        await asyncio.sleep(0)
        wrapper.writelines([b"next", b" one"])
        assert wrapper.get_extra_info("peername") == ("127.0.0.1", 1)

    transport = coalesced(scenario)
    assert transport.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody", b"next one"]


@pytest.mark.parametrize(
    ("ending", "writes", "calls"),
    [
        ("close", [b"last"], ["close"]),
        ("write_eof", [b"last"], ["write_eof"]),
        ("abort", [], ["abort"]),
    ],
)
def test_closing_sends_what_is_pending_first_and_abort_drops_it(ending, writes, calls):
    async def scenario(wrapper):
        wrapper.write(b"last")
        getattr(wrapper, ending)()

    transport = coalesced(scenario)
    assert transport.writes == writes
    assert transport.calls == calls


def test_nothing_is_written_to_a_transport_already_closing():
    async def scenario(wrapper):
        wrapper.write(b"late")
        wrapper._transport.closing = True

    assert coalesced(scenario).writes == []
