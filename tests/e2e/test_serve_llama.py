"""``foliko serve`` in front of the real llama-server, driven by the official OpenAI SDK."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from pydantic import BaseModel, Field
from serve.servers import ServeProcess, foliko_env


class Person(BaseModel):
    name: str = Field(max_length=12)
    age: int = Field(ge=0, le=120)


@pytest.fixture
def client(foliko_home: Path, llama_env: dict[str, str]) -> Iterator[openai.OpenAI]:
    server = ServeProcess([], foliko_env(foliko_home, llama_env), [], home=foliko_home)
    try:
        server.wait_ready()
        with openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0) as sdk:
            yield sdk
    finally:
        server.kill()


def test_the_sdks_parse_gets_a_reply_the_model_was_held_to(client, llama):
    reply = client.chat.completions.parse(
        model=f"openai:{llama.model}",
        messages=[{"role": "user", "content": "Describe a person as JSON with a name and an age."}],
        response_format=Person,
        max_tokens=60,
        extra_headers={"X-Session-Id": "person"},
    )

    person = reply.choices[0].message.parsed
    assert isinstance(person, Person), reply.choices[0].message.content
    assert 0 <= person.age <= 120


def test_a_plain_turn_streams_through_the_server(client, llama):
    stream = client.chat.completions.create(
        model=f"openai:{llama.model}",
        messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)

    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).strip()
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
