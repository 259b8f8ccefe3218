"""GET /metrics: Prometheus's text format (0.0.4), counters that move with
requests and turns, the streams gauge, the per-user services gauge, the keys."""

from __future__ import annotations

import math
import re
import threading
import time

import httpx2 as httpx
from models.fake_servers import OPENAI_KEY, Reply, openai_stream_events

from .servers import wait_until

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
KEYS = '[keys]\n"key-alice" = "alice"\n"key-bob" = "bob"\n'
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}
NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"'
FLOAT = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?Inf|NaN"
SAMPLE = re.compile(
    rf"(?P<name>{NAME})(?:\{{(?P<labels>(?:{LABEL},)*(?:{LABEL})?)\}})?"
    rf" (?P<value>{FLOAT})(?: -?\d+)?"
)
DESCRIPTOR = re.compile(rf"# (HELP|TYPE) ({NAME}) ?(.*)")
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "counter": ("",), "gauge": ("",)}


def _unescaped(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], value)


def parse(text: str) -> dict[tuple[str, frozenset], float]:
    """The samples of an exposition, checked line by line against the format:
    each is a comment or ``name{labels} value``; every family has one TYPE
    line before its samples; no series twice; histograms are cumulative and
    end in +Inf equal to _count."""
    assert text.endswith("\n")
    types: dict[str, str] = {}
    helps: set[str] = set()
    samples: dict[tuple[str, frozenset], float] = {}
    for line in text[:-1].split("\n"):
        if line.startswith("#"):
            descriptor = DESCRIPTOR.fullmatch(line)
            if descriptor is None:
                continue  # a plain comment
            kind, name, rest = descriptor.groups()
            if kind == "TYPE":
                assert rest in TYPES and name not in types, line
                assert not any(family(s, types) == name for s, _ in samples), line
                types[name] = rest
            else:
                assert name not in helps and rest, line
                helps.add(name)
            continue
        sample = SAMPLE.fullmatch(line)
        assert sample is not None, f"not a sample line: {line!r}"
        name, labels, value = sample["name"], sample["labels"] or "", sample["value"]
        pairs = [(key, _unescaped(v)) for key, v in re.findall(LABEL, labels)]
        assert len({key for key, _ in pairs}) == len(pairs), line
        assert family(name, types) is not None, f"no TYPE before {line!r}"
        key = (name, frozenset(pairs))
        assert key not in samples, f"twice: {line!r}"
        samples[key] = float(value)
    for name, kind in types.items():
        assert name in helps
        if kind == "histogram":
            check_histograms(name, samples)
    return samples


def family(sample: str, types: dict[str, str]) -> str | None:
    for name, kind in types.items():
        if any(sample == name + suffix for suffix in SUFFIXES.get(kind, ("",))):
            return name
    return None


def check_histograms(name: str, samples: dict) -> None:
    series: dict[frozenset, list[tuple[float, float]]] = {}
    for (sample, labels), value in samples.items():
        if sample == name + "_bucket":
            bound = dict(labels)["le"]
            rest = frozenset(pair for pair in labels if pair[0] != "le")
            series.setdefault(rest, []).append((float(bound), value))
    assert series, f"{name} has no buckets"
    for labels, buckets in series.items():
        counts = [count for _, count in sorted(buckets)]
        assert counts == sorted(counts), f"{name} {labels} is not cumulative"
        assert sorted(buckets)[-1][0] == math.inf
        assert counts[-1] == samples[(name + "_count", labels)]
        assert (name + "_sum", labels) in samples


def scrape(http, **headers: str) -> dict[tuple[str, frozenset], float]:
    answer = http.get("/metrics", headers=headers)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == CONTENT_TYPE
    return parse(answer.text)


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def requests(samples: dict, route: str, method: str, status: str) -> float:
    return value(samples, "foliko_http_requests_total", route=route, method=method, status=status)


def turns(samples: dict, api: str) -> float:
    return value(samples, "foliko_turn_duration_seconds_count", api=api)


def tokens(samples: dict) -> tuple[float, float]:
    return tuple(value(samples, "foliko_tokens_total", direction=d) for d in ("input", "output"))


def test_requests_are_counted_by_route_method_and_status(http):
    before = scrape(http)
    for _ in range(3):
        assert http.get("/healthz").status_code == 200
    assert http.get("/v1/sessions/no-such-session").status_code == 404
    assert http.get("/no/such/route").status_code == 404
    assert http.post("/healthz").status_code == 405
    after = scrape(http)

    def moved(route: str, method: str, status: str) -> float:
        return requests(after, route, method, status) - requests(before, route, method, status)

    assert moved("/healthz", "GET", "200") == 3
    assert moved("/v1/sessions/{session_id}", "GET", "404") == 1
    assert moved("-", "GET", "404") == 1
    assert moved("/healthz", "POST", "405") == 1
    assert moved("/metrics", "GET", "200") == 1  # the first scrape, counted when it ended
    assert value(after, "foliko_user_services_cached") == 0


def test_turns_show_in_the_histogram_by_api_and_in_the_tokens(http, client):
    before = scrape(http)
    chat = client.chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "one two three"}]
    )
    with client.responses.stream(model="echo", input="four five") as stream:
        streamed = stream.get_final_response()
    with client.responses.connect() as connection:
        connection.response.create(model="echo", input="six seven eight nine")
        over_socket = next(
            event.response for event in connection if event.type == "response.completed"
        )
    after = scrape(http)

    assert turns(after, "chat") - turns(before, "chat") == 1
    assert turns(after, "responses") - turns(before, "responses") == 1
    assert turns(after, "websocket") - turns(before, "websocket") == 1
    handshakes = requests(after, "/v1/responses", "GET", "101")
    assert handshakes - requests(before, "/v1/responses", "GET", "101") == 1
    spent_in = chat.usage.prompt_tokens + streamed.usage.input_tokens
    spent_out = chat.usage.completion_tokens + streamed.usage.output_tokens
    spent_in += over_socket.usage.input_tokens
    spent_out += over_socket.usage.output_tokens
    assert spent_in > 0 and spent_out > 0
    (in_before, out_before), (in_after, out_after) = tokens(before), tokens(after)
    assert (in_after - in_before, out_after - out_before) == (spent_in, spent_out)
    assert value(after, "foliko_active_streams") == 0


def test_keys_guard_the_metrics_and_users_and_streams_are_gauged(
    start_server, model_server, tmp_path
):
    """With the access log off, requests are still counted."""
    keys = tmp_path / "keys.toml"
    keys.write_text(KEYS)
    keys.chmod(0o600)
    held = threading.Event()
    model_server.queue(
        Reply(events=openai_stream_events(["one", " two"]), stall=held, stall_after=1)
    )
    env = {"OPENAI_BASE_URL": f"{model_server.url}/v1", "OPENAI_API_KEY": OPENAI_KEY}
    server = start_server("--api-keys", str(keys), "--no-access-log", env=env)
    alice = {"Authorization": "Bearer key-alice"}
    with httpx.Client(base_url=server.url, timeout=30) as http:
        assert http.get("/metrics").status_code == 401
        wrong = http.get("/metrics", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
        assert value(scrape(http, **alice), "foliko_user_services_cached") == 0

        body = {
            "model": "openai:some-model",
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        }
        with http.stream("POST", "/v1/chat/completions", json=body, headers=alice) as response:
            assert response.status_code == 200
            lines = response.iter_lines()
            assert next(lines).startswith("data: ")
            began = time.monotonic()
            assert model_server.wait_for_requests(1)
            during = scrape(http, **alice)
            held_for = time.monotonic() - began  # the turn runs all along
            held.set()
            assert "data: [DONE]" in list(lines)
        assert value(during, "foliko_active_streams") == 1
        assert value(during, "foliko_user_services_cached") == 1
        wait_until(
            lambda: value(scrape(http, **alice), "foliko_active_streams") == 0,
            what="the stream to end",
        )

        bob = {"Authorization": "Bearer key-bob"}
        assert http.get("/v1/conversations/conv_none", headers=bob).status_code == 404
        after = scrape(http, **bob)
        assert value(after, "foliko_user_services_cached") == 2
        assert requests(after, "/metrics", "GET", "401") == 2
        assert turns(after, "chat") == 1
        took = value(after, "foliko_turn_duration_seconds_sum", api="chat")
        assert took >= held_for - 0.001  # a turn's duration is whole milliseconds
        for (name, labels), count in after.items():
            bound = dict(labels).get("le")
            if name == "foliko_turn_duration_seconds_bucket" and dict(labels)["api"] == "chat":
                assert count == (float(bound) >= took), (bound, took)
