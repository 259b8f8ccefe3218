"""The reference server @modelcontextprotocol/server-everything, over stdio and
Streamable HTTP, through the installed ``foliko`` and through the facade."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from mcp_support import write_config

from foliko_cli.messages.public import record_to_dict
from foliko_cli.service.facade import Foliko


@pytest.fixture
def everything(everything_bin: Path, tmp_path: Path):
    """Write a foliko.toml with the everything server over stdio."""

    def configure(**options: object) -> None:
        write_config(
            tmp_path / "foliko.toml",
            {"everything": {"command": str(everything_bin), "args": ["stdio"], **options}},
        )

    return configure


def test_mcp_list_and_tools_through_the_cli(everything, invoke):
    everything()
    listed = invoke("mcp", "list", "--json")
    assert listed.exit_code == 0, listed.stderr
    (server,) = orjson.loads(listed.stdout)
    assert server["name"] == "everything"
    assert (server["transport"], server["state"], server["error"]) == ("stdio", "ready", None)
    tools = invoke("mcp", "tools", "everything", "--json")
    assert tools.exit_code == 0, tools.stderr
    rows = {row["name"]: row for row in orjson.loads(tools.stdout)}
    assert len(rows) == server["tools"]
    get_sum = rows["everything__get-sum"]
    assert get_sum["tool"] == "get-sum"
    assert get_sum["description"] == "Returns the sum of two numbers"
    assert set(get_sum["input_schema"]["properties"]) == {"a", "b"}
    table = invoke("mcp", "tools", "--format", "table")
    assert ["everything__get-sum", "yes", "Returns", "the", "sum", "of", "two", "numbers"] in [
        line.split() for line in table.stdout.splitlines()
    ]


def test_a_chat_calls_get_sum_over_stdio_and_stores_the_call(everything, run_foliko):
    everything()
    done = run_foliko("chat", "-s", "sum", "--json", '/tool everything__get-sum {"a": 2, "b": 3}')
    assert done.returncode == 0, done.stderr
    turn = orjson.loads(done.stdout)
    assert turn["message"] == "everything__get-sum returned: The sum of 2 and 3 is 5."
    shown = run_foliko("sessions", "show", "sum", "--json")
    messages = orjson.loads(shown.stdout)["messages"]
    call = next(m for m in messages if m.get("tool_calls"))
    result = next(m for m in messages if m["role"] == "tool")
    assert call["tool_calls"][0]["name"] == "everything__get-sum"
    assert result["content"] == "The sum of 2 and 3 is 5."
    assert result["tool_call_id"] == call["tool_calls"][0]["id"]
    assert (result["request_id"], result["trace_id"]) == (turn["request_id"], turn["trace_id"])


def test_get_env_shows_none_of_folikos_secrets(everything, invoke):
    everything(env={"LOG_LEVEL": "warn"})
    secrets = {
        "OPENAI_API_KEY": "sk-openai-secret-value",
        "ANTHROPIC_API_KEY": "sk-ant-secret-value",
        "FOLIKO_STORAGE": "sqlite",
    }
    done = invoke("chat", "-s", "env", "/tool everything__get-env", env=secrets)
    assert done.exit_code == 0, done.stderr
    environment = orjson.loads(done.stdout.split("returned: ", 1)[1])
    assert environment["LOG_LEVEL"] == "warn"
    assert "PATH" in environment
    assert not set(secrets) & set(environment)
    assert not any(value in done.stdout for value in secrets.values() if value != "sqlite")


def test_the_allow_list_limits_what_the_model_is_offered(everything, invoke):
    everything(tools=["get-sum", "echo"])
    dry = invoke("chat", "-s", "s1", "--dry-run", "hi")
    assert dry.exit_code == 0, dry.stderr
    offered = {t["name"]: t for t in orjson.loads(dry.stdout)["tools"]}
    assert sorted(n for n in offered if n.startswith("everything__")) == [
        "everything__echo",
        "everything__get-sum",
    ]
    assert offered["everything__get-sum"]["input_schema"]["required"] == ["a", "b"]
    refused = invoke("chat", "-s", "s2", "/tool everything__get-env")
    assert refused.exit_code == 1, refused.stderr  # the /tool call the user typed failed
    assert "unknown tool 'everything__get-env'" in refused.stdout
    assert "the /tool call failed: everything__get-env" in refused.stderr
    listed = orjson.loads(invoke("tools", "list", "--json").stdout)
    assert sorted(r["name"] for r in listed if r["source"] == "mcp everything") == [
        "everything__echo",
        "everything__get-sum",
    ]


def test_streamable_http(everything_http: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("EVERYTHING_TOKEN", "http-header-secret")
    server = {"url": everything_http, "headers": {"Authorization": "Bearer ${EVERYTHING_TOKEN}"}}
    with Foliko("memory", "echo", home=tmp_path, mcp_servers={"everything": server}) as facade:
        summed = facade.chat("http", '/tool everything__get-sum {"a": 2, "b": 3}')
        structured = facade.chat(
            "http", '/tool everything__get-structured-content {"location": "Chicago"}'
        )
        links = facade.chat("http", '/tool everything__get-resource-links {"count": 2}')
        (status,) = facade.mcp_status()
        stored = orjson.dumps(record_to_dict(facade.get_session("http"))).decode()
    assert summed.message == "everything__get-sum returned: The sum of 2 and 3 is 5."
    weather = orjson.loads(structured.message.split("returned: ", 1)[1])
    assert set(weather) == {"temperature", "conditions", "humidity"}
    assert links.message.count("[resource link ") == 2
    assert "demo://resource/dynamic/" in links.message
    assert (status["transport"], status["state"]) == ("http", "ready")
    assert "http-header-secret" not in stored


def test_an_http_server_that_went_away_is_reconnected_for_the_next_call(
    everything_http_server, tmp_path: Path
):
    servers = {"everything": {"url": everything_http_server.url}}
    call = '/tool everything__get-sum {"a": 1, "b": 2}'
    with Foliko("memory", "echo", home=tmp_path, mcp_servers=servers) as facade:
        assert facade.chat("s1", call).message.endswith("The sum of 1 and 2 is 3.")
        everything_http_server.stop()
        lost = facade.chat("s1", call).message
        lost_status = facade.mcp.status("everything")
        everything_http_server.start()
        again = facade.chat("s1", call).message
        status = facade.mcp.status("everything")
    assert "went away during the call to get-sum" in lost
    assert lost_status["state"] == "exited"
    assert again.endswith("The sum of 1 and 2 is 3.")
    assert (status["state"], status["restarts"]) == ("ready", 1)
