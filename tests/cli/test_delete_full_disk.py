"""A full disk is survivable: a session that cannot go into the trash because the
storage is full is not deleted (one line naming --no-trash, exit 3), and
``sessions delete --no-trash`` removes it without a copy, freeing its space."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from filesystems import small_filesystem

from foliko_cli.errors import ExitCode, StorageError, TrashFullError
from foliko_cli.service import AsyncFoliko
from foliko_cli.storage import trash
from foliko_cli.storage.memory import MemoryStorage

from .test_full_disk import fill

FOLIKO = str(Path(sys.executable).with_name("foliko"))
FULL = "SQLite database /x/sessions.db failed: database or disk is full"


class FullForTheTrash(MemoryStorage):
    """A store with no room for a trash entry (the move into the trash rewrites
    the session) but room enough to delete."""

    async def save(self, record, *, expected_revision=None):
        if record.session_id.startswith(trash.TRASH_PREFIX):
            raise StorageError(FULL)
        return await super().save(record, expected_revision=expected_revision)


def test_a_session_the_trash_cannot_take_is_kept_and_no_trash_deletes_it(tmp_path):
    async def scenario() -> None:
        service = AsyncFoliko(FullForTheTrash(), "echo", home=tmp_path)
        await service.chat("a", "first")
        await service.chat("b", "second")
        with pytest.raises(TrashFullError) as refused:
            await service.delete_sessions(["a", "b"])
        assert refused.value.exit_code == ExitCode.STORAGE
        assert "session 'a' was not deleted" in str(refused.value)
        assert "the storage is full (" + FULL + ")" in str(refused.value)
        assert sorted(await service.session_ids()) == ["a", "b"]
        assert await service.delete_sessions(["a", "b"], trash=False) == (["a", "b"], [])
        assert await service.session_ids() == [] and await service.list_trash() == []

    asyncio.run(scenario())


def test_the_cli_line_names_the_way_out(invoke, monkeypatch):
    import foliko_cli.service.facade as facade

    def full(self, session_ids, *, trash=True, progress=None):
        if trash:
            raise TrashFullError(session_ids[0], [], StorageError(FULL))
        return session_ids, []

    monkeypatch.setattr(facade.Foliko, "delete_sessions", full)
    refused = invoke("sessions", "delete", "s1")
    assert refused.exit_code == 3
    assert refused.stderr == (
        f"foliko: error: session 's1' was not deleted: the trash could not be written, the "
        f"storage is full ({FULL}); to free space, delete it without keeping a copy in the "
        "trash (foliko sessions delete --no-trash ID...)\n"
    )
    done = invoke("sessions", "delete", "--no-trash", "s1")
    assert done.exit_code == 0 and done.stdout == "s1\n"


def free_bytes(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


@pytest.mark.slow
def test_on_a_full_disk_delete_says_so_and_no_trash_frees_space(tmp_path):
    """Was: a full home could not be emptied: every delete first wrote the trash."""
    with small_filesystem(tmp_path / "disk", size="2m") as disk:
        env = {**os.environ, "FOLIKO_HOME": str(disk / "home"), "FOLIKO_STORAGE": "json"}
        message = {"role": "user", "content": "x" * 200_000}
        sessions = b"".join(
            orjson.dumps({"session_id": f"s{n}", "messages": [message]}) + b"\n" for n in range(3)
        )

        def foliko(*args: str, data: bytes = b"") -> subprocess.CompletedProcess:
            return subprocess.run(
                [FOLIKO, *args], input=data, capture_output=True, env=env, timeout=60
            )

        assert foliko("sessions", "import", "-", data=sessions).returncode == 0
        fill(disk)
        refused = foliko("sessions", "delete", "s0")
        assert refused.returncode == 3
        [line] = refused.stderr.decode().splitlines()
        assert "session 's0' was not deleted: the trash could not be written" in line
        assert "foliko sessions delete --no-trash ID..." in line
        assert foliko("sessions", "list", "-q").stdout == b"s2\ns1\ns0\n"

        gone = foliko("sessions", "delete", "--no-trash", "s0")
        assert gone.returncode == 0, gone.stderr
        assert free_bytes(disk) > 150_000
        kept = foliko("sessions", "delete", "s1")  # room again: into the trash
        assert kept.returncode == 0, kept.stderr
        assert foliko("sessions", "list", "-q").stdout == b"s2\n"
        assert b"\ts1\t" in foliko("sessions", "trash", "list", "--format", "tsv").stdout
