"""Every error path: its HTTP status and OpenAI's error shape."""

from __future__ import annotations

import pytest

from .servers import StubModelServer, held, turn


def assert_error(response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    expected = "server_error" if status >= 500 else None
    if status == 401:
        expected = "authentication_error"
    elif status < 500:
        expected = "invalid_request_error"
    assert error["type"] == expected
    if code is not None:
        assert error["code"] == code
    return error


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"model": "echo"}', "input is required"),
        (b'{"input": 5}', "input must be"),
        (b'{"input": []}', "input is empty"),
        (b'{"input": "x", "stream": "yes"}', "stream"),
        (b'{"input": "x", "model": 3}', "model"),
        (b'{"input": [{"type": "image", "url": "x"}]}', "not supported"),
        (b'{"input": [{"role": "assistant", "content": "x"}]}', "must end with"),
        (b'{"input": "x", "tools": [{"type": "web_search"}]}', "does not host 'web_search'"),
        (
            b'{"input": "x", "tools": [{"type": "file_search"}, {"type": "code_interpreter"}]}',
            "does not host 'file_search', 'code_interpreter'",
        ),
        (b'{"input": "x", "tools": [5]}', "must be an object"),
        (b'{"input": "x", "tools": [{"type": "namespace", "name": "n"}]}', "list of tools"),
        (b'{"input": "x", "conversation": "a", "previous_response_id": "resp_0_YQ"}', "not both"),
        (b'{"input": "   "}', "blank"),
    ],
)
def test_bad_response_requests_are_400(http, body, fragment):
    response = http.post(
        "/v1/responses", content=body, headers={"content-type": "application/json"}
    )
    assert fragment in assert_error(response, 400)["message"]


HI = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/responses", {"input": "x", "max_output_tokens": 2**31}, "max_output_tokens"),
        ("/v1/chat/completions", {"messages": HI, "max_tokens": 2**31}, "max_tokens"),
        (
            "/v1/chat/completions",
            {"messages": HI, "max_completion_tokens": 2**63 - 1},
            "max_completion_tokens",
        ),
    ],
)
def test_a_token_limit_past_what_a_model_takes_names_the_parameter_sent(http, path, body, param):
    error = assert_error(http.post(path, json={"model": "echo", **body}), 400)
    assert error["param"] == param
    assert error["message"] == f"{param} must be at most 2147483647"


def test_an_unknown_model_is_404_model_not_found(http):
    response = http.post("/v1/responses", json={"model": "nosuch:model", "input": "x"})
    assert_error(response, 404, "model_not_found")
    chat = http.post(
        "/v1/chat/completions",
        json={"model": "nosuch:model", "messages": [{"role": "user", "content": "x"}]},
    )
    assert_error(chat, 404, "model_not_found")


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/conversations/conv_missing", None),
        ("GET", "/v1/conversations/conv_missing/items", None),
        ("POST", "/v1/conversations/conv_missing", {"metadata": {}}),
        ("DELETE", "/v1/conversations/conv_missing", None),
        ("POST", "/v1/responses", {"input": "x", "conversation": "conv_missing"}),
        ("POST", "/v1/responses", {"input": "x", "previous_response_id": "resp_0_bm9wZQ"}),
        ("POST", "/v1/responses", {"input": "x", "previous_response_id": "garbage"}),
        ("GET", "/v1/responses/resp_0_bm9wZQ", None),
        ("GET", "/v1/responses/resp_xabc", None),
        ("GET", "/v1/sessions/missing", None),
        ("DELETE", "/v1/sessions/missing", None),
        ("POST", "/v1/sessions/missing/clear", None),
        ("POST", "/v1/sessions/missing/rename", {"to": "b"}),
        ("GET", "/v1/sessions/missing/vars", None),
        ("GET", "/v1/nowhere", None),
    ],
)
def test_unknown_things_are_404(http, method, path, body):
    assert_error(http.request(method, path, json=body), 404, "not_found")


def test_wrong_method_is_405_and_says_what_is_allowed(http):
    wrong = http.put("/v1/responses", json={})
    assert_error(wrong, 405)
    assert wrong.headers["allow"] == "POST"


def test_a_deleted_response_is_gone_and_its_conversation_stays(http, client):
    import openai

    first = client.responses.create(model="echo", input="keep me")
    second = client.responses.create(model="echo", input="and me", previous_response_id=first.id)
    client.responses.delete(first.id)
    for gone in (
        lambda: client.responses.retrieve(first.id),
        lambda: client.responses.input_items.list(first.id),
        lambda: client.responses.delete(first.id),
        lambda: client.responses.create(model="echo", input="x", previous_response_id=first.id),
    ):
        with pytest.raises(openai.NotFoundError):
            gone()
    assert client.responses.retrieve(second.id).output_text == "and me"
    items = client.conversations.items.list(first.conversation.id, order="asc")
    assert [item.content[0].text for item in items.data] == ["keep me"] * 2 + ["and me"] * 2


def test_bad_paging_is_400(http):
    assert_error(http.get("/v1/sessions", params={"limit": 0}), 400)
    assert_error(http.get("/v1/sessions", params={"limit": "many"}), 400)
    assert_error(http.get("/v1/sessions", params={"after": "nobody"}), 400)
    conversation = http.post("/v1/conversations", json={}).json()["id"]
    assert_error(http.get(f"/v1/conversations/{conversation}/items?order=up"), 400)
    assert_error(http.post("/v1/conversations", json={"metadata": {"k": 1}}), 400)


def test_a_session_busy_past_the_timeout_is_409(http, server):
    with held(server.home, "busy-one"):
        streamed = http.post(
            "/v1/chat/completions",
            json={"stream": True, "messages": [{"role": "user", "content": "x"}]},
            headers={"X-Session-Id": "busy-one", "X-Foliko-Timeout": "0.3"},
        )
        whole = http.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "x"}]},
            headers={"X-Session-Id": "busy-one", "X-Foliko-Timeout": "0.3"},
        )
    assert_error(streamed, 409, "session_busy")
    assert_error(whole, 409, "session_busy")
    assert http.get("/v1/sessions/busy-one").status_code == 404


def test_bad_timeout_header_is_400(http):
    response = http.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "x"}]},
        headers={"X-Foliko-Timeout": "soon"},
    )
    assert_error(response, 400)


def test_forking_onto_an_existing_session_is_409(http):
    turn(http, "fork-a")
    turn(http, "fork-b")
    assert_error(
        http.post("/v1/sessions/fork-a/fork", json={"to": "fork-b"}), 409, "session_exists"
    )
    assert_error(http.post("/v1/sessions/fork-a/fork", json={}), 400)


def test_a_body_over_the_limit_is_413(http):
    big = b'{"input": "' + b"x" * (16 * 1024 * 1024) + b'"}'
    json_type = {"content-type": "application/json"}
    assert_error(http.post("/v1/responses", content=big, headers=json_type), 413, "body_too_large")

    def chunks():
        for _ in range(17):
            yield b"x" * (1024 * 1024)

    sent = http.post("/v1/responses", content=chunks(), headers=json_type)
    assert_error(sent, 413, "body_too_large")


def assert_failed_stream(http, code: str) -> None:
    """A failure once the stream has begun: an error event, then response.failed."""
    import json

    with http.stream(
        "POST", "/v1/responses", json={"model": "openai:gpt-4o", "input": "x", "stream": True}
    ) as streamed:
        assert streamed.status_code == 200
        events = [
            json.loads(line.removeprefix("data: "))
            for line in streamed.iter_lines()
            if line.startswith("data: ") and line != "data: [DONE]"
        ]
    assert [e["type"] for e in events][-2:] == ["error", "response.failed"]
    assert events[-1]["response"]["error"]["code"] == code
    assert events[-1]["response"]["status"] == "failed"


@pytest.mark.parametrize(
    ("upstream", "status", "code", "retry"),
    [
        ({"status": 400}, 400, "model_rejected_request", "false"),
        ({"status": 401}, 502, "model_error", "false"),
        ({"stall": True}, 504, "timeout", None),
    ],
)
def test_a_provider_failure_says_whether_a_retry_can_help(
    start_server, upstream, status, code, retry
):
    """An upstream's refusal of the request is the client's 400, a refused key the
    server's 502, and neither is worth retrying (x-should-retry: false)."""
    stub = StubModelServer(**upstream)
    try:
        import httpx2 as httpx

        server = start_server(env={"OPENAI_BASE_URL": stub.url, "OPENAI_API_KEY": "k"})
        with httpx.Client(base_url=server.url, timeout=30) as http:
            response = http.post(
                "/v1/responses",
                json={"model": "openai:gpt-4o", "input": "x"},
                headers={"X-Foliko-Timeout": "1" if "stall" in upstream else "20"},
            )
            assert_error(response, status, code)
            assert response.headers.get("x-should-retry") == retry
            if "stall" not in upstream:
                assert_failed_stream(http, code)
            assert http.get("/v1/sessions").json()["data"] == []
        assert server.stop() == 0
    finally:
        stub.stop()


def test_healthz_and_openapi(http):
    assert http.get("/healthz").json() == {"status": "ok"}
    document = http.get("/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    from openapi_spec_validator import validate

    validate(document)
    from foliko_cli.serve.app import create_app

    served = {
        (route.path.replace(":path}", "}").replace(":id}", "}"), method.lower())
        for route in create_app().routes
        if hasattr(route, "methods")  # a WebSocket route is not OpenAPI
        for method in route.methods - {"HEAD"}
        if route.path not in ("/", "/app/{name}", "/favicon.ico", "/openapi.json")
    }
    described = {(path, method) for path, ops in document["paths"].items() for method in ops}
    assert served == described
    assert {"/v1/responses", "/v1/conversations", "/v1/chat/completions", "/v1/sessions"} <= set(
        document["paths"]
    )


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/models", None),
        ("GET", "/v1/sessions", None),
        ("GET", "/openapi.json", None),
        ("GET", "/healthz", None),
        ("GET", "/", None),
        ("POST", "/v1/responses", {"model": "nosuch:model", "input": "x"}),
        ("GET", "/v1/nosuch", None),
        ("PUT", "/v1/responses", {}),
    ],
)
def test_every_answer_says_nosniff_once(http, method, path, body):
    """Was: the JSON answers left the browser free to sniff another type."""
    response = http.request(method, path, json=body)
    assert response.headers.get_list("x-content-type-options") == ["nosniff"], response.headers
