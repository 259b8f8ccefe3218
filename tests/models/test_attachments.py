"""``chat -a/--attach``: text as fenced blocks, images as each provider's content parts."""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from trusting import trust

from foliko_cli.errors import AttachmentError, ImagesRefusedError, UsageError
from foliko_cli.messages import attachments
from foliko_cli.messages.attachments import Attachment, classify, compose, image_type
from foliko_cli.models import build_model, model_spec
from foliko_cli.service.facade import Foliko

from .fake_servers import (
    anthropic_message,
    anthropic_protocol_problems,
    openai_message,
)
from .images import data_url, png
from .mock_transport import Script, chat_reply, json_response

CHAT = "/v1/chat/completions"


def stored_user(home: Path, session_id: str = "s", index: int = 0) -> dict:
    with Foliko("sqlite", "echo", home=home) as foliko:
        record = foliko.get_session(session_id)
    return [m for m in record.messages if m["role"] == "user"][index]


# reading and classifying


@pytest.mark.parametrize(
    ("head", "media_type"),
    [
        (b"\x89PNG\r\n\x1a\n....", "image/png"),
        (b"\xff\xd8\xff\xe0....", "image/jpeg"),
        (b"GIF89a....", "image/gif"),
        (b"GIF87a....", "image/gif"),
        (b"RIFF\x10\x00\x00\x00WEBPVP8 ", "image/webp"),
        (b"RIFF\x10\x00\x00\x00WAVEfmt ", None),
        (b"%PDF-1.7", None),
        (b"plain text", None),
    ],
)
def test_images_are_known_by_their_first_bytes(head, media_type):
    assert image_type(head) == media_type


def test_a_text_attachment_becomes_a_fenced_block_under_its_name():
    loaded = classify("notes.md", b"one\n```\ntwo\n```\n")
    text, parts = compose("summarise", [loaded])

    assert text == "summarise\n\nnotes.md:\n````md\none\n```\ntwo\n```\n````"
    (part,) = parts
    assert part["type"] == "text" and part["name"] == "notes.md"
    assert part["size"] == len("one\n```\ntwo\n```\n")
    assert part["sha256"] == hashlib.sha256(b"one\n```\ntwo\n```\n").hexdigest()


def test_an_image_is_kept_inline_with_its_hash():
    data = png()
    loaded = classify("dot.png", data)

    assert loaded.text is None
    assert loaded.part == {
        "type": "image",
        "name": "dot.png",
        "media_type": "image/png",
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "data": base64.b64encode(data).decode(),
    }


@pytest.mark.parametrize(
    "data", [b"\x00\x01\x02binary", "caf\u00e9".encode("latin-1"), b"text\x00with a nul"]
)
def test_bytes_that_are_neither_text_nor_an_image_are_refused(data):
    with pytest.raises(AttachmentError, match=r"blob\.bin: it is neither UTF-8 text nor a png"):
        classify("blob.bin", data)


def test_size_limits_name_the_attachment(monkeypatch):
    monkeypatch.setattr(attachments, "MAX_IMAGE_BYTES", 10)
    monkeypatch.setattr(attachments, "MAX_TEXT_BYTES", 5)
    with pytest.raises(AttachmentError, match=r"cannot attach big\.png: the image is .* over"):
        classify("big.png", png())
    with pytest.raises(AttachmentError, match=r"cannot attach big\.txt: 6 bytes, over"):
        classify("big.txt", b"123456")


# the CLI with the offline model


def test_text_files_and_stdin_reach_the_model_and_the_transcript(run_foliko, foliko_home, tmp_path):
    (tmp_path / "notes.txt").write_text("remember the milk\n")

    result = run_foliko(
        "chat", "-s", "s", "-m", "echo", "-a", "notes.txt", "-a", "-", "what now?", input="piped"
    )

    assert result.returncode == 0, result.stderr
    expected = "what now?\n\nnotes.txt:\n```txt\nremember the milk\n```\n\nstdin:\n```\npiped\n```"
    assert result.stdout.decode() == expected + "\n", "echo answers with what it was sent"
    user = stored_user(foliko_home)
    assert user["content"] == expected
    assert [(p["type"], p["name"], p["size"]) for p in user["attachments"]] == [
        ("text", "notes.txt", 18),
        ("text", "stdin", 5),
    ]
    shown = run_foliko("sessions", "show", "s", "--format", "text")
    assert "attached  notes.txt (text/plain, 18 B)" in shown.stdout.decode()
    markdown = run_foliko("sessions", "show", "s", "--format", "markdown")
    assert "- attached stdin (text/plain, 5 B)" in markdown.stdout.decode()


def test_an_attachment_alone_is_a_message(run_foliko, foliko_home, tmp_path):
    (tmp_path / "q.txt").write_text("question")

    result = run_foliko("chat", "-s", "s", "-m", "echo", "-a", "q.txt")

    assert result.returncode == 0, result.stderr
    assert stored_user(foliko_home)["content"] == "q.txt:\n```txt\nquestion\n```"


def test_an_image_for_a_model_without_images_is_exit_2_and_saves_nothing(
    run_foliko, foliko_home, tmp_path
):
    (tmp_path / "dot.png").write_bytes(png())

    result = run_foliko("chat", "-s", "s", "-m", "echo", "-a", "dot.png", "look")

    assert result.returncode == 2
    line = result.stderr.decode()
    assert "cannot attach the image dot.png: echo does not take images" in line
    assert "use a model that does" in line and line.count("\n") == 1
    assert run_foliko("sessions", "show", "s").returncode == 2, "the session was not created"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: None, "cannot attach missing.txt: no such file; check the path"),
        (lambda d: (d / "missing.txt").mkdir(), "cannot attach missing.txt: not a file"),
        (
            lambda d: (d / "missing.txt").write_bytes(b"\xff\xfe\x00binary"),
            "cannot attach missing.txt: it is neither UTF-8 text nor a png",
        ),
    ],
)
def test_unreadable_attachments_are_exit_2(run_foliko, foliko_home, tmp_path, make, message):
    make(tmp_path)
    result = run_foliko("chat", "-s", "s", "-m", "echo", "-a", "missing.txt", "hi")

    assert result.returncode == 2
    assert message in result.stderr.decode()
    assert not foliko_home.exists() or run_foliko("sessions", "list", "--json").stdout == b"[]\n"


def test_stdin_can_be_attached_once(run_foliko):
    result = run_foliko("chat", "-s", "s", "-m", "echo", "-a", "-", "-a", "-", "hi", input="x")

    assert result.returncode == 2
    assert "stdin, which can be attached once" in result.stderr.decode()


def test_dash_a_with_an_agent_name_still_runs_the_agent(run_foliko, tmp_path):
    trust(tmp_path / "foliko.toml", '[agents.helper]\nsystem_prompt = "Be brief."\n')

    result = run_foliko("chat", "-s", "s", "-m", "echo", "-a", "helper", "--dry-run", "hi")

    assert result.returncode == 0, result.stderr
    assert "-a helper is taken as --agent helper" in result.stderr.decode()
    assert "Be brief." in orjson.loads(result.stdout)["system"]


def test_regenerate_sends_the_attachments_again(foliko_home, tmp_path):
    (tmp_path / "a.txt").write_text("alpha")
    with Foliko("sqlite", "echo", home=foliko_home) as foliko:
        foliko.chat("s", "read", attachments=[tmp_path / "a.txt"])
        result = foliko.chat("s", None, regenerate=True)
        record = foliko.get_session("s")

    assert result.message == "read\n\na.txt:\n```txt\nalpha\n```"
    assert len(record.messages) == 2
    assert record.messages[0]["attachments"][0]["name"] == "a.txt"


# images reaching each provider


ENV = {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://models.test/v1"}


def openai_model(script: Script):
    return build_model(model_spec("openai:vision", None, ENV), ENV, transport=script.transport)


def test_openai_gets_images_as_image_url_parts_in_every_later_turn(foliko_home, tmp_path):
    image = png(2, 2)
    (tmp_path / "dot.png").write_bytes(image)
    script = Script()
    script.on(CHAT, chat_reply("a red dot"))
    with Foliko("sqlite", openai_model(script), home=foliko_home) as foliko:
        foliko.chat("s", "what is this?", attachments=["dot.png"])
        foliko.chat("s", "and its colour?")

    first, second = script.bodies(CHAT)
    expected = {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": data_url(image)}},
        ],
    }
    assert first["messages"] == [expected]
    assert second["messages"][0] == expected
    assert second["messages"][2] == {"role": "user", "content": "and its colour?"}


def test_a_large_image_is_stored_by_path_and_hash(foliko_home, tmp_path, monkeypatch):
    monkeypatch.setattr(attachments, "INLINE_LIMIT", 10)
    image = png(8, 8)
    picture = tmp_path / "big.png"
    picture.write_bytes(image)
    script = Script()
    script.on(CHAT, chat_reply("seen"))
    with Foliko("sqlite", openai_model(script), home=foliko_home) as foliko:
        foliko.chat("s", "look", attachments=[picture])
        stored = foliko.get_session("s").messages[0]["attachments"][0]
        picture.write_bytes(png(9, 9))
        foliko.chat("s", "again")

    assert stored["path"] == str(picture.resolve()) and "data" not in stored
    assert stored["sha256"] == hashlib.sha256(image).hexdigest()
    first, second = script.bodies(CHAT)
    assert first["messages"][0]["content"][1]["image_url"]["url"] == data_url(image)
    assert second["messages"][0]["content"][1] == {
        "type": "text",
        "text": f"[image big.png is not available: {picture.resolve()} is missing or changed]",
    }


def test_anthropic_gets_base64_image_blocks_before_the_text(run_foliko, fake_server, anthropic_env):
    image = png()
    Path("dot.png").write_bytes(image)
    fake_server.queue(anthropic_message("a dot"))

    result = run_foliko("chat", "-s", "s", "--no-stream", "-a", "dot.png", env=anthropic_env)

    assert result.returncode == 0, result.stderr
    (request,) = fake_server.requests
    assert request.body["messages"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "source": {
                        "type": "base64",
                        "media_type": "image/png",
                        "data": base64.b64encode(image).decode(),
                    },
                }
            ],
        }
    ]
    assert anthropic_protocol_problems(request.body["messages"]) == []


def test_the_openai_cli_turn_sends_the_image_and_dry_run_shows_it(
    run_foliko, fake_server, openai_env
):
    Path("dot.png").write_bytes(png())
    fake_server.queue(openai_message("a dot"))

    dry = run_foliko("chat", "-s", "s", "-a", "dot.png", "--dry-run", "hi", env=openai_env)
    result = run_foliko("chat", "-s", "s", "--no-stream", "-a", "dot.png", "hi", env=openai_env)

    assert dry.returncode == 0, dry.stderr
    (sent,) = orjson.loads(dry.stdout)["messages"]
    assert sent["attachments"][0]["media_type"] == "image/png"
    assert result.returncode == 0, result.stderr
    (request,) = fake_server.requests
    parts = request.body["messages"][0]["content"]
    assert parts[1] == {"type": "image_url", "image_url": {"url": data_url(png())}}


# URLs


@pytest.fixture
def file_server(tmp_path) -> Iterator[tuple[str, Path]]:
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


def test_a_url_is_downloaded_and_kept_with_its_address(run_foliko, foliko_home, file_server):
    base, root = file_server
    (root / "readme.txt").write_text("from the web")

    result = run_foliko("chat", "-s", "s", "-m", "echo", "-a", f"{base}/readme.txt", "see")

    assert result.returncode == 0, result.stderr
    user = stored_user(foliko_home)
    assert user["content"] == "see\n\nreadme.txt:\n```txt\nfrom the web\n```"
    assert user["attachments"][0]["url"] == f"{base}/readme.txt"


def test_a_url_that_fails_is_exit_2_naming_the_status(run_foliko, file_server):
    base, _ = file_server

    result = run_foliko("chat", "-s", "s", "-m", "echo", "-a", f"{base}/gone.png", "see")

    assert result.returncode == 2
    assert f"cannot attach {base}/gone.png: the server answered HTTP 404" in result.stderr.decode()


def test_bytes_given_in_memory_are_attached_by_name(foliko_home):
    script = Script()
    script.on(CHAT, chat_reply("ok"))
    with Foliko("sqlite", openai_model(script), home=foliko_home) as foliko:
        foliko.chat("s", "", attachments=[Attachment("shot.png", png())])

    (body,) = script.bodies(CHAT)
    assert body["messages"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": data_url(png())}}
    ]


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (400, "Invalid content type. image_url is only supported by certain models."),
        (500, "image input is not supported - hint: you may need to provide the mmproj"),
    ],
)
def test_a_server_that_refuses_images_is_exit_2_at_once(foliko_home, tmp_path, status, message):
    (tmp_path / "dot.png").write_bytes(png())
    script = Script()
    script.on(CHAT, json_response({"error": {"message": message}}, status))
    with (
        Foliko("sqlite", openai_model(script), home=foliko_home) as foliko,
        pytest.raises(ImagesRefusedError) as caught,
    ):
        foliko.chat("s", "look", attachments=["dot.png"])

    assert caught.value.exit_code == 2
    assert f"does not take images ({status}: {message[:20]}" in str(caught.value)
    assert len(script.bodies(CHAT)) == 1, "refusing images is not worth a retry"


def test_a_one_letter_key_does_not_garble_error_messages():
    from foliko_cli.models.http import HttpModelClient

    client = HttpModelClient("openai", "http://h/v1", {}, key_hint=None, secret="x")

    assert client.redact("unexpected key x in x-header") == "unexpected key *** in ***-header"


def test_attaching_stdin_from_a_terminal_is_exit_2_and_reads_nothing(monkeypatch, foliko_home):
    from click.testing import CliRunner

    from foliko_cli.cli import chat as chat_command
    from foliko_cli.cli.main import cli

    monkeypatch.setattr(chat_command, "stdin_is_terminal", lambda: True)
    result = CliRunner().invoke(cli, ["chat", "-s", "s", "-m", "echo", "-a", "-", "hi"])

    assert result.exit_code == 2
    assert "-a - attaches stdin, which is a terminal or closed" in result.stderr
    assert not (foliko_home / "sessions.db").exists()


def test_regenerating_with_new_attachments_is_refused_and_changes_nothing(foliko_home, tmp_path):
    (tmp_path / "a.txt").write_text("alpha")
    with Foliko("sqlite", "echo", home=foliko_home) as foliko:
        foliko.chat("s", "read")
        before = foliko.get_session("s")
        with pytest.raises(UsageError, match="regenerating a turn reuses its attachments"):
            foliko.chat("s", None, regenerate=True, attachments=[tmp_path / "a.txt"])
        assert foliko.get_session("s") == before
