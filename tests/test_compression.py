"""Context compression with the echo model and a small budget (SPEC F4, §5).

Above 70 % of the budget, older messages are summarised by the model; the
summary goes into the system prompt and the model is sent the messages after
``covered``, starting at a user message. The stored history is never touched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from foliko_cli.common.clock import now_ms
from foliko_cli.engine.compression import SUMMARY_HEADING, SUMMARY_SYSTEM, THRESHOLD, Compressor
from foliko_cli.engine.tools import BUILTIN_TOOLS
from foliko_cli.errors import ModelError
from foliko_cli.models.base import ModelRequest, ModelResponse
from foliko_cli.models.echo import EchoModel
from foliko_cli.service.facade import Foliko
from foliko_cli.storage import capabilities

BUDGET = 600
MODEL_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name", "is_error")
TOOL_TURN = "/tool get_session_info"


class RecordingEcho(EchoModel):
    """The echo model, keeping every request; summaries can be made to fail."""

    def __init__(self, context_window: int = 8192) -> None:
        super().__init__(context_window)
        self.requests: list[ModelRequest] = []
        self.fail_summaries = False

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if request.purpose == "summary" and self.fail_summaries:
            raise ModelError("the summariser is down")
        return await super().generate(request)

    @property
    def turns(self) -> list[ModelRequest]:
        return [r for r in self.requests if r.purpose == "turn"]

    @property
    def summaries(self) -> list[ModelRequest]:
        return [r for r in self.requests if r.purpose == "summary"]


def text(turn: int) -> str:
    return f"turn {turn}: the quick brown fox jumps over the lazy dog"


def sent_form(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored messages as the model is sent them."""
    return [{k: m[k] for k in MODEL_KEYS if k in m} for m in messages]


def compressor(budget: int = BUDGET) -> Compressor:
    counter = Compressor(budget)
    counter.count_tools([tool.spec() for tool in BUILTIN_TOOLS])
    return counter


def pairing_problems(messages: list[dict[str, Any]]) -> list[str]:
    """A sent message list must start with a user message, and every tool
    call must be followed by its results (and every result follow its call)."""
    problems = []
    if messages and messages[0]["role"] != "user":
        problems.append(f"starts with {messages[0]['role']!r}")
    pending: list[str] = []
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            if message.get("tool_call_id") not in pending:
                problems.append(f"{index}: result {message.get('tool_call_id')!r} without its call")
            else:
                pending.remove(message["tool_call_id"])
            continue
        if pending:
            problems.append(f"{index}: calls {pending} without results")
        pending = [call["id"] for call in message.get("tool_calls") or []]
    if pending:
        problems.append(f"end: calls {pending} without results")
    return problems


def facade(model: RecordingEcho, home: Path, storage: str = "memory", **options) -> Foliko:
    options.setdefault("context_window", BUDGET)
    return Foliko(storage, model, home=home, **options)


def test_summary_goes_into_the_system_prompt_and_the_rest_follows_covered(tmp_path: Path):
    model = RecordingEcho()
    with facade(model, tmp_path, system_prompt="You are terse.") as foliko:
        for turn in range(14):
            foliko.chat("s", text(turn))
        record = foliko.get_session("s")

    state = record.compression_state
    assert record.metadata["compression_count"] >= 1
    assert state["method"] == "summary"
    assert state["summary"]
    assert 0 < state["covered"] < len(record.messages)
    last = model.turns[-1]
    assert last.system == f"You are terse.\n\n{SUMMARY_HEADING}\n{state['summary']}"
    assert last.messages == sent_form(record.messages[state["covered"] : -1])
    assert last.messages[0]["role"] == "user"
    assert record.messages[state["covered"]]["role"] == "user"

    first_summary = model.requests.index(model.summaries[0])
    for request in model.requests[:first_summary]:
        assert request.system == "You are terse.", "nothing is summarised below the threshold"
    for request in model.summaries:
        assert request.system == SUMMARY_SYSTEM
        assert [m["role"] for m in request.messages] == ["user"]
        assert "[Conversation]\nuser: turn 0:" in model.summaries[0].messages[0]["content"]


def test_compression_starts_above_70_percent_of_the_budget(tmp_path: Path):
    model = RecordingEcho()
    counter = compressor()
    with facade(model, tmp_path) as foliko:
        for turn in range(14):
            before = len(model.summaries)
            foliko.chat("s", text(turn))
            request = model.turns[-1]
            if len(model.summaries) == before:
                assert counter.tokens(request.system, request.messages) <= BUDGET * THRESHOLD
    assert model.summaries


def test_tool_calls_are_never_separated_from_their_results(tmp_path: Path):
    model = RecordingEcho()
    with facade(model, tmp_path, context_window=500) as foliko:
        for turn in range(40):
            foliko.chat("s", TOOL_TURN if turn % 2 else text(turn))
            record = foliko.get_session("s")
            covered = record.compression_state.get("covered", 0)
            if covered:
                assert record.messages[covered]["role"] == "user"

    assert len(model.summaries) >= 3
    for request in model.turns:
        assert pairing_problems(request.messages) == []
    for request in model.summaries:
        conversation = request.messages[0]["content"].split("[Conversation]\n", 1)[1]
        lines = conversation.splitlines()
        assert lines[0].startswith("user: ")
        for index, line in enumerate(lines):
            if "[calls get_session_info" in line:
                assert lines[index + 1].startswith("tool get_session_info: "), lines


def test_the_stored_history_stays_whole_and_in_order(tmp_path: Path):
    model = RecordingEcho()
    sent: list[str] = []
    with facade(model, tmp_path, "sqlite") as foliko:
        for turn in range(30):
            message = TOOL_TURN if turn % 3 == 0 else text(turn)
            sent.append(message)
            foliko.chat("s", message)
    with Foliko("sqlite", "echo", home=tmp_path) as fresh:
        record = fresh.get_session("s")

    assert record.metadata["compression_count"] >= 2
    users = [m["content"] for m in record.messages if m["role"] == "user"]
    assert users == sent
    roles = []
    for message in sent:
        tool_turn = ["user", "assistant", "tool", "assistant"]
        roles += tool_turn if message == TOOL_TURN else ["user", "assistant"]
    assert [m["role"] for m in record.messages] == roles
    for message in record.messages:
        if message["role"] == "assistant" and not message.get("tool_calls"):
            assert message["content"], "every reply is kept with its text"


def test_compression_count_and_state_are_saved(tmp_path: Path):
    model = RecordingEcho()
    started = now_ms()
    with facade(model, tmp_path, "sqlite") as foliko:
        for turn in range(20):
            foliko.chat("s", text(turn))
    finished = now_ms()
    with Foliko("sqlite", "echo", home=tmp_path) as fresh:
        record = fresh.get_session("s")

    assert record.metadata["compression_count"] == len(model.summaries) >= 2
    state = record.compression_state
    assert state["method"] == "summary"
    assert isinstance(state["summary"], str) and state["summary"]
    assert started <= state["last_compressed_at"] <= finished
    assert record.messages[state["covered"]]["role"] == "user"
    assert state["last_token_count"] <= BUDGET


def test_a_second_compression_folds_in_the_first_summary(tmp_path: Path):
    model = RecordingEcho()
    summaries: list[tuple[str, int]] = []
    with facade(model, tmp_path) as foliko:
        for turn in range(40):
            foliko.chat("s", text(turn))
            record = foliko.get_session("s")
            state = record.compression_state
            if record.metadata["compression_count"] > len(summaries):
                summaries.append((state["summary"], state["covered"]))
            if len(summaries) == 2:
                break

    assert len(summaries) == 2, "two compressions happened"
    (first, first_covered), (second, second_covered) = summaries
    assert second_covered > first_covered
    second_request = model.summaries[1].messages[0]["content"]
    assert second_request.startswith(f"[Earlier summary]\n{first}\n\n[Conversation]\n")
    assert f"user: {text(0)}" not in second_request.split("[Conversation]")[-1], (
        "messages already summarised are not sent again"
    )
    assert second != first


def test_a_failing_summary_falls_back_to_truncation(tmp_path: Path):
    model = RecordingEcho()
    model.fail_summaries = True
    counter = compressor()
    with facade(model, tmp_path) as foliko:
        results = [foliko.chat("s", text(turn)) for turn in range(14)]
        record = foliko.get_session("s")

    assert all(r.message == text(i) for i, r in enumerate(results))
    state = record.compression_state
    assert model.summaries, "summarising was tried"
    assert record.metadata["compression_count"] >= 1
    assert state["method"] == "truncation"
    assert state.get("summary") is None
    assert state["covered"] > 0
    assert len(record.messages) == 28
    last = model.turns[-1]
    assert last.system is None, "no summary to show"
    assert last.messages == sent_form(record.messages[state["covered"] : -1])
    for request in model.turns:
        assert counter.tokens(request.system, request.messages) <= BUDGET


def test_truncation_after_a_summary_keeps_the_earlier_summary(tmp_path: Path):
    model = RecordingEcho()
    with facade(model, tmp_path) as foliko:
        turn = 0
        while not model.summaries:
            foliko.chat("s", text(turn))
            turn += 1
        earlier = foliko.get_session("s").compression_state
        model.fail_summaries = True
        count = foliko.get_session("s").metadata["compression_count"]
        while foliko.get_session("s").metadata["compression_count"] == count:
            foliko.chat("s", text(turn))
            turn += 1
        state = foliko.get_session("s").compression_state

    assert state["method"] == "truncation"
    assert state["summary"] == earlier["summary"]
    assert state["covered"] > earlier["covered"]
    assert f"{SUMMARY_HEADING}\n{earlier['summary']}" in model.turns[-1].system


def test_a_thousand_turns_stay_within_a_small_budget(tmp_path: Path):
    model = RecordingEcho()
    counter = compressor()
    with facade(model, tmp_path) as foliko:
        for turn in range(1000):
            foliko.chat("long", TOOL_TURN if turn % 7 == 0 else text(turn))
        record = foliko.get_session("long")

    assert len([m for m in record.messages if m["role"] == "user"]) == 1000
    assert record.metadata["compression_count"] > 10
    worst = max(counter.tokens(r.system, r.messages) for r in model.turns)
    assert worst <= BUDGET
    for request in model.turns[-50:]:
        assert pairing_problems(request.messages) == []


def test_a_large_system_prompt_still_leaves_requests_within_the_budget(tmp_path: Path):
    """A system prompt of 40 % of an 8,192-token window (skills, agent prompts)."""
    model = RecordingEcho()
    system = "Follow the house rules. " * 550
    counter = compressor(8192)
    with Foliko("memory", model, home=tmp_path, system_prompt=system) as foliko:
        for turn in range(120):
            foliko.chat("s", f"turn {turn} " + "lorem ipsum dolor sit amet " * 15)

    assert model.summaries, "the session was compressed"
    sizes = [counter.tokens(r.system, r.messages) for r in model.turns]
    assert max(sizes) <= 8192


def test_a_cleared_session_forgets_its_summary(tmp_path: Path):
    model = RecordingEcho()
    with facade(model, tmp_path, "sqlite") as foliko:
        for turn in range(14):
            foliko.chat("s", text(turn))
        assert foliko.get_session("s").compression_state["covered"] > 0
        foliko.clear_session("s")

        result = foliko.chat("s", "a fresh start")

    assert model.turns[-1].messages == [{"role": "user", "content": "a fresh start"}]
    assert model.turns[-1].system is None
    assert result.message == "a fresh start"


def test_dry_run_shows_exactly_what_the_turn_then_sends(tmp_path: Path):
    model = RecordingEcho()
    with facade(model, tmp_path, "sqlite") as foliko:
        for turn in range(16):
            before = foliko.get_session("s") if turn else None
            view = foliko.dry_run("s", text(turn))
            if before is not None:
                after = foliko.get_session("s")
                assert after.messages == before.messages, "a dry run saves nothing"
                assert after.compression_state == before.compression_state
                assert after.metadata == before.metadata
            foliko.chat("s", text(turn))
            sent = model.turns[-1]
            assert view["system"] == sent.system
            assert view["messages"] == sent.messages
            assert view["model"] == "echo"
        assert foliko.get_session("s").metadata["compression_count"] >= 1


def test_cli_dry_run_shows_the_compressed_view(run_foliko, foliko_home: Path):
    """FOLIKO_CONTEXT_WINDOW shrinks the budget; the dry run compresses but saves nothing."""
    with Foliko("sqlite", "echo", home=foliko_home) as foliko:
        for turn in range(12):
            foliko.chat("s", text(turn))
    env = {"FOLIKO_CONTEXT_WINDOW": str(BUDGET), "FOLIKO_MODEL": "echo"}

    result = run_foliko("chat", "-s", "s", "--dry-run", "what next?", env=env)

    assert result.returncode == 0, result.stderr
    view = orjson.loads(result.stdout)
    assert view["system"].startswith(f"{SUMMARY_HEADING}\n")
    assert view["messages"][0]["role"] == "user"
    assert view["messages"][-1] == {"role": "user", "content": "what next?"}
    assert len(view["messages"]) < 25
    assert compressor().tokens(view["system"], view["messages"]) <= BUDGET
    with Foliko("sqlite", "echo", home=foliko_home) as foliko:
        record = foliko.get_session("s")
    assert len(record.messages) == 24
    assert record.metadata["compression_count"] == 0
    assert "summary" not in record.compression_state

    chatted = run_foliko("chat", "-s", "s", "what next?", env=env)

    assert chatted.returncode == 0, chatted.stderr
    assert chatted.stdout == b"what next?\n"
    with Foliko("sqlite", "echo", home=foliko_home) as foliko:
        record = foliko.get_session("s")
    assert record.metadata["compression_count"] == 1
    assert record.compression_state["summary"] == view["system"].split("\n", 1)[1]
    assert len(record.messages) == 26


def test_the_estimate_is_about_four_characters_per_token():
    counter = Compressor(1000)
    assert counter.tokens(None, []) == 0
    assert counter.tokens("x" * 400, []) == 100
    one = counter.tokens(None, [{"role": "user", "content": "y" * 40}])
    assert 10 < one < 20
    call = {"id": "c", "name": "t", "arguments": {"long": "z" * 400}}
    with_call = counter.tokens(None, [{"role": "assistant", "content": "", "tool_calls": [call]}])
    assert with_call > 100, "tool call arguments count too"


def test_cold_turns_on_a_compressed_session_read_only_its_recent_part(tmp_path):
    """Each CLI turn is a new process: it loads what the summary does not cover, and
    still appends after the whole stored history."""
    import asyncio

    from foliko_cli.service.facade import Foliko
    from foliko_cli.storage.sqlite import SQLiteStorage

    for number in range(30):
        with Foliko("sqlite", "echo", home=tmp_path, context_window=400) as foliko:
            foliko.chat("long", f"turn {number} " + "words " * 20)

    storage = SQLiteStorage(tmp_path / "sessions.db")
    recent = asyncio.run(capabilities.load_recent(storage, "long"))
    whole = asyncio.run(storage.load("long"))
    asyncio.run(storage.close())
    assert recent.first_seq > 0
    assert recent.first_seq == whole.compression_state["covered"]
    assert recent.messages == whole.messages[recent.first_seq :]
    users = [m["content"] for m in whole.messages if m["role"] == "user"]
    assert users == [f"turn {n} " + "words " * 20 for n in range(30)]
    assert [m["role"] for m in whole.messages] == ["user", "assistant"] * 30


SUMMARY_USAGE = {"input_tokens": 1000, "output_tokens": 7}


class SummaryBilling(RecordingEcho):
    """Summaries cost SUMMARY_USAGE; replies what the echo model counts."""

    async def generate(self, request: ModelRequest) -> ModelResponse:
        response = await super().generate(request)
        if request.purpose == "summary":
            return response._replace(usage=SUMMARY_USAGE)
        return response


def test_the_summarising_call_is_counted_in_the_turn_that_caused_it(tmp_path: Path):
    model = SummaryBilling()
    model.price = {"input": 2.0, "output": 10.0}
    with facade(model, tmp_path) as foliko:
        results = [foliko.chat("s", text(turn)) for turn in range(14)]
        record = foliko.get_session("s")
    from foliko_cli.messages.usage import usage_totals

    compressed = [r for r in results if "compression" in r.usage]
    assert len(compressed) == len(model.summaries) >= 1
    turn = compressed[0]
    assert turn.usage["compression"] == SUMMARY_USAGE
    spent_in = turn.usage["input_tokens"] + 1000
    assert turn.cost == round((spent_in * 2.0 + (turn.usage["output_tokens"] + 7) * 10.0) / 1e6, 8)

    replies = [m for m in record.messages if m["role"] == "assistant"]
    billed = [m for m in replies if "compression_usage" in m]
    assert [m["compression_usage"] for m in billed] == [SUMMARY_USAGE] * len(compressed)
    totals = usage_totals(record.messages)
    replied_in = sum(m["usage"]["input_tokens"] for m in replies)
    assert totals["input_tokens"] == replied_in + 1000 * len(compressed)
    assert totals["compression_input_tokens"] == 1000 * len(compressed)
    assert totals["compression_output_tokens"] == 7 * len(compressed)
    assert totals["cost"] == round(sum(r.cost for r in results), 10)


def test_a_turn_without_compression_has_no_compression_usage(tmp_path: Path):
    with facade(SummaryBilling(), tmp_path) as foliko:
        result = foliko.chat("s", "hi")
        record = foliko.get_session("s")
    assert "compression" not in result.usage
    assert "compression_usage" not in record.messages[-1]
