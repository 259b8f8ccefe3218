"""Elicitation: on a terminal the user answers the server's form (types, enums and
defaults shown) and accepts, declines or cancels; in a pipe the server's
``elicitation`` setting answers (decline by default, or its defaults); a server
(and foliko serve) declines."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pexpect
import pytest
from mcp_support import asking_server, write_config

from foliko_cli.mcp.asking import Answer
from foliko_cli.mcp.forms import defaults_answer, fields
from foliko_cli.service.facade import Foliko

ORDER = "/tool u__order"


@pytest.fixture
def configure(tmp_path: Path):
    def write(**options: object) -> None:
        write_config(tmp_path / "foliko.toml", {"u": asking_server(approve="always", **options)})

    return write


def test_in_a_pipe_a_question_is_declined_and_stderr_says_why(configure, invoke):
    configure()
    done = invoke("chat", "-s", "s", "/tool u__paint")
    assert done.stdout == "u__paint returned: decline\n"
    assert done.stderr.splitlines()[-1] == (
        "foliko: MCP server 'u' asked a question and it was declined: there is no one to ask; "
        'elicitation = "defaults" in [mcp_servers.u] accepts its defaults instead'
    )


def test_defaults_accepts_when_every_required_field_has_one(configure, invoke):
    configure(elicitation="defaults")
    paint = invoke("chat", "-s", "s", "/tool u__paint").stdout
    order = invoke("chat", "-s", "s", ORDER).stdout
    assert paint == 'u__paint returned: accept {"colour":"green","coats":2}\n'
    assert order == "u__order returned: decline\n", "count has no default"


def test_decline_declines_without_a_word(configure, invoke):
    configure(elicitation="decline")
    done = invoke("chat", "-s", "s", "/tool u__paint")
    assert done.stdout == "u__paint returned: decline\n"
    assert "declined" not in done.stderr


def test_a_service_that_must_decline_declines_over_the_config(tmp_path: Path):
    servers = {"u": asking_server(approve="always", elicitation="defaults")}
    with Foliko("memory", "echo", home=tmp_path, mcp_servers=servers, elicitation="decline") as f:
        assert f.chat("s", "/tool u__paint").message == "u__paint returned: decline"


def _answer_the_order(child, count: str = "3") -> None:
    child.expect_exact("MCP server 'u' asks: What do you order?")
    child.expect_exact("count: how many to order")
    child.expect_exact("count: integer, required: ")
    child.sendline("0")
    child.expect_exact("0 is less than the minimum of 1")
    child.expect_exact("count: integer, required: ")
    child.sendline(count)
    child.expect_exact("size: one of: 1) small, 2) large [small]: ")
    child.sendline("2")
    child.expect_exact("gift: boolean [no]: ")
    child.sendline("yes")
    child.expect_exact("email: string, email [me@example.com]: ")
    child.sendline("not an address")
    child.expect_exact("'not an address' is not a 'email'")
    child.expect_exact("email: string, email [me@example.com]: ")
    child.sendline("")


SEND = "send count = {}, size = large, gift = yes, email = me@example.com? "


def test_on_a_terminal_the_user_fills_the_form_and_sends_it(configure, spawn):
    configure()
    child = spawn("chat", "-s", "s", "--no-stream", ORDER)
    _answer_the_order(child)
    child.expect_exact(SEND.format(3) + "[Y]es, [e]dit, [d]ecline, [c]ancel: ")
    child.sendline("e")
    child.expect_exact("count: integer, required [3]: ")
    child.sendline("4")
    for _ in range(3):  # size, gift, email keep what was given
        child.expect_exact("]: ")
        child.sendline("")
    child.expect_exact(SEND.format(4))
    child.sendline("")
    child.expect_exact(
        'u__order returned: accept {"count":4,"size":"large","gift":true,"email":"me@example.com"}'
    )
    child.expect(pexpect.EOF)


@pytest.mark.parametrize(("answer", "action"), [("d", "decline"), ("c", "cancel")])
def test_on_a_terminal_the_user_declines_or_cancels(configure, spawn, answer: str, action: str):
    configure()
    child = spawn("chat", "-s", "s", "--no-stream", ORDER)
    _answer_the_order(child)
    child.expect_exact(SEND.format(3))
    child.sendline(answer)
    child.expect_exact(f"u__order returned: {action}")
    child.expect(pexpect.EOF)


def test_end_of_input_in_a_field_cancels(configure, spawn):
    configure()
    child = spawn("chat", "-s", "s", "--no-stream", "/tool u__paint")
    child.expect_exact("colour: one of: 1) red, 2) green, 3) blue [green]: ")
    child.sendeof()
    child.expect_exact("u__paint returned: cancel")
    child.expect(pexpect.EOF)


def test_an_elicitation_on_a_terminal_with_defaults_set_is_not_asked(configure, spawn):
    configure(elicitation="defaults")
    child = spawn("chat", "-s", "s", "--no-stream", "/tool u__paint")
    child.expect_exact('u__paint returned: accept {"colour":"green","coats":2}')
    child.expect(pexpect.EOF)
    assert "asks:" not in child.before


# the form itself (MCP 2025-11-25 client/elicitation: the restricted schema)

FORM = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Display name", "minLength": 2},
        "age": {"type": "integer", "minimum": 0, "default": 30},
        "ratio": {"type": "number"},
        "colour": {
            "type": "string",
            "oneOf": [{"const": "#f00", "title": "Red"}, {"const": "#0f0", "title": "Green"}],
            "default": "#0f0",
        },
        "tags": {
            "type": "array",
            "items": {"type": "string", "enum": ["a", "b", "c"]},
            "maxItems": 2,
        },
        "site": {"type": "string", "format": "uri"},
        "born": {"type": "string", "format": "date"},
    },
    "required": ["name", "colour"],
}


def test_fields_show_types_choices_and_what_is_required():
    shown = {f.name: f.describe() for f in fields(FORM)}
    assert shown == {
        "name": "name (Display name): string, required",
        "age": "age: integer",
        "ratio": "ratio: number",
        "colour": "colour: one of: 1) Red, 2) Green, required",
        "tags": "tags: any of, separated by commas: 1) a, 2) b, 3) c",
        "site": "site: string, uri",
        "born": "born: string, date",
    }


@pytest.mark.parametrize(
    ("name", "typed", "value"),
    [
        ("age", "41", 41),
        ("ratio", "0.5", 0.5),
        ("ratio", "2", 2),
        ("colour", "1", "#f00"),
        ("colour", "green", "#0f0"),
        ("colour", "#f00", "#f00"),
        ("tags", "a, 3", ["a", "c"]),
        ("site", "https://example.com/x", "https://example.com/x"),
        ("born", "2026-12-01", "2026-12-01"),
    ],
)
def test_a_typed_answer_becomes_the_fields_value(name: str, typed: str, value):
    (field,) = [f for f in fields(FORM) if f.name == name]
    assert field.parse(typed) == value


@pytest.mark.parametrize(
    ("name", "typed", "problem"),
    [
        ("name", "x", "'x' is too short"),
        ("age", "-1", "-1 is less than the minimum of 0"),
        ("age", "ten", "write a whole number"),
        ("colour", "blue", "choose one of Red, Green"),
        ("tags", "a,b,c", "is too long"),
        ("site", "example", "'example' is not a 'uri'"),
        ("born", "yesterday", "'yesterday' is not a 'date'"),
    ],
)
def test_a_bad_answer_says_what_is_wrong(name: str, typed: str, problem: str):
    (field,) = [f for f in fields(FORM) if f.name == name]
    with pytest.raises(ValueError, match=problem):
        field.parse(typed)


def test_defaults_apply_only_when_each_required_field_has_one():
    assert defaults_answer(FORM) == Answer("decline"), "name has no default"
    form = {**FORM, "required": ["colour", "age"]}
    assert defaults_answer(form) == Answer("accept", {"age": 30, "colour": "#0f0"})


def test_a_nested_field_cannot_be_shown():
    with pytest.raises(ValueError, match="a form cannot hold"):
        fields({"type": "object", "properties": {"where": {"type": "object"}}})


class SlowUser:
    """An application's asker whose user takes longer than every timeout to answer."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.asked: list[str] = []

    async def approve(self, call):
        self.asked.append(f"approve {call.name}")
        await asyncio.sleep(self.seconds)
        return "approved"

    async def elicit(self, request):
        self.asked.append(f"elicit {request.message}")
        await asyncio.sleep(self.seconds)
        return Answer("accept", {"colour": "red", "coats": 1})


def test_the_time_the_user_takes_counts_toward_no_timeout(tmp_path: Path, chooser):
    user = SlowUser(seconds=2.5)
    servers = {"u": asking_server(call_timeout=1)}
    with Foliko("memory", chooser, home=tmp_path, mcp_servers=servers, asker=user) as facade:
        assert facade.chat("s", "/tool u__look").message == "u__look returned: looked"
        reply = facade.chat("s", "/tool u__paint", timeout=2)
    assert reply.message == 'u__paint returned: accept {"colour":"red","coats":1}'
    assert user.asked == ["approve u__paint", "elicit Which paint?"]


# the reference server (@modelcontextprotocol/server-everything, 2025-11-25: a
# mid-call elicitation/create request, and every kind of field the spec has)


@pytest.fixture
def reference(everything_bin: Path, tmp_path: Path) -> None:
    server = {"command": str(everything_bin), "args": ["stdio"]}
    write_config(tmp_path / "foliko.toml", {"everything": server})


def test_the_reference_servers_form_in_a_pipe_is_declined(reference, invoke):
    done = invoke("chat", "-s", "s", "--yes", "/tool everything__trigger-elicitation-request")
    assert "User declined to provide the requested information" in done.stdout
    assert "MCP server 'everything' asked a question and it was declined" in done.stderr


def test_the_reference_servers_form_on_a_terminal(reference, spawn):
    child = spawn(
        "chat", "-s", "s", "--no-stream", "--yes", "/tool everything__trigger-elicitation-request"
    )
    child.expect_exact("MCP server 'everything' asks: Please provide inputs for the following")
    child.expect_exact("name (String): string, required: ")
    child.sendline("Ada")
    for _ in range(12):  # the other fields: Enter keeps a default or leaves a field out
        child.sendline("")
    child.expect_exact(
        "send name = Ada, firstLine = It was a dark and stormy night., integer = 42, "
        "number = 3.14, untitledSingleSelectEnum = Monica, untitledMultipleSelectEnum = Guitar, "
        "titledSingleSelectEnum = Superman, titledMultipleSelectEnum = Tuna, "
        "legacyTitledEnum = Cats? [Y]es"
    )
    child.sendline("y")
    child.expect_exact("User provided the requested information")
    child.expect_exact("Name: Ada")
    child.expect(pexpect.EOF)


def test_a_url_mode_request_is_declined_and_its_url_shown(reference, invoke):
    call = '/tool everything__trigger-url-elicitation {"url": "https://example.com/consent"}'
    done = invoke("chat", "-s", "s", "--yes", call)
    assert "User declined to open the URL" in done.stdout
    assert done.stderr.splitlines()[-1] == (
        "foliko: MCP server 'everything' asked to send the user to https://example.com/consent "
        "(Please open the link to complete this action.); foliko declines URL-mode requests: "
        "open it yourself if you trust it"
    )
