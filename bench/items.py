"""ITEMS: a conversation's items over ``foliko serve`` as its history grows.

One ``foliko serve`` (echo, SQLite, one worker) over a home holding two
conversations, of 10 and of 100,000 messages (``--quick``: 10 and 2,000).
One client (httpx2, keep-alive) sends each request below 30 times on each
conversation, the two alternating: the newest page (``GET …/items?limit=20``,
what the Agents SDK's session memory asks for), a page after an item in the
middle (``order=asc&after=…``, what a client paging through asks for), one
item (``GET …/items/{id}``), adding one item (``POST …/items``), and a turn
continuing the latest response (``previous_response_id``, on a conversation of
the same length compacted but for its last 10 messages), and getting that
chain's latest response (``GET /v1/responses/{id}``). The figure
is each request's median at the long conversation, and its ratio to the same
request at the short one: a read or a turn ≤ 1.5×. Adding an item
reads the session's state, whose integrity check counts the positions of every
message a turn would send (all of an uncompressed history): reported.
``ITEMS_BASELINE=DIR``: the server runs the tree in DIR (``git archive COMMIT
foliko_cli | tar -x -C DIR``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from common import (
    PYTHON,
    Result,
    Workspace,
    failed,
    log,
    main_single,
    make_record,
    save_records,
    start_server,
    stop_server,
    storage_url,
)

SIZES = {"short": 10, "long": 100_000}
QUICK_SIZES = {"short": 10, "long": 2_000}
RUNS = 30
BASELINE_ENV = "ITEMS_BASELINE"
TARGET = 1.5


Request = Callable[[Any], Any]
"""One request of a figure: sends it with the client given, returns the answer."""


def _requests(conversation: str, messages: int) -> dict[str, Request]:
    from foliko_cli.serve.ids import message_item_id, scope_of

    items = f"/v1/conversations/{conversation}/items"
    middle = message_item_id(scope_of(conversation), messages // 2)
    added = {"items": [{"type": "message", "role": "user", "content": "one more"}]}
    latest: list[str] = []

    def continued(http: Any) -> Any:
        """A turn continuing the chain's latest response (on a conversation of its own,
        compacted but for its last 10 messages, whose first turn starts the chain)."""
        if latest:
            body = {"previous_response_id": latest[-1]}
        else:
            body = {"conversation": conversation + "_chain"}
        answer = http.post("/v1/responses", json={"model": "echo", "input": "next", **body})
        if answer.status_code == 200:
            latest.append(answer.json()["id"])
        return answer

    return {
        "newest page": lambda http: http.get(items + "?limit=20"),
        "page after the middle": lambda http: http.get(
            f"{items}?order=asc&limit=20&after={middle}"
        ),
        "one item": lambda http: http.get(f"{items}/{middle}"),
        "add an item": lambda http: http.post(items, json=added),
        "a turn continuing the latest response": continued,
        "a stored response": lambda http: http.get(f"/v1/responses/{latest[-1]}"),
    }


def _records(sizes: dict[str, int]) -> Iterator[Any]:
    for name, count in sizes.items():
        yield make_record(f"conv_{name}", count)
        chain = make_record(f"conv_{name}_chain", count)
        chain.compression_state = {"summary": "earlier", "covered": max(0, count - 10)}
        yield chain


def run(ws: Workspace, quick: bool = False) -> list[Result]:
    import httpx2 as httpx

    sizes = QUICK_SIZES if quick else SIZES
    home = ws.fresh("items")
    save_records(storage_url("sqlite", home / "sessions.db"), home, _records(sizes))
    env = ws.env(FOLIKO_HOME=str(home), FOLIKO_MODEL="echo", FOLIKO_STORAGE="sqlite")
    if os.environ.get(BASELINE_ENV):
        env["PYTHONPATH"] = os.environ[BASELINE_ENV]
    try:
        proc, url = start_server([PYTHON, "-m", "foliko_cli", "serve", "--port", "0"], env)
    except Exception as exc:
        return [failed("ITEMS", "a conversation's items", "s", f"≤ {TARGET}×", exc)]
    timings: dict[tuple[str, str], list[float]] = {}
    try:
        with httpx.Client(base_url=url, timeout=120) as http:
            plans = {name: _requests(f"conv_{name}", count) for name, count in sizes.items()}
            for plan in plans.values():
                plan["a turn continuing the latest response"](http)  # starts the chain
            for _ in range(RUNS):
                for name, plan in plans.items():
                    for what, send in plan.items():
                        began = time.perf_counter()
                        answer = send(http)
                        timings.setdefault((what, name), []).append(time.perf_counter() - began)
                        if answer.status_code != 200:
                            raise RuntimeError(f"{what}: HTTP {answer.status_code} {answer.text}")
    except Exception as exc:
        return [failed("ITEMS", "a conversation's items", "s", f"≤ {TARGET}×", exc)]
    finally:
        stop_server(proc)
    results = []
    long = sizes["long"]
    for what in _requests("x", 2):
        reads = what != "add an item"
        target = f"≤ {TARGET}× @10" if reads else ""
        result = Result("ITEMS", f"{what}, {long:,} messages", "s", target=target)
        result.runs = timings[(what, "long")]
        short = Result("ITEMS", what, "s", runs=timings[(what, "short")])
        assert result.median is not None and short.median
        result.ratio = result.median / short.median
        result.ratio_label = "@10"
        # adding reads the session's state, whose check counts the positions of every
        # message a turn would send (storage/base.py): reported
        result.met = result.ratio <= TARGET if reads else None
        shown = f"{1000 * short.median:.2f} ms @10, {1000 * result.median:.2f} ms @{long}"
        log(f"ITEMS: {what}: {shown}")
        results.append(result)
    return results


if __name__ == "__main__":
    sys.path.insert(0, ".")
    main_single(run, __doc__)
