"""Per-user services are a bounded cache; MCP servers are shared between users
unless marked ``per_user`` (then bounded by the cache); a request in flight
keeps its service.

A server whose tool list is cached starts when a tool of it is first called,
so the turns that must start a user's server call one (``CALL``; the config
offers it on HTTP turns and approves it, as foliko serve never asks)."""

from __future__ import annotations

import dataclasses
import sys
import threading
from pathlib import Path

import httpx2 as httpx
from models.fake_servers import OPENAI_KEY, openai_message

from .servers import wait_until

STDIO_SERVER = Path(__file__).parents[1] / "mcp" / "stdio_server.py"
USERS = [f"user{n}" for n in range(6)]
CALL = '/tool tools__add {"a": 1, "b": 1}'


def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.toml"
    path.write_text("[keys]\n" + "".join(f'"key-{user}" = "{user}"\n' for user in USERS))
    path.chmod(0o600)
    return path


def config(tmp_path: Path, *, per_user: bool) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(
        'serve_tools = ["tools__add"]\n'
        "[mcp_servers.tools]\n"
        f'command = "{sys.executable}"\n'
        f'args = ["{STDIO_SERVER}"]\n'
        f"per_user = {'true' if per_user else 'false'}\n"
        'approve = "always"\n'
    )
    return path


def start(start_server, tmp_path, *, per_user: bool, model_server=None, **env: str):
    env = {"FOLIKO_CONFIG": str(config(tmp_path, per_user=per_user)), **env}
    if model_server is not None:
        env.update(OPENAI_BASE_URL=f"{model_server.url}/v1", OPENAI_API_KEY=OPENAI_KEY)
    return start_server("--api-keys", str(keys_file(tmp_path)), env=env)


def mcp_processes(server) -> int:
    """The server's descendants running the MCP test server (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat.rpartition(")")[2].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = 0, [server.proc.pid]
    while todo:
        for pid in children.get(todo.pop(), []):
            todo.append(pid)
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            found += str(STDIO_SERVER).encode() in cmdline
    return found


def turn(server, user: str, session: str, text: str = "hi", model: str = "echo") -> str:
    response = httpx.post(
        server.url + "/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": text}]},
        headers={"Authorization": f"Bearer key-{user}", "X-Session-Id": session},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]["content"]


def sessions_of(server, user: str) -> list[tuple[str, int]]:
    rows = httpx.get(
        server.url + "/v1/sessions", headers={"Authorization": f"Bearer key-{user}"}
    ).json()["data"]
    return sorted((row["session_id"], row["message_count"]) for row in rows)


def test_users_share_one_mcp_server_and_see_only_their_sessions(start_server, tmp_path):
    server = start(start_server, tmp_path, per_user=False, FOLIKO_SERVE_USER_CACHE="2")
    for user in USERS:
        assert turn(server, user, f"{user}-own", text=f"from {user}") == f"from {user}"
        turn(server, user, "same-name")
    assert mcp_processes(server) == 1
    for user in USERS:  # most were evicted on the way: their sessions stay theirs
        assert sessions_of(server, user) == sorted([(f"{user}-own", 2), ("same-name", 2)])
        assert turn(server, user, f"{user}-own", text="again") == "again"
    assert mcp_processes(server) == 1


def test_per_user_servers_are_bounded_by_the_cache(start_server, tmp_path):
    server = start(start_server, tmp_path, per_user=True, FOLIKO_SERVE_USER_CACHE="2")
    for user in USERS:
        assert turn(server, user, "s", text=CALL) == "tools__add returned: 2"
    wait_until(lambda: mcp_processes(server) == 2, what="the evicted users' MCP servers to stop")


def test_an_idle_service_is_closed(start_server, tmp_path):
    server = start(start_server, tmp_path, per_user=True, FOLIKO_SERVE_USER_IDLE="2")
    turn(server, "user0", "s")
    assert mcp_processes(server) == 1
    wait_until(lambda: mcp_processes(server) == 0, what="the idle user's MCP server to stop")
    assert turn(server, "user0", "s", text="back") == "back"
    assert mcp_processes(server) == 0, "its tool list is cached: it starts when called"
    assert turn(server, "user0", "s", text=CALL) == "tools__add returned: 2"
    assert mcp_processes(server) == 1
    assert sessions_of(server, "user0") == [("s", 8)]


def test_a_request_in_flight_keeps_its_evicted_service(start_server, tmp_path, model_server):
    held = threading.Event()
    model_server.queue(dataclasses.replace(openai_message("slow answer"), stall=held))
    server = start(
        start_server,
        tmp_path,
        per_user=True,
        model_server=model_server,
        FOLIKO_SERVE_USER_CACHE="1",
    )
    answers: list[str] = []
    slow = threading.Thread(
        target=lambda: answers.append(turn(server, "user0", "s", model="openai:gpt-4o"))
    )
    slow.start()
    try:
        assert model_server.wait_for_requests(1)
        turn(server, "user1", "s", text=CALL)  # user0's service leaves the cache, but is in use
        assert mcp_processes(server) == 2
    finally:
        held.set()
        slow.join(60)
    assert answers == ["slow answer"]
    wait_until(lambda: mcp_processes(server) == 1, what="user0's MCP server to stop")
    assert sessions_of(server, "user0") == [("s", 2)]


class Recorded:
    """A stand-in service that notes when it is closed."""

    def __init__(self, user: str, closed: list[str]):
        self.user, self._closed = user, closed

    async def aclose(self) -> None:
        self._closed.append(self.user)


def test_the_cache_evicts_the_least_recently_used_and_spares_leased_services():
    import asyncio

    from foliko_cli.serve.user_services import UserServices

    async def scenario() -> list[str]:
        closed: list[str] = []
        cache = UserServices(lambda user: Recorded(user, closed), capacity=2, idle=600)
        a = cache.acquire("a")
        cache.acquire("b").release()
        assert cache.acquire("a") is a  # a is now the most recently used
        a.release()
        cache.acquire("c").release()  # b goes: unused, so closed at once
        await asyncio.sleep(0)
        assert closed == ["b"] and len(cache) == 2
        cache.acquire("d")  # a goes too, but its lease keeps it open
        await asyncio.sleep(0)
        assert closed == ["b"] and len(cache) == 2
        a.release()
        await asyncio.sleep(0)
        assert closed == ["b", "a"]
        assert cache.acquire("a") is not a  # a comes back: a new service
        await cache.aclose()
        return closed

    closed = asyncio.run(scenario())
    assert sorted(closed) == ["a", "a", "b", "c", "d"]


def test_a_bad_limit_exits_2_naming_the_variable(start_server):
    server = start_server(env={"FOLIKO_SERVE_USER_CACHE": "0"}, wait=False)
    assert server.proc.wait(30) == 2
    server.stop()
    assert "FOLIKO_SERVE_USER_CACHE='0': must be a whole number greater than 0" in server.stderr


def test_scratch_sessions_keep_no_trash_and_users_keep_the_configured_one(foliko_home):
    import asyncio

    from foliko_cli.common.settings import load_settings
    from foliko_cli.serve.state import Services, scratch_id

    async def scenario():
        services = Services(load_settings())
        try:
            scratch = scratch_id()
            await services.ephemeral.create_session(scratch)
            await services.ephemeral.chat(scratch, "hi")
            await services.ephemeral.delete_sessions([scratch])
            user = services.lease("alice")
            keeps = (services.ephemeral.trash_keep, user.service.trash_keep)
            user.release()
            return keeps, await services.ephemeral.storage.session_ids()
        finally:
            await services.aclose()

    (scratch, alice), left = asyncio.run(scenario())
    assert (scratch, alice, left) == (0, 30 * 86_400_000, [])
