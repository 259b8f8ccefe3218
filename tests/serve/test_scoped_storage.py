"""UserScopedStorage: one user's view of a shared store (the contract itself is
covered by the storage conformance suite's ``user-scoped`` backend)."""

from __future__ import annotations

import asyncio

import pytest

from foliko_cli.errors import SessionNotFoundError, UsageError
from foliko_cli.service import AsyncFoliko
from foliko_cli.storage.memory import MemoryStorage
from foliko_cli.storage.scoped import UserScopedStorage


def test_each_user_sees_only_their_own_sessions():
    async def scenario():
        shared = MemoryStorage()
        alice = AsyncFoliko(UserScopedStorage(shared, "alice", owns_inner=False), "echo")
        bob = AsyncFoliko(UserScopedStorage(shared, "bob", owns_inner=False), "echo")
        admin = AsyncFoliko(shared, "echo")
        await alice.chat("work", "alice's")
        await bob.chat("work", "bob's")
        await bob.chat("~alice~/work", "bob's too")
        assert [s.session_id for s in await alice.list_sessions()] == ["work"]
        assert (await alice.get_session("work")).messages[0]["content"] == "alice's"
        assert sorted(await bob.session_ids()) == ["work", "~alice~/work"]
        assert sorted(await admin.session_ids()) == [
            "~alice~/work",
            "~bob~/work",
            "~bob~/~alice~/work",
        ]
        with pytest.raises(SessionNotFoundError) as missing:
            await alice.get_session("gone")
        assert "~alice~" not in str(missing.value)
        await alice.rename_session("work", "job")
        assert await alice.session_ids() == ["job"]
        assert (await bob.get_session("work")).messages[0]["content"] == "bob's"
        assert (await alice.info())["sessions"] == 1

    asyncio.run(scenario())


def test_the_service_takes_a_user():
    async def scenario():
        shared = MemoryStorage()
        async with AsyncFoliko(shared, "echo", user="carol") as carol:
            await carol.chat("s", "hi")
            assert await shared.session_ids() == ["~carol~/s"]

    asyncio.run(scenario())


@pytest.mark.parametrize("name", ["", "a~b", "a/b", " pad", "tab\t"])
def test_a_user_name_that_could_escape_its_space_is_refused(name):
    with pytest.raises(UsageError):
        UserScopedStorage(MemoryStorage(), name)
