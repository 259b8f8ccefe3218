"""Simon Willison's ``llm`` on ``foliko serve``: models declared in
``extra-openai-models.yaml`` (Chat Completions, and the Responses API with
``responses: true``), from its Python API and from its command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from models.fake_servers import openai_stream

from .conftest import tool_shape

pytestmark = pytest.mark.xdist_group("clients-llm")

LLM_BIN = Path(sys.executable).with_name("llm")
MODELS = ("foliko-chat", "foliko-responses")


@pytest.fixture(scope="module")
def llm_home(tmp_path_factory, server) -> Path:
    home = tmp_path_factory.mktemp("llm-home")
    declared = [
        {"model_id": "foliko-chat", "model_name": "echo"},
        {"model_id": "foliko-responses", "model_name": "echo", "responses": True},
        {"model_id": "foliko-gpt", "model_name": "openai:gpt"},
    ]
    for model in declared:
        model.update(api_base=server.base_url, supports_tools=True)
    (home / "extra-openai-models.yaml").write_text(yaml.safe_dump(declared))
    return home


@pytest.fixture
def llm(llm_home, monkeypatch):
    import llm

    monkeypatch.setenv("LLM_USER_PATH", str(llm_home))
    return llm


def run_llm(home: Path, *args: str) -> str:
    done = subprocess.run(
        [str(LLM_BIN), *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "LLM_USER_PATH": str(home)},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("model_id", MODELS)
def test_a_conversation_answers_each_prompt(llm, model_id, stream):
    conversation = llm.get_model(model_id).conversation()

    answers = [conversation.prompt(text, stream=stream).text() for text in ("one", "two", "three")]

    assert answers == ["one", "two", "three"]


@pytest.mark.parametrize("model_id", MODELS)
def test_a_tool_chain_round_trips_the_call_and_its_result(llm, model_id):
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    chain = llm.get_model(model_id).chain('/tool add {"a": 2, "b": 3}', tools=[add])

    assert chain.text() == "add returned: 5"
    calls, results = [], []
    for response in chain.responses():
        calls += [(c.name, c.arguments) for c in response.tool_calls()]
        results += [(r.name, r.output) for r in response.prompt.tool_results]
    assert calls == [("add", {"a": 2, "b": 3})]
    assert results == [("add", "5")]


def test_the_command_line_continues_a_conversation_the_model_sees(llm_home, upstream):
    upstream.queue(openai_stream(["Rome"]), openai_stream(["Par", "is"]))

    first = run_llm(llm_home, "-m", "foliko-gpt", "Capital of Italy?")
    second = run_llm(llm_home, "-c", "And of France?")

    assert (first, second) == ("Rome\n", "Paris\n")
    assert [tool_shape(m) for m in upstream.messages(1)] == [
        ("user", "Capital of Italy?"),
        ("assistant", "Rome"),
        ("user", "And of France?"),
    ]
