"""The Responses API as clients rely on it: what is output and what is input, ids
that resolve, continuations that never race, and nothing left of a failed turn."""

from __future__ import annotations

import json
import socket
import threading

import pytest
from models.fake_servers import (
    error_reply,
    openai_message,
    openai_protocol_problems,
    openai_stream,
)
from openai.types.responses import Response

from foliko_cli.serve.ids import message_item_id, scope_of

from .servers import run_cli

KEY = "sk-protocol-test"


def upstream(start_server, model_server, **env):
    """A foliko serve whose ``openai:`` models are the fake upstream, and an SDK client."""
    from openai import OpenAI

    server = start_server(
        env={"OPENAI_BASE_URL": f"{model_server.url}/v1", "OPENAI_API_KEY": KEY, **env}
    )
    return server, OpenAI(base_url=server.base_url, api_key="none", max_retries=0)


def items_of(client, conversation_id: str) -> list[tuple[str, str]]:
    page = client.conversations.items.list(conversation_id, order="asc", limit=100)
    return [(i.role, i.content[0].text) for i in page.data if i.type == "message"]


def test_history_in_input_is_input_not_output(client):
    history = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
    ]
    response = client.responses.create(model="echo", input=history)
    assert response.output_text == "c"
    assert [item.content[0].text for item in response.output] == ["c"]
    inputs = client.responses.input_items.list(response.id, order="asc")
    assert [(i.role, i.content[0].text) for i in inputs.data] == [
        ("user", "a"),
        ("assistant", "b"),
        ("user", "c"),
    ]
    again = client.responses.retrieve(response.id)
    assert [item.content[0].text for item in again.output] == ["c"]
    assert items_of(client, response.conversation.id) == [
        *[(m["role"], m["content"]) for m in history],
        ("assistant", "c"),
    ]


def test_three_turns_of_a_conversation_store_six_items(client):
    conversation = client.conversations.create()
    for text in ("one", "two", "three"):
        client.responses.create(
            model="echo",
            input=[{"role": "user", "content": text}],
            conversation=conversation.id,
        )
    assert len(client.conversations.items.list(conversation.id, limit=100).data) == 6


def test_every_response_validates_against_the_sdk_model(client):
    """Every field the reference defines is present with its documented type."""
    response = client.responses.create(model="echo", input="check me", metadata={"k": "v"})
    raw = client.responses.with_raw_response.retrieve(response.id).http_response.json()
    Response.model_validate(raw, strict=False)
    required = {
        "id", "object", "created_at", "status", "completed_at", "error", "incomplete_details",
        "instructions", "model", "output", "parallel_tool_calls", "previous_response_id",
        "tools", "tool_choice", "temperature", "top_p", "presence_penalty",
        "frequency_penalty", "top_logprobs", "truncation", "text", "reasoning", "user",
        "usage", "max_output_tokens", "max_tool_calls", "store", "background",
        "service_tier", "metadata", "safety_identifier", "prompt_cache_key",
    }  # fmt: skip
    created = client.responses.with_raw_response.create(
        model="echo", input="x", temperature=0.5
    ).http_response.json()
    for body in (raw, created):
        assert required <= set(body)
        for number in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
            assert isinstance(body[number], float)
        assert isinstance(body["created_at"], int) and isinstance(body["top_logprobs"], int)
        assert body["usage"]["input_tokens_details"]["cached_tokens"] == 0
        assert body["usage"]["output_tokens_details"]["reasoning_tokens"] == 0
    assert created["temperature"] == 0.5
    assert raw["text"] == {"format": {"type": "text"}, "verbosity": "medium"}


def test_streamed_events_embed_the_full_response_and_end_with_done(http):
    with http.stream("POST", "/v1/responses", json={"input": "hi", "stream": True}) as stream:
        lines = list(stream.iter_lines())
    data = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    events = [json.loads(d) for d in data[:-1]]
    for event in events:
        if "response" in event:
            Response.model_validate(event["response"])
            assert {"presence_penalty", "service_tier", "reasoning"} <= set(event["response"])
    assert events[-1]["type"] == "response.completed"


def test_an_id_names_its_session_so_two_turns_with_one_client_id_stay_apart(http, client):
    conversation = client.conversations.create()
    ids = []
    for text in ("first", "second"):
        answer = http.post(
            "/v1/responses",
            json={"input": text, "conversation": conversation.id},
            headers={"X-Request-Id": "same-id", "X-Client-Request-Id": "same-id"},
        )
        ids.append(answer.json()["id"])
    assert ids[0] != ids[1]
    assert [client.responses.retrieve(i).output_text for i in ids] == ["first", "second"]
    inputs = client.responses.input_items.list(ids[1])
    assert [i.content[0].text for i in inputs.data] == ["second"]


def test_a_continuation_runs_with_exactly_its_responses_history(client):
    root = client.responses.create(model="echo", input="root")
    barrier = threading.Barrier(8)
    answers: dict[int, object] = {}

    def continue_root(number: int) -> None:
        barrier.wait()
        answers[number] = client.responses.create(
            model="echo", input=f"c{number}", previous_response_id=root.id
        )

    threads = [threading.Thread(target=continue_root, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == list(range(8))
    conversations = set()
    for number, answer in answers.items():
        own = (f"c{number}",) * 2
        assert items_of(client, answer.conversation.id) == [
            ("user", "root"),
            ("assistant", "root"),
            ("user", own[0]),
            ("assistant", own[1]),
        ]
        conversations.add(answer.conversation.id)
    assert len(conversations) == 8
    assert root.conversation.id in conversations  # one continued in place, seven forked


def test_a_failed_fork_leaves_nothing(start_server, model_server):
    import openai

    model_server.queue(openai_message("one"), openai_message("two"))
    model_server.queue(error_reply(400, "no"), error_reply(400, "no"))
    server, client = upstream(start_server, model_server)
    first = client.responses.create(model="openai:m", input="one")
    client.responses.create(model="openai:m", input="two", previous_response_id=first.id)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="openai:m", input="three", previous_response_id=first.id)
    # the stream has begun when the upstream fails: an error event, then response.failed
    with (
        pytest.raises(openai.APIError, match="rejected the request"),
        client.responses.stream(
            model="openai:m", input="four", previous_response_id=first.id
        ) as stream,
    ):
        for _ in stream:
            pass
    listed = json.loads(run_cli(server.home, "sessions", "list", "--json").stdout)
    assert [row["session_id"] for row in listed] == [first.conversation.id]


def test_a_reply_cut_by_the_token_limit_is_incomplete(start_server, model_server):
    model_server.queue(openai_message("cut sh", finish_reason="length"))
    model_server.queue(openai_stream(["cut ", "again"], finish_reason="length"))
    _, client = upstream(start_server, model_server)
    response = client.responses.create(model="openai:m", input="long", max_output_tokens=3)
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == "cut sh"
    assert client.responses.retrieve(response.id).status == "incomplete"

    with client.responses.stream(model="openai:m", input="long", max_output_tokens=3) as stream:
        kinds = [event.type for event in stream]
    assert kinds[-1] == "response.incomplete" and "response.completed" not in kinds


def test_http_turns_offer_only_the_clients_tools(start_server, model_server):
    model_server.queue(openai_message("plain"))
    model_server.queue(openai_message(None, [("call_1", "get_variable", {"key": "k"})]))
    _, client = upstream(start_server, model_server)
    client.chat.completions.create(model="openai:m", messages=[{"role": "user", "content": "x"}])
    mine = [
        {
            "type": "function",
            "name": "get_variable",
            "description": "the client's own",
            "parameters": {"type": "object", "properties": {"key": {"type": "string"}}},
        }
    ]
    response = client.responses.create(model="openai:m", input="call it", tools=mine)
    plain, with_tools = (request.body for request in model_server.requests)
    assert "tools" not in plain
    assert [t["function"]["description"] for t in with_tools["tools"]] == ["the client's own"]
    call = response.output[-1]
    assert (call.type, call.name, call.call_id) == ("function_call", "get_variable", "call_1")


def test_serve_tools_enables_the_servers_own(start_server, model_server):
    model_server.queue(openai_message("x"))
    _, client = upstream(start_server, model_server, FOLIKO_SERVE_TOOLS="get_session_info")
    client.responses.create(model="openai:m", input="hi")
    sent = model_server.requests[0].body
    assert [t["function"]["name"] for t in sent["tools"]] == ["get_session_info"]


def test_parallel_calls_of_one_turn_stay_one_message(start_server, model_server):
    calls = [("c1", "lookup", {"q": "a"}), ("c2", "lookup", {"q": "b"})]
    model_server.queue(openai_message("let me look", calls), openai_message("both found"))
    server, client = upstream(start_server, model_server)
    tools = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]
    first = client.responses.create(model="openai:m", input="find", tools=tools)
    assert [item.type for item in first.output] == ["message", "function_call", "function_call"]
    history = [
        {"role": "user", "content": "find"},
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"type": "function_call_output", "call_id": "c1", "output": "A"},
        {"type": "function_call_output", "call_id": "c2", "output": "B"},
    ]
    second = client.responses.create(model="openai:m", input=history, tools=tools)
    assert second.output_text == "both found"
    sent = model_server.requests[1].body["messages"]
    assert openai_protocol_problems(sent) == []
    assert [len(m.get("tool_calls", [])) for m in sent if m["role"] == "assistant"] == [2]
    stored = json.loads(
        run_cli(server.home, "sessions", "show", second.conversation.id, "--json").stdout
    )
    assert [len(m.get("tool_calls") or []) for m in stored["messages"]] == [0, 2, 0, 0, 0]


def test_item_references_resolve_to_the_items_they_name(client):
    first = client.responses.create(model="echo", input="remember")
    output_id = first.output[0].id
    second = client.responses.create(
        model="echo",
        input=[
            {"type": "item_reference", "id": message_item_id(scope_of(first.conversation.id), 0)},
            {"type": "item_reference", "id": output_id},
            {"role": "user", "content": "next"},
        ],
    )
    assert items_of(client, second.conversation.id) == [
        ("user", "remember"),
        ("assistant", "remember"),
        ("user", "next"),
        ("assistant", "next"),
    ]
    import openai

    for wanted in ("msg_99_" + scope_of(first.conversation.id), "msg_0_bm9wZQ", "garbage"):
        with pytest.raises(openai.NotFoundError):
            client.responses.create(
                model="echo",
                input=[{"type": "item_reference", "id": wanted}, {"role": "user", "content": "x"}],
            )


def test_namespace_tools_are_offered_and_hosted_tools_refused(start_server, model_server):
    import openai

    model_server.queue(openai_message(None, [("c1", "read_file", {"path": "a"})]))
    _, client = upstream(start_server, model_server)
    namespace = {
        "type": "namespace",
        "name": "files",
        "description": "file tools",
        "tools": [{"type": "function", "name": "read_file", "parameters": {"type": "object"}}],
    }
    response = client.responses.create(model="openai:m", input="read a", tools=[namespace])
    assert (response.output[0].name, response.output[0].namespace) == ("read_file", "files")
    sent = model_server.requests[0].body["tools"]
    assert [t["function"]["name"] for t in sent] == ["read_file"]
    with pytest.raises(openai.BadRequestError, match="does not host 'web_search'"):
        client.responses.create(model="openai:m", input="x", tools=[{"type": "web_search"}])
    model_server.queue(openai_message("no search here"))
    beside = client.responses.with_raw_response.create(
        model="openai:m", input="x", tools=[namespace, {"type": "web_search"}]
    )
    assert beside.headers["x-foliko-tools-not-hosted"] == "web_search"
    assert [t["type"] for t in beside.http_response.json()["tools"]] == ["namespace"]
    assert [t["function"]["name"] for t in model_server.requests[1].body["tools"]] == ["read_file"]


def raw_exchange(url: str, requests: list[bytes]) -> list[bytes]:
    """Send the requests one after another on one connection; each answer's head."""
    host, port = url.removeprefix("http://").split(":")
    answers = []
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        stream = sock.makefile("rb")
        for request in requests:
            sock.sendall(request)
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                head += stream.readline()
            length = int(
                next(
                    line.split(b":")[1]
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
            )
            answers.append(head + stream.read(length))
    return answers


@pytest.mark.parametrize(
    "body",
    [
        {"messages": [{"role": "assistant", "content": "", "tool_calls": 5}]},
        {"messages": [{"role": "assistant", "content": "", "tool_calls": {}}]},
        {"messages": [{"role": "assistant", "tool_calls": [{"id": 1, "function": {}}]}]},
        {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]},
    ],
)
def test_malformed_shapes_are_400_and_keep_the_connection(server, body):
    payload = json.dumps(body).encode()
    bad = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\n"
        + b"content-type: application/json\r\n"
        + f"content-length: {len(payload)}\r\n\r\n".encode()
        + payload
    )
    good = b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n"
    first, second = raw_exchange(server.url, [bad, good])
    assert first.startswith(b"HTTP/1.1 400"), first
    assert b'"type":"invalid_request_error"' in first
    assert second.startswith(b"HTTP/1.1 200"), second


def test_a_huge_response_id_is_a_404(http):
    for path in (
        f"/v1/responses/resp_{'9' * 5000}_YQ",
        f"/v1/responses/resp_{'9' * 5000}_YQ/input_items",
    ):
        answer = http.get(path)
        assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"
    continued = http.post(
        "/v1/responses", json={"input": "x", "previous_response_id": "resp_" + "9" * 5000 + "_YQ"}
    )
    assert continued.status_code == 404


def test_the_session_header_is_utf8(http, client):
    answer = http.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "bonjour"}]},
        headers={"X-Session-Id": "café".encode()},
    )
    assert answer.status_code == 200, answer.text
    assert client.conversations.retrieve("café").id == "café"
    bad = http.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "x"}]},
        headers={"X-Session-Id": b"\xff\xfe"},
    )
    assert bad.status_code == 400 and "UTF-8" in bad.json()["error"]["message"]


def test_conversation_ids_and_items_are_one_segment_each(client, http):
    conversation = client.conversations.create(
        items=[
            {"role": "user", "content": "keep"},
            {"role": "user", "content": "drop"},
        ]
    )
    scope = scope_of(conversation.id)
    client.conversations.items.delete(message_item_id(scope, 1), conversation_id=conversation.id)
    assert items_of(client, conversation.id) == [("user", "keep")]
    # the old route swallowed this as the id "<conversation>/items/msg_0_..."
    missing = http.delete(f"/v1/conversations/{conversation.id}/items/msg_7_{scope}")
    assert missing.status_code == 404
    assert items_of(client, conversation.id) == [("user", "keep")]
    assert http.get(f"/v1/conversations/{conversation.id}/items/x/y").status_code == 404


def _ids(client, conversation_id: str) -> dict[str, str]:
    page = client.conversations.items.list(conversation_id, order="asc", limit=100)
    return {i.id: (i.content[0].text if i.type == "message" else i.type) for i in page.data}


def test_item_ids_last_the_items_life(client, http, server, tmp_path):
    """Deleting an item renames no other; a later item never takes a deleted
    one's id; response ids hold too; and all of it survives a restart of the
    CLI's reading, a fork and a migration to another backend."""
    conversation = client.conversations.create(
        items=[{"role": "user", "content": text} for text in ("a", "b", "c")]
    )
    first = client.responses.create(model="echo", input="d", conversation=conversation.id)
    before = _ids(client, conversation.id)
    assert list(before.values()) == ["a", "b", "c", "d", "d"]
    ids = list(before)
    client.conversations.items.delete(ids[0], conversation_id=conversation.id)
    after = _ids(client, conversation.id)
    assert after == {k: v for k, v in before.items() if k != ids[0]}
    for item_id, text in after.items():
        assert client.conversations.items.retrieve(item_id, conversation_id=conversation.id)
        assert (
            http.get(f"/v1/conversations/{conversation.id}/items/{item_id}").json()["content"][0][
                "text"
            ]
            == text
        )
    assert http.get(f"/v1/conversations/{conversation.id}/items/{ids[0]}").status_code == 404
    assert client.responses.retrieve(first.id).output_text == "d"
    client.conversations.items.delete(ids[-1], conversation_id=conversation.id)  # the last one
    added = client.conversations.items.create(
        conversation.id, items=[{"role": "user", "content": "e"}]
    )
    assert added.data[0].id not in ids  # not the deleted last one's id
    second = client.responses.create(model="echo", input="f", conversation=conversation.id)
    assert second.id != first.id and second.output[0].id not in ids
    current = _ids(client, conversation.id)
    assert list(current.values()) == ["b", "c", "d", "e", "f", "f"]
    reference = {"type": "item_reference", "id": ids[2]}
    quoted = client.responses.create(
        model="echo", input=[reference, {"role": "user", "content": "g"}]
    )
    assert [
        i.content[0].text for i in client.responses.input_items.list(quoted.id, order="asc").data
    ] == ["c", "g"]

    moved = tmp_path / "moved.db"
    done = run_cli(server.home, "storage", "migrate", "sqlite", f"sqlite:///{moved}")
    assert done.returncode == 0, done.stderr
    shown = json.loads(
        run_cli(
            server.home,
            "--storage",
            f"sqlite:///{moved}",
            "sessions",
            "show",
            conversation.id,
            "--json",
        ).stdout
    )
    from foliko_cli.messages.item_numbers import number_of, offset_of

    offset = offset_of(shown["metadata"])
    numbers = [number_of(m, p, offset) for p, m in enumerate(shown["messages"])]
    scope = scope_of(conversation.id)
    assert [
        message_item_id(scope, n, m["role"])
        for n, m in zip(numbers, shown["messages"], strict=True)
    ] == list(current)
    assert (
        http.get(f"/v1/conversations/{conversation.id}/items/{next(iter(current))}").status_code
        == 200
    )
    forked = run_cli(server.home, "chat", "-s", "ids-fork", "--from", conversation.id, "h")
    assert forked.returncode == 0, forked.stderr
    fork_ids = [i.split("_", 2)[1] for i in _ids(client, "ids-fork")]
    assert fork_ids[: len(current)] == [i.split("_", 2)[1] for i in current]
    assert len(set(fork_ids)) == len(fork_ids)


def test_deleting_one_call_keeps_the_others(start_server, model_server):
    calls = [("c1", "lookup", {}), ("c2", "lookup", {})]
    model_server.queue(openai_message(None, calls))
    _, client = upstream(start_server, model_server)
    tools = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]
    response = client.responses.create(model="openai:m", input="go", tools=tools)
    first_call = response.output[0]
    client.conversations.items.delete(first_call.id, conversation_id=response.conversation.id)
    left = client.conversations.items.list(response.conversation.id, order="asc").data
    assert [(i.type, getattr(i, "call_id", None)) for i in left] == [
        ("message", None),
        ("function_call", "c2"),
    ]


def test_metadata_over_the_limits_is_400(http):
    for metadata in ({f"k{i}": "v" for i in range(17)}, {"k" * 65: "v"}, {"k": "v" * 513}):
        answer = http.post("/v1/responses", json={"input": "x", "metadata": metadata})
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "metadata"


def test_input_files_are_taken_as_text_attachments(client):
    import base64

    data = base64.b64encode(b"line one\nline two\n").decode()
    response = client.responses.create(
        model="echo",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "read this"},
                    {
                        "type": "input_file",
                        "filename": "notes.txt",
                        "file_data": f"data:text/plain;base64,{data}",
                    },
                ],
            }
        ],
    )
    assert "notes.txt:" in response.output_text and "line two" in response.output_text
    import openai

    with pytest.raises(openai.BadRequestError, match="file_id is not supported"):
        client.responses.create(
            model="echo",
            input=[{"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]}],
        )


def test_input_tokens_are_estimated_without_a_tokenizer(client, http):
    short = http.post("/v1/responses/input_tokens", json={"model": "echo", "input": "hi"}).json()
    assert short["object"] == "response.input_tokens"
    assert short["counted_by"] == "estimate"
    long = http.post(
        "/v1/responses/input_tokens",
        json={"model": "echo", "input": "hi " * 400, "instructions": "Be brief."},
    ).json()
    assert long["input_tokens"] > short["input_tokens"] + 250
    first = client.responses.create(model="echo", input="a long first turn " * 50)
    continued = http.post(
        "/v1/responses/input_tokens",
        json={"model": "echo", "input": "hi", "previous_response_id": first.id},
    ).json()
    assert continued["input_tokens"] > short["input_tokens"] + 300
    assert len(client.conversations.items.list(first.conversation.id).data) == 2  # untouched
    missing = http.post(
        "/v1/responses/input_tokens", json={"input": "x", "previous_response_id": "resp_1_YQ"}
    )
    assert missing.status_code == 404


def _compacted(http, body):
    answer = http.post("/v1/responses/compact", json=body)
    assert answer.status_code == 200, answer.text
    compacted = answer.json()
    assert compacted["object"] == "response.compaction"
    return compacted


def test_compaction_is_the_user_messages_then_one_compaction_item(client, http, server):
    """As OpenAI's /responses/compact: the user messages verbatim, then exactly one
    opaque compaction item; sent back as input, the summary stands for them."""
    conversation = client.conversations.create()
    for number in range(6):
        client.responses.create(
            model="echo", input=f"turn {number} " + "words " * 300, conversation=conversation.id
        )
    last = client.responses.create(model="echo", input="the latest", conversation=conversation.id)
    compacted = _compacted(http, {"model": "echo", "previous_response_id": last.id})
    kinds = [item["type"] for item in compacted["output"]]
    assert kinds == ["message"] * 7 + ["compaction"]
    users = [i for i in compacted["output"] if i["type"] == "message"]
    assert {i["role"] for i in users} == {"user"}
    assert users[-1]["content"] == [{"type": "input_text", "text": "the latest"}]
    assert compacted["usage"]["total_tokens"] > 0
    followed = client.responses.create(
        model="echo",
        input=[*compacted["output"], {"role": "user", "content": "after compaction"}],
    )
    assert followed.output_text == "after compaction"
    shown = json.loads(
        run_cli(server.home, "sessions", "show", followed.conversation.id, "--json").stdout
    )
    state = shown["compression_state"]
    assert state["summary"] and state["covered"] == 7  # the user messages it stands for
    assert [m["content"] for m in shown["messages"]][-2:] == ["after compaction"] * 2
    for bad in ({"input": "x"}, {"model": "echo"}):
        assert http.post("/v1/responses/compact", json=bad).status_code == 400
    forged = {"type": "compaction", "encrypted_content": "bm90IG91cnM"}
    refused = http.post("/v1/responses", json={"input": [forged, {"role": "user", "content": "x"}]})
    assert refused.status_code == 400 and "not made by this server" in refused.text


def test_a_history_that_fits_is_compacted_all_the_same(http):
    """OpenAI's compact never answers with nothing to compact. The checks of Open
    Responses' ``compact-response`` (its compliance suite is a script in its
    repository, not a package, so it cannot run here): a short history, then
    the CompactResource's required fields and an output item of type
    ``compaction`` (the schema itself: test_openai_spec.py)."""
    history = [
        {"type": "message", "role": "user", "content": "My name is Alice."},
        {"type": "message", "role": "assistant", "content": "Hello Alice!"},
        {"type": "message", "role": "user", "content": "What is my name?"},
    ]
    compacted = _compacted(http, {"model": "echo", "input": history})
    assert {"id", "object", "output", "created_at", "usage"} <= set(compacted)
    assert [i["type"] for i in compacted["output"]] == ["message", "message", "compaction"]
    assert [i["content"][0]["text"] for i in compacted["output"][:2]] == [
        "My name is Alice.",
        "What is my name?",
    ]
    assert compacted["output"][-1]["encrypted_content"]
    again = _compacted(http, {"model": "echo", "input": compacted["output"]})
    assert [i["type"] for i in again["output"]] == ["message", "message", "compaction"]


def test_context_management_compacts_past_its_threshold(client, http, server):
    """``context_management`` with ``compact_threshold``: the turn compacts once
    the request passes it, and its output starts with the compaction item,
    streamed or not; chaining the items statelessly carries the summary on."""
    manage = [{"type": "compaction", "compact_threshold": 300}]
    history = [{"role": "user", "content": f"old {n} " + "words " * 200} for n in range(3)]
    history += [{"role": "user", "content": "now"}]
    made = http.post(
        "/v1/responses",
        json={"model": "echo", "input": history, "context_management": manage},
    ).json()
    assert [i["type"] for i in made["output"]] == ["compaction", "message"]
    assert made["output"][1]["content"][0]["text"] == "now"
    assert made["output"][0]["id"] != made["output"][1]["id"]
    retrieved = http.get(f"/v1/responses/{made['id']}").json()
    assert retrieved["output"] == made["output"]
    small = http.post(
        "/v1/responses", json={"model": "echo", "input": "tiny", "context_management": manage}
    ).json()
    assert [i["type"] for i in small["output"]] == ["message"]  # under the threshold

    events = []
    with client.responses.stream(
        model="echo", input=history, extra_body={"context_management": manage}
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [(e.type, getattr(getattr(e, "item", None), "type", None)) for e in events]
    assert kinds[2] == ("response.output_item.added", "compaction")
    assert ("response.output_item.done", "compaction") in kinds
    done = next(e for e in events if e.type == "response.output_item.done" and e.output_index == 0)
    assert final.output[0].type == "compaction"
    assert done.item.encrypted_content == final.output[0].encrypted_content

    chained = [*history, *made["output"], {"role": "user", "content": "and then?"}]
    followed = http.post("/v1/responses", json={"model": "echo", "input": chained}).json()
    shown = json.loads(
        run_cli(server.home, "sessions", "show", followed["conversation"]["id"], "--json").stdout
    )
    state = shown["compression_state"]
    assert state["summary"]
    kept = [m["content"] for m in shown["messages"][state["covered"] :]]
    assert kept[0] == "now" and kept[-2:] == ["and then?"] * 2


def test_truncation_disabled_refuses_what_does_not_fit(start_server):
    from openai import BadRequestError, OpenAI

    server = start_server(env={"FOLIKO_CONTEXT_WINDOW": "400"})
    client = OpenAI(base_url=server.base_url, api_key="none", max_retries=0)
    conversation = client.conversations.create()
    stored = 0
    for number in range(8):
        try:
            client.responses.create(
                model="echo",
                input=f"turn {number} " + "w " * 150,
                conversation=conversation.id,
                truncation="disabled",
            )
        except BadRequestError as refused:
            assert refused.code == "context_length_exceeded"
            break
        stored += 2
    else:
        pytest.fail("a history eight times the window was never refused")
    assert stored >= 2
    assert len(client.conversations.items.list(conversation.id, limit=100).data) == stored
    fits = client.responses.create(
        model="echo", input="one more", conversation=conversation.id, truncation="auto"
    )
    assert fits.output_text == "one more" and fits.truncation == "auto"


def test_a_retrieved_response_echoes_what_was_asked(client):
    tools = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]
    made = client.responses.create(
        model="echo",
        input="hello",
        instructions="Be brief.",
        metadata={"ticket": "42"},
        temperature=0.25,
        max_output_tokens=64,
        tools=tools,
        truncation="disabled",
    )
    again = client.responses.retrieve(made.id)
    for response in (made, again):
        assert response.metadata == {"ticket": "42"}
        assert response.instructions == "Be brief."
        assert (response.temperature, response.max_output_tokens) == (0.25, 64)
        assert [t.name for t in response.tools] == ["f"] and response.tools[0].strict
        assert response.truncation == "disabled"
    follow = client.responses.create(model="echo", input="more", previous_response_id=made.id)
    assert client.responses.retrieve(follow.id).previous_response_id == made.id
    assert client.responses.retrieve(follow.id).metadata == {}
