"""``GET /metrics``: the worker's counters in Prometheus's text format (0.0.4).

Counting is a dict or integer increment where the facts are already known:
the access log middleware gives each request's route template, method and
status; a turn gives its duration and usage when it finishes. Rendering
happens only on a scrape.

Each worker process counts for itself: with ``--workers N`` a scrape is
answered by whichever worker takes the connection and shows that worker's
counts only (see docs/serve.md).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from foliko_cli.messages.usage import spent_tokens
from foliko_cli.serve.access_log import route_template

if TYPE_CHECKING:
    from foliko_cli.service.values import TurnResult

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
APIS = ("responses", "chat", "websocket", "mcp", "sessions")
TURN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class Histogram:
    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(TURN_BUCKETS) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(TURN_BUCKETS, value)] += 1
        self.sum += value


class Metrics:
    """One process's counters. Request keys are (route, method, status) with
    route None when no route matched and status None when none was sent."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str | None, str, int | None], int] = {}
        self.turns = {api: Histogram() for api in APIS}
        self.tokens = {"input": 0, "output": 0}
        self.streams = 0

    def request(self, scope: dict[str, Any], status: int | None) -> None:
        method = scope.get("method", "GET")  # a WebSocket session's handshake
        key = (route_template(scope)[0], method if method in _METHODS else "other", status)
        requests = self.requests
        requests[key] = requests.get(key, 0) + 1

    def turn(self, api: str, result: TurnResult) -> None:
        self.turns[api].observe(result.duration_ms / 1000)
        spent_in, spent_out = spent_tokens(result.usage)
        self.tokens["input"] += spent_in
        self.tokens["output"] += spent_out

    def render(self, user_services: int) -> str:
        lines = [
            "# HELP foliko_http_requests_total HTTP requests answered, by route template"
            " (- when none matched), method and status (- when none was sent).",
            "# TYPE foliko_http_requests_total counter",
        ]
        for (route, method, status), count in sorted(
            self.requests.items(), key=lambda item: tuple(str(part) for part in item[0])
        ):
            labels = _labels(
                route="-" if route is None else route,
                method=method,
                status="-" if status is None else str(status),
            )
            lines.append(f"foliko_http_requests_total{labels} {count}")
        lines += [
            "# HELP foliko_turn_duration_seconds Turns finished, by the API that ran them.",
            "# TYPE foliko_turn_duration_seconds histogram",
        ]
        for api, histogram in self.turns.items():
            cumulative = 0
            bounds: tuple[float | str, ...] = (*TURN_BUCKETS, "+Inf")
            for bound, count in zip(bounds, histogram.counts, strict=True):
                cumulative += count
                le = bound if isinstance(bound, str) else repr(float(bound))
                lines.append(
                    f"foliko_turn_duration_seconds_bucket{_labels(api=api, le=le)} {cumulative}"
                )
            lines.append(f"foliko_turn_duration_seconds_sum{_labels(api=api)} {histogram.sum!r}")
            lines.append(f"foliko_turn_duration_seconds_count{_labels(api=api)} {cumulative}")
        lines += [
            "# HELP foliko_tokens_total Model tokens of finished turns.",
            "# TYPE foliko_tokens_total counter",
            *(
                f"foliko_tokens_total{_labels(direction=direction)} {count}"
                for direction, count in self.tokens.items()
            ),
            "# HELP foliko_active_streams Streamed turns (SSE or WebSocket) sending now.",
            "# TYPE foliko_active_streams gauge",
            f"foliko_active_streams {self.streams}",
            "# HELP foliko_user_services_cached Per-user services this worker holds.",
            "# TYPE foliko_user_services_cached gauge",
            f"foliko_user_services_cached {user_services}",
        ]
        return "\n".join(lines) + "\n"


def _labels(**labels: str) -> str:
    pairs = ",".join(f'{name}="{_escaped(value)}"' for name, value in labels.items())
    return "{" + pairs + "}"


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


METRICS = Metrics()


async def metrics(request: Request) -> Response:
    services = request.app.state.services
    return Response(METRICS.render(len(services.users)), media_type=CONTENT_TYPE)
