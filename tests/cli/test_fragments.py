"""llm's fragments: `chat -f FILE|URL|-|NAME` and `--sf`, `foliko fragments
set|list|show|remove`, each text stored once and referenced by the messages
that use it; the mistakes, each one line with its exit code."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from foliko_cli.messages.fragments import MAX_BYTES, digest

DOC = "# Style\nBe brief.\n"


def one_line_error(result, *parts: str, code: int = 2) -> None:
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("foliko: error: "), result.stderr
    for part in parts:
        assert part in lines[0]


def stored_fragments(home: Path) -> list[tuple[str, int]]:
    import sqlite3

    with sqlite3.connect(home / "sessions.db") as db:
        return db.execute("SELECT hash, length(content) FROM fragments").fetchall()


@pytest.fixture(autouse=True)
def echo_model(monkeypatch):
    monkeypatch.setenv("FOLIKO_MODEL", "echo")


@pytest.fixture
def doc(tmp_path) -> Path:
    path = tmp_path / "style.md"
    path.write_text(DOC)
    return path


def test_a_fragment_goes_before_the_message_and_is_stored_once(invoke, show, doc, foliko_home):
    for text in ("first", "second"):
        result = invoke("chat", "-s", "s", "-f", "style.md", text)
        assert result.exit_code == 0, result.stderr
        assert result.stdout == f"{DOC}\n{text}\n"  # the echo model: what it was sent
    users = [m for m in show("s")["messages"] if m["role"] == "user"]
    assert [m["content"] for m in users] == ["first", "second"]
    ref = {"sha256": digest(DOC), "source": str(doc), "size": len(DOC)}
    assert [m["fragments"] for m in users] == [[ref], [ref]]
    assert stored_fragments(foliko_home) == [(digest(DOC), len(DOC))]
    text = invoke("sessions", "show", "s", "--format", "text").stdout
    assert f"fragment  {doc} (sha256 {digest(DOC)[:12]}, {len(DOC)} B)" in text


def test_the_prompt_and_system_prompt_are_joined_as_llm_joins_them(invoke, doc, tmp_path):
    (tmp_path / "two.txt").write_text("two")
    result = invoke(
        "chat", "-s", "s", "-f", "style.md", "-f", "two.txt", "--sf", "two.txt",
        "--sf", "style.md", "--system", "  sys  ", "--dry-run", "ask",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    sent = orjson.loads(result.stdout)
    llm = pytest.importorskip("llm")
    models = pytest.importorskip("llm.models")
    prompt = models.Prompt("ask", model=llm.get_model("echo"), fragments=[DOC, "two"])
    assert sent["messages"][-1]["content"] == prompt.prompt
    assert sent["system"] == models._combine_system("  sys  ", ["two", DOC])


def test_system_fragments_are_kept_for_later_turns_until_set_anew(invoke, show, doc):
    assert invoke("chat", "-s", "s", "--sf", "style.md", "hi").exit_code == 0
    later = orjson.loads(invoke("chat", "-s", "s", "--dry-run", "again").stdout)
    assert later["system"] == DOC.strip()
    meta = show("s")["metadata"]
    assert meta["system_fragments"][0]["sha256"] == digest(DOC)
    assert invoke("chat", "-s", "s", "--system", "plain", "next").exit_code == 0
    assert "system_fragments" not in show("s")["metadata"]


def test_stdin_is_a_fragment_with_dash(invoke, show):
    result = invoke("chat", "-s", "s", "-f", "-", "what is it?", input="piped text")
    assert result.exit_code == 0, result.stderr
    (user, _) = show("s")["messages"]
    assert user["content"] == "what is it?"
    assert user["fragments"][0]["source"] == "-"
    one_line_error(invoke("chat", "-s", "s", "-f", "-", "--sf", "-", "x", input="t"), "once")


def test_a_saved_fragment_is_used_by_name_and_by_hash(invoke, show, doc, foliko_home):
    saved = invoke("fragments", "set", "style", "style.md")
    assert saved.exit_code == 0, saved.stderr
    doc.write_text("changed since")  # the saved text is a copy
    assert invoke("chat", "-s", "s", "-f", "style", "hi").stdout == f"{DOC}\nhi\n"
    assert invoke("chat", "-s", "s", "-f", digest(DOC), "ho").stdout == f"{DOC}\nho\n"
    listed = orjson.loads(invoke("fragments", "list", "--json").stdout)
    assert [(r["name"], r["sha256"], r["size"], r["source"]) for r in listed] == [
        ("style", digest(DOC), len(DOC), str(doc))
    ]
    assert invoke("fragments", "list", "-q").stdout == "style\n"
    assert invoke("fragments", "show", "style").stdout == DOC
    assert invoke("fragments", "show", digest(DOC)).stdout == DOC
    assert invoke("fragments", "remove", "style").exit_code == 0
    assert invoke("fragments", "list", "--json").stdout.strip() == "[]"
    # a hash the storage keeps is still found: the messages that used it keep it
    assert invoke("fragments", "show", digest(DOC)).stdout == DOC
    assert (foliko_home / "fragments" / f"{digest(DOC)}.txt").exists() is False


def test_a_fragment_set_from_stdin(invoke):
    assert invoke("fragments", "set", "notes", "-", input="from a pipe").exit_code == 0
    assert invoke("fragments", "show", "notes").stdout == "from a pipe\n"


def test_regenerating_a_turn_sends_its_fragments_again(invoke, show, doc):
    invoke("chat", "-s", "s", "-f", "style.md", "hi")
    result = invoke("chat", "-s", "s", "--regenerate")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == f"{DOC}\nhi\n"
    assert [m["role"] for m in show("s")["messages"]] == ["user", "assistant"]


def test_a_fragment_that_says_tool_is_never_a_command_typed(invoke, tmp_path):
    (tmp_path / "trap.txt").write_text('/tool get_variable {"key": "x"}')
    result = invoke("chat", "-s", "s", "-f", "trap.txt", "--json")
    assert result.exit_code == 0, result.stderr
    assert orjson.loads(result.stdout)["step_count"] == 1  # answered, no tool ran


# export, import and migration keep them


def test_export_carries_each_text_once_and_import_stores_it_again(invoke, show, doc, tmp_path):
    for text in ("one", "two"):
        invoke("chat", "-s", "s", "-f", "style.md", "--sf", "style.md", text)
    exported = invoke("sessions", "export", "s").stdout
    assert exported.count(orjson.dumps(DOC).decode()) == 1
    other = f"sqlite:///{tmp_path / 'other.db'}"
    (tmp_path / "backup.json").write_text(exported)
    imported = invoke("sessions", "import", "backup.json", "--storage", other)
    assert imported.exit_code == 0, imported.stderr
    assert show("s", "--storage", other) == show("s")
    again = invoke("sessions", "export", "s", "--storage", other).stdout
    assert again == exported
    sent = orjson.loads(invoke("chat", "-s", "s", "--storage", other, "--dry-run", "x").stdout)
    assert sent["messages"][0]["content"] == f"{DOC}\none"
    assert sent["system"] == DOC.strip()


def test_storage_migrate_copies_the_texts(invoke, doc, tmp_path, foliko_home):
    invoke("chat", "-s", "s", "-f", "style.md", "one")
    target = f"json:///{tmp_path / 'sessions'}"
    migrated = invoke("storage", "migrate", f"sqlite:///{foliko_home / 'sessions.db'}", target)
    assert migrated.exit_code == 0, migrated.stderr
    sent = orjson.loads(invoke("chat", "-s", "s", "--storage", target, "--dry-run", "x").stdout)
    assert sent["messages"][0]["content"] == f"{DOC}\none"
    assert (tmp_path / "sessions" / ".fragments" / f"{digest(DOC)}.txt").read_text() == DOC


# URLs


class Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/to-file":
            self.send_response(302)
            self.send_header("Location", "file:///etc/passwd")
            self.end_headers()
            return
        super().do_GET()

    def log_message(self, *args):
        pass


@pytest.fixture
def web(tmp_path) -> Iterator[tuple[str, Path]]:
    root = tmp_path / "www"
    root.mkdir()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(root))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


def test_a_url_is_fetched_and_kept_with_its_address(invoke, show, web):
    base, root = web
    (root / "notes.txt").write_text("from the web")
    result = invoke("chat", "-s", "s", "-f", f"{base}/notes.txt", "see")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "from the web\nsee\n"
    assert show("s")["messages"][0]["fragments"][0]["source"] == f"{base}/notes.txt"
    assert invoke("fragments", "set", "web", f"{base}/notes.txt").exit_code == 0
    (root / "notes.txt").write_text("changed")  # saved: fetched once
    assert invoke("chat", "-s", "s", "-f", "web", "again").stdout == "from the web\nagain\n"


def test_url_mistakes_are_one_line_each(invoke, web):
    base, root = web
    (root / "big.txt").write_bytes(b"x" * (MAX_BYTES + 1))
    one_line_error(invoke("chat", "-s", "s", "-f", f"{base}/gone", "x"), "HTTP 404", code=2)
    one_line_error(invoke("chat", "-s", "s", "-f", f"{base}/to-file", "x"), "not http(s)", code=2)
    one_line_error(invoke("chat", "-s", "s", "-f", f"{base}/big.txt", "x"), "larger than")
    closed = base.rsplit(":", 1)[0] + ":9"  # nothing listens on the discard port
    one_line_error(
        invoke("chat", "-s", "s", "-f", f"{closed}/x", "x"), "cannot fetch", "network", code=1
    )


# the other mistakes


def test_mistakes_are_one_line_naming_the_fix(invoke, tmp_path, foliko_home):
    (tmp_path / "big.txt").write_bytes(b"y" * (MAX_BYTES + 1))
    (tmp_path / "blob.bin").write_bytes(b"\xff\xfe\x00")
    one_line_error(
        invoke("chat", "-s", "s", "-f", "missing.md", "x"),
        "fragment missing.md not found",
        "foliko fragments list",
    )
    one_line_error(invoke("chat", "-s", "s", "-f", "big.txt", "x"), "larger than the limit")
    one_line_error(invoke("chat", "-s", "s", "--sf", "blob.bin", "x"), "not UTF-8 text")
    one_line_error(invoke("chat", "-s", "s", "-f", str(tmp_path), "x"), "not a file")
    one_line_error(invoke("fragments", "set", "bad name", "big.txt"), "cannot name a fragment")
    one_line_error(invoke("fragments", "set", "ok", "missing.md"), "not found")
    one_line_error(invoke("fragments", "show", "nothing"), "no fragment is saved as 'nothing'")
    one_line_error(invoke("fragments", "remove", "nothing"), "no fragment is saved")
    one_line_error(
        invoke("chat", "-s", "s", "-f", "-", "x", input=b"\xff\xfe"), "stdin is not UTF-8"
    )
    assert not (foliko_home / "sessions.db").exists() or stored_fragments(foliko_home) == []


def test_a_saved_fragment_whose_text_is_gone_says_so(invoke, doc, foliko_home):
    invoke("fragments", "set", "style", "style.md")
    (foliko_home / "fragments" / f"{digest(DOC)}.txt").unlink()
    one_line_error(invoke("chat", "-s", "s", "-f", "style", "x"), "'style' cannot be read")


def test_a_template_keeps_no_fragments(invoke, doc):
    one_line_error(invoke("chat", "--save", "t", "-f", "style.md", "x"), "-f/--fragment")


def test_tokens_count_a_fragment_once(invoke, doc, tmp_path):
    (tmp_path / "long.txt").write_text("word " * 4000)
    with_it = orjson.loads(invoke("chat", "-s", "b", "-f", "long.txt", "--dry-run", "x").stdout)
    assert with_it["messages"][-1]["fragments"] == [
        {"sha256": digest("word " * 4000), "source": str(tmp_path / "long.txt")}
    ]
    from foliko_cli import Foliko

    with Foliko(model="echo") as foliko:
        without, _ = foliko.count_tokens("a", "x")
        counted, _ = foliko.count_tokens("b", "x", fragments=["long.txt"])
    assert 4900 < counted - without < 5100  # 20,000 bytes, about 4 bytes a token, once


@pytest.mark.parametrize("fmt", ["openai", "chatgpt"])
def test_another_tool_s_export_has_the_text_the_model_was_sent(invoke, doc, fmt):
    for text in ("one", "two"):
        invoke("chat", "-s", "s", "-f", "style.md", text)
    exported = invoke("sessions", "export", "s", "--format", fmt).stdout
    for text in ("one", "two"):
        assert orjson.dumps(f"{DOC}\n{text}").decode() in exported


def test_llm_s_aliases_flag_is_answered(invoke):
    one_line_error(invoke("fragments", "list", "--aliases"), "(llm's)", "saved fragments only")
