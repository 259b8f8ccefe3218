"""The name a model sees for a server's tool: ``SERVER__TOOL``.

Providers accept tool names of at most 64 characters matching
``^[a-zA-Z0-9_-]+$``. A name that does not fit is rewritten
deterministically: other characters become ``_``, the name is cut, and a
hash of the original keeps two rewritten names apart.
"""

from __future__ import annotations

import re

MAX_LENGTH = 64
SEPARATOR = "__"
_OTHER = r"[^a-zA-Z0-9_-]"
_HASH_LENGTH = 8


def exposed_name(server: str, tool: str) -> str:
    name = f"{server}{SEPARATOR}{tool}"
    if len(name) <= MAX_LENGTH and _allowed(name):
        return name
    import hashlib

    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:_HASH_LENGTH]
    stem = re.sub(_OTHER, "_", name)[: MAX_LENGTH - _HASH_LENGTH - 1]
    return f"{stem}_{digest}"


def _allowed(name: str) -> bool:
    """``^[a-zA-Z0-9_-]+$`` without a regular expression (start-up, P1)."""
    return name.isascii() and name.replace("_", "a").replace("-", "a").isalnum()
