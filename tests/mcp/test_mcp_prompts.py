"""MCP prompts: ``foliko mcp prompts``, and ``/prompt SERVER__NAME key=value`` in a
chat message and in the interactive loop, against resources_server.py and the
reference server."""

from __future__ import annotations

import base64

import orjson
import pexpect
import pytest
from mcp_support import resources_server, session_exists, stored_messages, write_config
from models.mock_transport import Script, chat_reply
from resources_server import NOTES, TINY_PNG

from foliko_cli.cli.prompting import parse
from foliko_cli.errors import UsageError
from foliko_cli.models import build_model, model_spec
from foliko_cli.service.facade import Foliko

CHAT = "/v1/chat/completions"
ENV = {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://models.test/v1"}


# listing


def test_prompts_are_listed_as_server__name_with_their_arguments(configure, invoke):
    configure(r=resources_server(), b=resources_server("bare"))
    listed = invoke("mcp", "prompts", "--json")
    assert listed.exit_code == 0, listed.stderr
    rows = {row["name"]: row for row in orjson.loads(listed.stdout)}
    assert set(rows) == {"r__review", "r__dialogue", "r__leading"}
    review = rows["r__review"]
    assert (review["server"], review["prompt"], review["description"]) == (
        "r",
        "review",
        "Review a file.",
    )
    assert review["arguments"] == [
        {"name": "path", "description": "", "required": True},
        {"name": "style", "description": "", "required": False},
    ]
    table = invoke("mcp", "prompts", "r", "--format", "table")
    assert ["r__review", "path*,", "style", "Review", "a", "file."] in [
        line.split() for line in table.stdout.splitlines()
    ]


def test_a_server_without_prompts_lists_none(configure, invoke):
    configure(b=resources_server("bare"))
    listed = invoke("mcp", "prompts", "b", "--json")
    assert listed.exit_code == 0, listed.stderr
    assert orjson.loads(listed.stdout) == []
    assert listed.stderr == "foliko: MCP server 'b' has no prompts\n"


def test_prompts_of_an_unknown_server_are_exit_2(configure, invoke):
    configure()
    listed = invoke("mcp", "prompts", "nope")
    assert listed.exit_code == 2
    assert listed.stderr.splitlines() == [
        "foliko: error: mcp prompts: unknown MCP server 'nope' (known: r); "
        "define it as [mcp_servers.nope] in foliko.toml"
    ]


# /prompt in foliko chat


def test_a_message_that_is_a_prompt_sends_the_prompts_message(configure, invoke, foliko_home):
    configure()
    done = invoke("chat", "-s", "s", '/prompt r__review path="my file.txt" style=long')
    assert done.exit_code == 0, done.stderr
    assert done.stdout == "Review my file.txt in a long style.\n"
    user = stored_messages(foliko_home, "s")[0]
    assert (user["role"], user["content"]) == ("user", "Review my file.txt in a long style.")


def test_text_after_the_prompt_line_and_piped_text_follow_it(configure, run_foliko, foliko_home):
    configure()
    done = run_foliko("chat", "-s", "s", "/prompt r__leading", input="Go on, please.")
    assert done.returncode == 0, done.stderr
    assert [(m["role"], m["content"]) for m in stored_messages(foliko_home, "s")] == [
        ("user", "Start."),
        ("assistant", "I will begin with"),
        ("user", "Go on, please."),
        ("assistant", "Go on, please."),
    ]
    more = run_foliko("chat", "-s", "t", "/prompt r__review path=a.txt\nAnd be kind.")
    assert more.returncode == 0, more.stderr
    user = stored_messages(foliko_home, "t")[0]
    assert user["content"] == "Review a.txt in a brief style.\n\nAnd be kind."


def test_a_prompts_turns_images_and_resources_reach_the_model(foliko_home):
    script = Script()
    script.on(CHAT, chat_reply("42"))
    model = build_model(model_spec("openai:vision", None, ENV), ENV, transport=script.transport)
    with Foliko("sqlite", model, home=foliko_home, mcp_servers={"r": resources_server()}) as f:
        turn = f.mcp_prompt("r__dialogue", {"topic": "life"})
        f.chat("s", turn.message, attachments=turn.attachments, messages=turn.messages)
    (body,) = script.bodies(CHAT)
    url = "data:image/png;base64," + base64.b64encode(TINY_PNG).decode()
    assert body["messages"] == [
        {"role": "user", "content": "Let us talk about life."},
        {"role": "assistant", "content": "Gladly. What would you like to know?"},
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": f"file:///notes.md:\n```md\n{NOTES}```\n\nWhat is the answer?",
                },
                {"type": "image_url", "image_url": {"url": url}},
            ],
        },
    ]


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        (
            "/prompt r__review",
            "prompt 'r__review' needs its argument 'path'; give it as path=VALUE",
        ),
        (
            "/prompt r__review path=a colour=red",
            "prompt 'r__review' has no argument 'colour' (its arguments: path, style)",
        ),
        ("/prompt r__nope", "MCP server 'r' has no prompt 'nope'; list the server's prompts"),
        (
            "/prompt zz__nope",
            "no MCP prompt 'zz__nope': a prompt is named SERVER__NAME, with a configured "
            "server (known: r); list the servers' prompts",
        ),
        (
            "/prompt r__leading",
            "prompt 'r__leading' ends with no message of the user's; "
            "write the message after the prompt",
        ),
        (
            "/prompt r__review path",
            "/prompt arguments are key=value; 'path' is not; "
            "write /prompt SERVER__NAME key=value ...",
        ),
        ("/prompt", "/prompt needs a prompt's name; write /prompt SERVER__NAME key=value ..."),
    ],
)
def test_a_prompt_that_cannot_be_sent_is_one_line_exit_2_and_nothing_is_stored(
    configure, invoke, foliko_home, message, problem
):
    configure()
    done = invoke("chat", "-s", "s", message)
    assert done.exit_code == 2
    assert done.stderr.splitlines()[-1] == f"foliko: error: {problem}"
    assert not session_exists(foliko_home, "s")


def test_a_failed_prompt_with_json_is_a_failure_object(configure, invoke):
    configure()
    done = invoke("chat", "-s", "s", "--json", "/prompt r__review")
    assert done.exit_code == 2
    failure = orjson.loads(done.stdout)
    assert (failure["success"], failure["session_id"]) == (False, "s")
    assert failure["error"] == {
        "message": "prompt 'r__review' needs its argument 'path'; give it as path=VALUE",
        "exit_code": 2,
    }


def test_prompt_arguments_are_quoted_as_in_a_shell():
    assert parse("/prompt s__p a='x y' b=\"1=2\" c=") == (
        "s__p",
        {"a": "x y", "b": "1=2", "c": ""},
        "",
    )
    with pytest.raises(UsageError, match="cannot read"):
        parse("/prompt s__p a='x")


# /prompt in the interactive loop


def test_the_interactive_loop_sends_a_prompt_and_reports_a_missing_argument(configure, spawn):
    configure()
    child = spawn("chat", "-s", "s", "--no-stream")
    child.expect_exact("> ")
    child.sendline("/prompt r__review")
    child.expect_exact("prompt 'r__review' needs its argument 'path'")
    child.expect_exact("> ")
    child.sendline("/prompt")
    child.expect_exact("/prompt needs a prompt's name")
    child.expect_exact("> ")
    child.sendline("/prompt r__review path=notes.md")
    child.expect_exact("Review notes.md in a brief style.")
    child.expect_exact("> ")
    child.sendeof()
    child.expect(pexpect.EOF)


# the reference server


def test_the_reference_servers_prompts_are_listed_and_sent(everything_bin, tmp_path, invoke):
    write_config(
        tmp_path / "foliko.toml",
        {"everything": {"command": str(everything_bin), "args": ["stdio"]}},
    )
    listed = invoke("mcp", "prompts", "everything", "--json")
    assert listed.exit_code == 0, listed.stderr
    rows = {row["name"]: row for row in orjson.loads(listed.stdout)}
    assert {"everything__simple-prompt", "everything__args-prompt"} <= set(rows)
    city = rows["everything__args-prompt"]["arguments"][0]
    assert (city["name"], city["required"]) == ("city", True)
    sent = invoke("chat", "-s", "s", "/prompt everything__args-prompt city=Oslo")
    assert sent.exit_code == 0, sent.stderr
    assert "Oslo" in sent.stdout
    missing = invoke("chat", "-s", "t", "/prompt everything__args-prompt")
    assert missing.exit_code == 2
    assert missing.stderr.splitlines()[-1] == (
        "foliko: error: prompt 'everything__args-prompt' needs its argument 'city' "
        "(Name of the city); give it as city=VALUE"
    )
    resource = invoke(
        "chat", "-s", "u", "/prompt everything__resource-prompt resourceType=Text resourceId=2"
    )
    assert resource.exit_code == 0, resource.stderr
    assert "Resource 2: This is a plaintext resource" in resource.stdout
