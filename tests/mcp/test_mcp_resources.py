"""MCP resources: ``foliko mcp resources``, ``-a mcp:SERVER:URI`` (text and images,
as files are attached), and tool results with structured content, resource links,
embedded resources and images, against resources_server.py and the reference server."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import orjson
import pexpect
import pytest
from mcp_support import resources_server, session_exists, stored_messages, write_config
from mcp_types import CallToolResult, ImageContent, TextContent
from models.fake_servers import anthropic_message, anthropic_protocol_problems
from models.mock_transport import Script, chat_reply, json_response
from resources_server import NOTES, TINY_PNG

from foliko_cli.errors import AttachmentError
from foliko_cli.mcp.results import result_text
from foliko_cli.messages.attachments import load_all
from foliko_cli.models import build_model, model_spec
from foliko_cli.service.facade import Foliko

CHAT = "/v1/chat/completions"
ENV = {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://models.test/v1"}
NOTES_URI = "mcp:r:file:///notes.md"


# listing


def test_resources_are_listed_with_templates_and_how_to_attach_them(configure, invoke):
    configure(r=resources_server(), b=resources_server("bare"))
    listed = invoke("mcp", "resources", "--json")
    assert listed.exit_code == 0, listed.stderr
    rows = {row["uri"]: row for row in orjson.loads(listed.stdout)}
    assert set(rows) == {
        "file:///notes.md",
        "file:///dot.png",
        "file:///report.pdf",
        "file:///slow.txt",
        "greeting://{name}",
    }
    notes = rows["file:///notes.md"]
    assert (notes["server"], notes["name"], notes["mime_type"]) == ("r", "notes", "text/markdown")
    assert (notes["attach"], notes["template"]) == (NOTES_URI, False)
    assert notes["description"] == "The project's notes."
    assert rows["greeting://{name}"]["template"] is True
    assert rows["greeting://{name}"]["attach"] is None
    table = invoke("mcp", "resources", "r", "--format", "table")
    assert ["r", "file:///dot.png", "image/png", "no", "A", "one-pixel", "image."] in [
        line.split() for line in table.stdout.splitlines()
    ]


def test_a_server_without_resources_lists_none(configure, invoke):
    configure(b=resources_server("bare"))
    listed = invoke("mcp", "resources", "b", "--json")
    assert listed.exit_code == 0, listed.stderr
    assert orjson.loads(listed.stdout) == []
    assert listed.stderr == "foliko: MCP server 'b' has no resources\n"


def test_an_unknown_server_is_exit_2_naming_the_known_ones(configure, invoke):
    configure(r=resources_server(), b=resources_server("bare"))
    listed = invoke("mcp", "resources", "nope")
    assert listed.exit_code == 2
    assert listed.stderr.splitlines() == [
        "foliko: error: mcp resources: unknown MCP server 'nope' (known: b, r); "
        "define it as [mcp_servers.nope] in foliko.toml"
    ]


def test_a_server_that_cannot_start_fails_by_name_and_is_skipped_among_all(configure, invoke):
    configure(r=resources_server(), off={"command": "/nonexistent/server"})
    named = invoke("mcp", "resources", "off")
    assert named.exit_code == 1
    assert "MCP server 'off' is not available: command not found: /nonexistent/server" in (
        named.stderr
    )
    every = invoke("mcp", "resources", "--json")
    assert every.exit_code == 0, every.stderr
    assert {row["server"] for row in orjson.loads(every.stdout)} == {"r"}
    assert "MCP server 'off' failed to start" in every.stderr


# attaching


def test_a_text_resource_is_attached_as_a_file_is(configure, invoke, foliko_home):
    configure()
    done = invoke("chat", "-s", "s", "-a", NOTES_URI, "-a", "mcp:r:greeting://Ann", "read")
    assert done.exit_code == 0, done.stderr
    (user, _) = stored_messages(foliko_home, "s")
    assert user["content"] == (
        f"read\n\n{NOTES_URI}:\n```md\n{NOTES}```\n\nmcp:r:greeting://Ann:\n```\nHello, Ann!\n```"
    )
    notes, greeting = user["attachments"]
    assert (notes["type"], notes["name"], notes["media_type"]) == (
        "text",
        NOTES_URI,
        "text/markdown",
    )
    assert notes["size"] == len(NOTES.encode())
    assert (greeting["name"], greeting["media_type"]) == ("mcp:r:greeting://Ann", "text/plain")


def test_an_image_resource_reaches_the_model_as_an_image(foliko_home):
    script = Script()
    script.on(CHAT, chat_reply("a dot"))
    model = build_model(model_spec("openai:vision", None, ENV), ENV, transport=script.transport)
    servers = {"r": resources_server()}
    with Foliko("sqlite", model, home=foliko_home, mcp_servers=servers) as foliko:
        foliko.chat("s", "what is this?", attachments=["mcp:r:file:///dot.png"])
        stored = foliko.get_session("s").messages[0]["attachments"]
    (body,) = script.bodies(CHAT)
    url = "data:image/png;base64," + base64.b64encode(TINY_PNG).decode()
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": url}},
            ],
        }
    ]
    assert [(p["type"], p["name"], p["media_type"]) for p in stored] == [
        ("image", "mcp:r:file:///dot.png", "image/png")
    ]


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        (
            "mcp:nope:file:///notes.md",
            "cannot attach mcp:nope:file:///notes.md: unknown MCP server 'nope' (known: r); "
            "define it as [mcp_servers.nope] in foliko.toml",
        ),
        (
            "mcp:r:file:///missing.md",
            "cannot attach mcp:r:file:///missing.md: resources/read on MCP server 'r' failed: "
            "Unknown resource: file:///missing.md; list the server's resources",
        ),
        (
            "mcp:r:file:///report.pdf",
            "cannot attach mcp:r:file:///report.pdf: its content is application/pdf, neither "
            "text nor a png, jpeg, webp or gif image; attach a text or image resource",
        ),
        (
            "mcp:r",
            "cannot attach mcp:r: an MCP resource is named mcp:SERVER:URI; "
            "list the server's resources",
        ),
    ],
)
def test_a_resource_that_cannot_be_attached_is_exit_2_and_nothing_is_stored(
    configure, invoke, foliko_home, source, problem
):
    configure()
    done = invoke("chat", "-s", "s", "-a", source, "read")
    assert done.exit_code == 2
    assert done.stderr.splitlines()[-1] == f"foliko: error: {problem}"
    assert not session_exists(foliko_home, "s")


def test_a_server_that_cannot_start_is_exit_2_for_its_resource(configure, invoke, foliko_home):
    configure(off={"command": "/nonexistent/server"})
    done = invoke("chat", "-s", "s", "-a", "mcp:off:file:///x", "read")
    assert done.exit_code == 2
    assert done.stderr.splitlines()[-1] == (
        "foliko: error: cannot attach mcp:off:file:///x: MCP server 'off' is not available: "
        "command not found: /nonexistent/server; list the server's resources"
    )
    assert not session_exists(foliko_home, "s")


def test_a_resource_read_past_call_timeout_is_exit_2(configure, invoke, foliko_home):
    configure(r=resources_server(call_timeout=1))
    done = invoke("chat", "-s", "s", "-a", "mcp:r:file:///slow.txt", "read")
    assert done.exit_code == 2
    assert done.stderr.splitlines()[-1] == (
        "foliko: error: cannot attach mcp:r:file:///slow.txt: resources/read on MCP server 'r' "
        "did not finish within 1s (call_timeout) and was cancelled; list the server's resources"
    )
    assert not session_exists(foliko_home, "s")


def test_a_library_without_mcp_servers_refuses_a_resource():
    with pytest.raises(AttachmentError, match="cannot attach mcp:r:x: no MCP servers here"):
        asyncio.run(load_all(["mcp:r:x"]))


def test_the_interactive_loop_attaches_a_resource(configure, spawn):
    configure()
    child = spawn("chat", "-s", "s", "--no-stream")
    child.expect_exact("> ")
    child.sendline(f"/attach {NOTES_URI}")
    child.expect_exact(f"{NOTES_URI} goes with the next message")
    child.sendline("read")
    child.expect_exact("The answer is 42.")
    child.expect_exact("> ")
    child.sendline("/attach mcp:r")
    child.expect_exact("an MCP resource is named mcp:SERVER:URI")
    child.expect_exact("nothing was attached")
    child.sendline("/attach mcp:r:file:///report.pdf")
    child.expect_exact("goes with the next message")
    child.sendline("again")
    child.expect_exact("its content is application/pdf")
    child.expect_exact("> ")
    child.sendeof()
    child.expect(pexpect.EOF)


# tool results


def test_a_tool_result_keeps_prose_links_resources_images_and_structured_content(
    configure, invoke, foliko_home
):
    configure(r=resources_server(approve="always"))
    done = invoke("chat", "-s", "s", '/tool r__weather {"city": "Oslo"}')
    assert done.exit_code == 0, done.stderr
    result = next(m for m in stored_messages(foliko_home, "s") if m["role"] == "tool")
    assert result["content"].splitlines() == [
        "It is sunny in Oslo.",
        "[resource link forecast: weather://Oslo/forecast (application/json, the week ahead)]",
        "[resource file:///notes.md]",
        *NOTES.splitlines(),
        "",
        f"[image: image/png, {len(TINY_PNG)} bytes]",
        "[structured content]",
        '{"city":"Oslo","celsius":21,"sky":"sunny"}',
    ]


def _weather_turn(home: Path, spec: str, env: dict, path: str, replies: list) -> list[dict]:
    script = Script()
    script.queue(path, *replies)
    model = build_model(model_spec(spec, None, env), env, transport=script.transport)
    servers = {"r": resources_server(approve="always")}
    with Foliko("sqlite", model, home=home, mcp_servers=servers) as foliko:
        foliko.chat("s", "weather in Oslo?")
        stored = next(m for m in foliko.get_session("s").messages if m["role"] == "tool")
    assert [(p["type"], p["name"], p["media_type"]) for p in stored["attachments"]] == [
        ("image", "weather-1.png", "image/png")
    ]
    return script.bodies(path)


def test_a_tool_results_image_reaches_anthropic_as_an_image_block(foliko_home):
    env = {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": "http://models.test"}
    call = anthropic_message(tool_uses=[("c1", "r__weather", {"city": "Oslo"})])
    _, second = _weather_turn(
        foliko_home,
        "anthropic:claude-x",
        env,
        "/v1/messages",
        [json_response(call.body), json_response(anthropic_message("sunny").body)],
    )
    (result,) = second["messages"][2]["content"]
    assert result["type"] == "tool_result"
    text, image = result["content"]
    assert text["type"] == "text" and text["text"].startswith("It is sunny in Oslo.")
    assert image == {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/png",
            "data": base64.b64encode(TINY_PNG).decode(),
        },
    }
    assert anthropic_protocol_problems(second["messages"]) == []


def test_openai_gets_a_tool_results_image_described(foliko_home):
    call = {"id": "c1", "type": "function"}
    call["function"] = {"name": "r__weather", "arguments": '{"city": "Oslo"}'}
    _, second = _weather_turn(
        foliko_home,
        "openai:vision",
        ENV,
        CHAT,
        [chat_reply("", tool_calls=[call], finish_reason="tool_calls"), chat_reply("sunny")],
    )
    result = second["messages"][-1]
    assert (result["role"], result["tool_call_id"]) == ("tool", "c1")
    assert f"[image: image/png, {len(TINY_PNG)} bytes]" in result["content"]


def test_structured_content_the_text_already_holds_is_not_repeated():
    def result(text: str | None, structured: object) -> CallToolResult:
        content = [] if text is None else [TextContent(type="text", text=text)]
        return CallToolResult(content=content, structured_content=structured)

    assert result_text(result("5", {"result": 5})) == "5"
    assert result_text(result("done", {"result": "done"})) == "done"
    assert result_text(result('{"a": 1}', {"a": 1})) == '{"a": 1}'
    assert result_text(result(None, {"a": 1})) == '{"a":1}'
    assert result_text(result("two", {"a": 2})) == 'two\n[structured content]\n{"a":2}'
    image = ImageContent(type="image", data=base64.b64encode(TINY_PNG).decode(), mime_type="x/y")
    assert result_text(CallToolResult(content=[image], structured_content={"a": 1})) == (
        f'[image: x/y, {len(TINY_PNG)} bytes]\n[structured content]\n{{"a":1}}'
    )


# the reference server


@pytest.fixture
def everything(everything_bin: Path, tmp_path: Path):
    write_config(
        tmp_path / "foliko.toml",
        {"everything": {"command": str(everything_bin), "args": ["stdio"], "approve": "always"}},
    )


def test_the_reference_servers_resources_are_listed_and_attached(everything, invoke, foliko_home):
    listed = invoke("mcp", "resources", "everything", "--json")
    assert listed.exit_code == 0, listed.stderr
    rows = {row["uri"]: row for row in orjson.loads(listed.stdout)}
    features = rows["demo://resource/static/document/features.md"]
    assert (features["mime_type"], features["template"]) == ("text/markdown", False)
    assert rows["demo://resource/dynamic/text/{resourceId}"]["template"] is True
    done = invoke("chat", "-s", "s", "-a", "mcp:everything:demo://resource/dynamic/text/3", "hi")
    assert done.exit_code == 0, done.stderr
    (user, _) = stored_messages(foliko_home, "s")
    assert "Resource 3: This is a plaintext resource" in user["content"]
    assert user["attachments"][0]["name"] == "mcp:everything:demo://resource/dynamic/text/3"


def test_the_reference_servers_links_and_structured_content_reach_the_model(
    everything, invoke, foliko_home
):
    links = invoke("chat", "-s", "links", '/tool everything__get-resource-links {"count": 2}')
    assert links.exit_code == 0, links.stderr
    assert "[resource link Text Resource 2: demo://resource/dynamic/text/2" in links.stdout
    structured = invoke(
        "chat", "-s", "sc", '/tool everything__get-structured-content {"location": "New York"}'
    )
    assert structured.exit_code == 0, structured.stderr
    reply = structured.stdout.removeprefix("everything__get-structured-content returned: ")
    assert set(orjson.loads(reply)) == {"temperature", "conditions", "humidity"}
