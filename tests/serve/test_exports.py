"""``sessions export --format openai`` replayed with the real ``openai`` SDK
against ``foliko serve``: the items create a conversation that exports to the
same items, and continue as a response's input."""

from __future__ import annotations

import orjson
from full_session import full_record

from foliko_cli.messages.public import record_to_dict

from .servers import run_cli


def exported_items(home, session_id: str) -> dict:
    result = run_cli(home, "sessions", "export", session_id, "--format", "openai")
    assert result.returncode == 0, result.stderr
    (session,) = orjson.loads(result.stdout)
    return session


def test_an_openai_export_replays_through_the_sdk(server, client, tmp_path):
    backup = tmp_path / "full.json"
    backup.write_bytes(orjson.dumps([record_to_dict(full_record("replayed ✓"))]))
    assert run_cli(server.home, "sessions", "import", str(backup)).returncode == 0
    session = exported_items(server.home, "replayed ✓")
    items = session["input"]

    conversation = client.conversations.create(items=items, metadata=session["metadata"])

    assert conversation.metadata == {"session_id": "replayed ✓"}
    listed = client.conversations.items.list(conversation.id, order="asc")
    assert [item.type for item in listed.data] == [item["type"] for item in items]
    assert exported_items(server.home, conversation.id)["input"] == items
    follow_up = {"type": "message", "role": "user", "content": "and now?"}
    response = client.responses.create(model="echo", input=[*items, follow_up])
    assert response.status == "completed"
    assert "and now?" in response.output_text
