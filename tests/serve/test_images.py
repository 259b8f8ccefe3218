"""Images sent by OpenAI clients (``image_url`` data URLs) through ``foliko serve``."""

from __future__ import annotations

import base64
import json

import openai
import pytest
from models.fake_servers import OPENAI_KEY, FakeServer, openai_message
from models.images import data_url, png

from .servers import run_cli


def vision_client(start_server, model_server: FakeServer) -> tuple:
    env = {"OPENAI_BASE_URL": f"{model_server.url}/v1", "OPENAI_API_KEY": OPENAI_KEY}
    server = start_server(env=env)
    return server, openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0)


def image_message(text: str, image: bytes) -> dict:
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": text},
            {"type": "image_url", "image_url": {"url": data_url(image)}},
        ],
    }


def test_an_image_in_a_session_turn_reaches_the_model_and_is_stored(start_server, model_server):
    model_server.queue(openai_message("a red dot"))
    server, client = vision_client(start_server, model_server)
    image = png()

    reply = client.chat.completions.create(
        model="openai:vision",
        messages=[image_message("what is it?", image)],
        extra_headers={"X-Session-Id": "pics"},
    )

    assert reply.choices[0].message.content == "a red dot"
    (request,) = model_server.requests
    assert request.body["messages"][-1] == image_message("what is it?", image)
    stored = json.loads(run_cli(server.home, "sessions", "show", "pics", "--json").stdout)
    (part,) = stored["messages"][0]["attachments"]
    assert (part["type"], part["media_type"]) == ("image", "image/png")
    assert base64.b64decode(part["data"]) == image


def test_a_stateless_history_keeps_its_images(start_server, model_server):
    model_server.queue(openai_message("still a dot"))
    _, client = vision_client(start_server, model_server)
    image = png(3, 1)

    client.chat.completions.create(
        model="openai:vision",
        messages=[
            image_message("what is it?", image),
            {"role": "assistant", "content": "a dot"},
            {"role": "user", "content": "sure?"},
        ],
    )

    (request,) = model_server.requests
    assert request.body["messages"][0] == image_message("what is it?", image)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("https://example.com/cat.png", "an image must be a base64 data: URL"),
        ("data:image/png;base64,not base64!", "messages[0].content[1]"),
        (data_url(b"just text", "image/png"), "not a png, jpeg, webp or gif image"),
    ],
)
def test_images_that_cannot_be_used_are_400(start_server, model_server, url, problem):
    _, client = vision_client(start_server, model_server)
    message = {
        "role": "user",
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "image_url", "image_url": {"url": url}},
        ],
    }

    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="openai:vision", messages=[message])

    assert problem in str(caught.value)
    assert model_server.requests == []


def test_an_image_for_echo_is_400(start_server, model_server):
    _, client = vision_client(start_server, model_server)

    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="echo", messages=[image_message("hi", png())])

    assert "echo does not take images" in str(caught.value)


def test_the_responses_api_takes_input_image_parts_and_lists_them_back(start_server, model_server):
    model_server.queue(openai_message("a red dot"))
    _, client = vision_client(start_server, model_server)
    image = png(2, 1)

    response = client.responses.create(
        model="openai:vision",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "what is it?"},
                    {"type": "input_image", "image_url": data_url(image)},
                ],
            }
        ],
    )

    assert response.output_text == "a red dot"
    (request,) = model_server.requests
    assert request.body["messages"][-1] == image_message("what is it?", image)
    items = client.responses.input_items.list(response.id).data
    parts = [part.model_dump(exclude_none=True) for part in items[0].content]
    assert {"type": "input_image", "image_url": data_url(image), "detail": "auto"} in parts


def test_the_responses_api_refuses_an_image_it_cannot_use(start_server, model_server):
    _, client = vision_client(start_server, model_server)
    content = [{"type": "input_image", "image_url": "https://example.com/cat.png"}]

    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="openai:vision", input=[{"role": "user", "content": content}])

    assert "an image must be a base64 data: URL" in str(caught.value)
    assert model_server.requests == []
