"""``Foliko``, the synchronous twin of ``AsyncFoliko``: complete, or it refuses;
turns that never wait run without an event loop; no signal is swallowed."""

from __future__ import annotations

import inspect
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from foliko_cli import AsyncFoliko, Foliko, TurnRequest
from foliko_cli.service import facade

PLAIN = {"skills", "request", "model_name", "check_model", "agent_config", "listening_for_waits"}
"""The service's plain (not coroutine) methods: the facade passes them on as they are."""
RENAMED = {"aclose": "close"}


def public_methods(cls: type) -> dict[str, object]:
    return {
        name: inspect.getattr_static(cls, name)
        for name in dir(cls)
        if not name.startswith("_") and callable(inspect.getattr_static(cls, name))
    }


def test_every_public_method_of_the_service_has_a_twin_with_the_same_parameters():
    service, twins = public_methods(AsyncFoliko), public_methods(Foliko)
    for name in service:
        twin = RENAMED.get(name, name)
        assert twin in Foliko.__dict__, f"Foliko has no twin of AsyncFoliko.{name}"
        expected = inspect.signature(getattr(AsyncFoliko, name)).parameters
        assert inspect.signature(getattr(Foliko, twin)).parameters == expected, name
    extra = set(twins) - set(service) - set(RENAMED.values()) - {"run"}
    assert not extra, f"the facade has methods the service lacks: {extra}"


def test_the_plain_methods_are_passed_on_as_they_are(tmp_path):
    for name in PLAIN:
        assert not inspect.iscoroutinefunction(getattr(AsyncFoliko, name)), name
    with Foliko("memory", "echo", home=tmp_path) as foliko:
        assert foliko.model_name("echo") == foliko.service.model_name("echo")
        assert foliko.request(7).timeout == 7


def test_what_the_service_does_not_offer_is_an_attribute_error(tmp_path):
    with Foliko("memory", "echo", home=tmp_path) as foliko:
        for name in ("no_such_method", "_handlers", "_make_handler", "timeout"):
            with pytest.raises(AttributeError):
                getattr(foliko, name)
        assert foliko.home == tmp_path
        assert foliko.storage is foliko.service.storage
        assert foliko.framework is foliko.service.framework


def test_the_twins_return_values_never_coroutines(tmp_path):
    with Foliko("memory", "echo", home=tmp_path) as foliko:
        foliko.chat("s1", "hello there")
        foliko.update_metadata("s1", {"title": "A title"})
        tokens, counted = foliko.count_tokens("s1", "how many?")
        assert isinstance(tokens, int) and tokens > 0 and counted is False
        assert foliko.session_labels(["s1", "missing"]) == {
            "s1": {"title": "A title", "forked_from": None},
            "missing": {"title": None, "forked_from": None},
        }
        spliced = foliko.splice_messages("s1", 0, 2)
        assert spliced.messages == []


def test_the_stream_twins_yield_items_one_at_a_time(tmp_path):
    with Foliko("memory", "echo", home=tmp_path) as foliko:
        events = list(foliko.chat_stream("s1", "streamed"))
        assert [e["type"] for e in events][-1] == "done"
        assert "".join(e["text"] for e in events if e["type"] == "delta") == "streamed"
        assert events[-1]["result"].message == "streamed"
        foliko.chat(TurnRequest("s2", "second"))
        exported = list(foliko.export_sessions(["s1", "gone", "s2"], skip_missing=True))
        assert [r.session_id for r in exported] == ["s1", "s2"]


def run_python(code: str, *, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "FOLIKO_HOME": str(home)},
        timeout=60,
    )


@pytest.mark.parametrize("storage", ["sqlite", "json", "memory"])
def test_a_turn_that_never_waits_runs_without_an_event_loop(tmp_path, storage):
    done = run_python(
        f"""
        import sys
        from foliko_cli import Foliko
        with Foliko({storage!r}, "echo") as foliko:
            first = foliko.chat("s", "one")
            second = foliko.chat("s", "two")
            print(first.message, second.message, "asyncio" in sys.modules)
            print(len(foliko.get_session("s").messages))
        """,
        home=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["one two False", "4"]


def test_a_turn_that_needs_a_loop_runs_on_one_once(tmp_path):
    """A tool may wait on anything: the turn is run again on a loop, and saved once."""
    done = run_python(
        """
        import sys
        from foliko_cli import Foliko
        with Foliko("sqlite", "echo") as foliko:
            result = foliko.chat("s", '/tool set_variable {"key": "k", "value": 1}')
            record = foliko.get_session("s")
            print(result.step_count, "asyncio" in sys.modules, record.variables)
            print([m["role"] for m in record.messages])
        """,
        home=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "2 True {'k': 1}",
        "['user', 'assistant', 'tool', 'assistant']",
    ]


def test_a_turn_on_a_busy_session_waits_for_it_on_a_loop(tmp_path):
    import asyncio

    waiting = threading.Event()
    release = threading.Event()
    held = threading.Event()

    def hold_the_session() -> None:
        async def hold() -> None:
            async with Foliko("sqlite", "echo", home=tmp_path).storage.lock("s", 30):
                held.set()
                await asyncio.to_thread(release.wait, 30)

        asyncio.run(hold())

    holder = threading.Thread(target=hold_the_session)
    holder.start()
    assert held.wait(30)

    def noticed(message: str) -> None:
        if "waiting" in message:
            waiting.set()
            release.set()

    try:
        with Foliko("sqlite", "echo", home=tmp_path, notify=noticed) as foliko:
            result = foliko.chat("s", "after the wait")
            assert result.message == "after the wait"
            assert [m["content"] for m in foliko.get_session("s").messages] == [
                "after the wait"
            ] * 2
        assert waiting.is_set()
    finally:
        release.set()
        holder.join(30)


PAUSING_LOCAL_STORAGE = """
import os, signal, sys
from foliko_cli import Foliko, Interrupted
from foliko_cli.storage.sqlite import SQLiteStorage

signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])


class PausingStorage(SQLiteStorage):
    answers_at_once = True  # it blocks the thread, never suspends: no loop needed

    async def revision(self, session_id):
        if os.environ["PAUSE"] == "before":
            self.pause()
        return await super().revision(session_id)

    async def append(self, *args, **kwargs):
        revision = await super().append(*args, **kwargs)
        if os.environ["PAUSE"] == "after":
            self.pause()
        return revision

    @staticmethod
    def pause():
        print("paused", flush=True)
        signal.sigtimedwait([signal.SIGUSR1], 30)


with Foliko(storage=PausingStorage(sys.argv[1]), model="echo") as foliko:
    try:
        result = foliko.chat("s", "hello")
    except Interrupted as exc:
        kept = "saved " + exc.result.message if exc.result else "nothing saved"
        print("interrupted", exc.exit_code, kept, "asyncio" in sys.modules, flush=True)
    else:
        print("not interrupted", result.message, flush=True)
"""


@pytest.mark.parametrize("pause", ["before", "after"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_a_turn_without_a_loop_is_reported_once_it_has_ended(
    tmp_path: Path, pause, sig
):
    """Such a turn never waits: it runs to its end, is saved, and then the signal
    surfaces, with the result on the exception."""
    db = tmp_path / "s.db"
    script = tmp_path / "pausing.py"
    script.write_text(PAUSING_LOCAL_STORAGE)
    child = subprocess.Popen(
        [sys.executable, str(script), str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PAUSE": pause, "FOLIKO_HOME": str(tmp_path)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert child.stdout.readline().strip() == "paused"
    child.send_signal(sig)
    child.send_signal(signal.SIGUSR1)
    out, err = child.communicate(timeout=60)
    code = 130 if sig == signal.SIGINT else 143
    assert out.strip() == f"interrupted {code} saved hello False", err
    with Foliko(storage=f"sqlite:///{db}", model="echo", home=tmp_path) as foliko:
        assert [m["content"] for m in foliko.get_session("s").messages] == ["hello"] * 2


def test_the_facade_restores_the_programs_own_signal_handlers(tmp_path):
    def mine(number, frame):
        return None

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        with Foliko("sqlite", "echo", home=tmp_path) as foliko:
            foliko.chat("s", "loop-free")
            assert signal.getsignal(signal.SIGTERM) is mine
            foliko.chat("s", "/tool get_session_info {}")  # on a loop
            assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_reads_and_turns_are_the_facades_loop_free_operations():
    assert set(public_methods(AsyncFoliko)) >= facade.TURNS
    assert set(public_methods(AsyncFoliko)) >= facade.READS


def test_the_cli_prints_a_turn_saved_before_a_signal_and_exits_with_it(capsys):
    from foliko_cli.cli.chat import run_turn
    from foliko_cli.context.request import RequestContext
    from foliko_cli.engine.turn import TurnResult
    from foliko_cli.errors import Interrupted

    saved = TurnResult(True, "the reply", 1, "r", "t", "s", {})

    class Terminated:
        def request(self, timeout):
            return RequestContext()

        def chat(self, turn, on_event=None):
            raise Interrupted(
                "interrupted after the turn was saved", signal_number=15, result=saved
            )

    with pytest.raises(Interrupted) as raised:
        run_turn(Terminated(), TurnRequest("s", "hi"), as_json=False, stream=False, timeout=None)
    assert raised.value.exit_code == 143
    assert capsys.readouterr().out == "the reply\n"
