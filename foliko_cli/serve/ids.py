"""The ids ``foliko serve`` hands out, and reading them back.

Every id is derived from what is stored, so it is the same on every read,
on every worker and after a restart or a migration, and nothing else has to
be kept. A stored session's *scope* is its id in unpadded base64url; an item
or response id carries its session's scope, so any id can be resolved on its
own (an ``item_reference`` to another conversation's item works). N is a
message's item number (messages/item_numbers.py), which it keeps for its
whole life: deleting, compacting or forking renames no other item.

- ``resp_N_SCOPE``: the turn whose first message is N;
- ``resp_bgR_SCOPE``: a background response: the turn request R writes in
  SCOPE's session (its number is known only once it runs; background.py);
- ``msg_N_SCOPE``: the message N; ``fco_N_SCOPE``: a tool message
  (a function call's output); ``fc_N_K_SCOPE``: the K-th function call of
  the assistant message N; ``cmp_N_SCOPE``: the compaction made for reply N.

What is not stored (``store: false``, a Chat Completion) gets ids in a
scope of its own (``~`` and random hex) that resolve to nothing.
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Any, NamedTuple

from foliko_cli.serve.errors import ApiError

_MAX_DIGITS = 12


def new_conversation_id() -> str:
    return "conv_" + os.urandom(12).hex()


def scope_of(session_id: str) -> str:
    return base64.urlsafe_b64encode(session_id.encode()).decode().rstrip("=")


def unstored_scope() -> str:
    return "~" + os.urandom(8).hex()


def session_of(scope: str) -> str | None:
    """The session a scope names; None for an unstored scope or garbage."""
    if not scope or scope.startswith("~"):
        return None
    try:
        return base64.urlsafe_b64decode((scope + "=" * (-len(scope) % 4)).encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


def _number(text: str) -> int | None:
    return int(text) if text.isdigit() and len(text) <= _MAX_DIGITS else None


# responses


def response_id(scope: str, number: int) -> str:
    return f"resp_{number}_{scope}"


def response_not_found(value: Any) -> ApiError:
    shown = value if isinstance(value, str) and len(value) <= 200 else "(this id)"
    return ApiError(404, f"no response {shown!r}", code="not_found")


def parse_response_id(value: Any) -> tuple[str, int]:
    """(session id, item number) of a stored response; a 404 ApiError for anything else."""
    if isinstance(value, str) and value.startswith("resp_"):
        position, _, scope = value[5:].partition("_")
        number, session_id = _number(position), session_of(scope)
        if number is not None and session_id:
            return session_id, number
    raise response_not_found(value)


def background_response_id(request_id: str, scope: str) -> str:
    return f"resp_bg{request_id}_{scope}"


def parse_background_id(value: Any) -> tuple[str, str] | None:
    """(request id, session id) of a background response id; None for anything else."""
    if isinstance(value, str) and value.startswith("resp_bg"):
        request_id, _, scope = value[7:].partition("_")
        session_id = session_of(scope)
        if request_id.isalnum() and request_id.isascii() and len(request_id) <= 64 and session_id:
            return request_id, session_id
    return None


# items


class ItemRef(NamedTuple):
    kind: str  # "msg", "fc" or "fco"
    session_id: str
    number: int  # the message's item number
    call_index: int  # the call's index for "fc", else 0


def message_item_id(scope: str, number: int, role: str | None = None) -> str:
    return f"{'fco' if role == 'tool' else 'msg'}_{number}_{scope}"


def compaction_item_id(scope: str, number: int) -> str:
    """The compaction recorded on the reply ``number`` (not an item of its
    conversation: it cannot be referred to)."""
    return f"cmp_{number}_{scope}"


def call_item_id(scope: str, number: int, index: int) -> str:
    return f"fc_{number}_{index}_{scope}"


def parse_item_id(value: Any) -> ItemRef | None:
    if not isinstance(value, str):
        return None
    kind, _, rest = value.partition("_")
    if kind not in ("msg", "fc", "fco"):
        return None
    parts = rest.split("_", 2 if kind == "fc" else 1)
    if len(parts) != (3 if kind == "fc" else 2):
        return None
    numbers = [n for part in parts[:-1] if (n := _number(part)) is not None]
    session_id = session_of(parts[-1])
    if len(numbers) != len(parts) - 1 or not session_id:
        return None
    return ItemRef(kind, session_id, numbers[0], numbers[1] if kind == "fc" else 0)
