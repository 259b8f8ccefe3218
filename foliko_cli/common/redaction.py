"""URLs as foliko shows them: credentials and token-like query values hidden.

A password may sit in the user part (``user:secret@host``, ``@`` and all:
the host starts after the last ``@``), a token may be the whole user part of
a web URL (``https://TOKEN@host``), and a query may carry ``?password=``,
``?token=``, ``?api_key=``, ``?sig=`` and the like. ``redact_url`` hides all
of them; every place that shows a URL (``config show``, storage locations,
model base URLs, MCP servers, errors) goes through it.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

HIDDEN = "***"
SECRET_PARAMETER = re.compile(
    r"pass|pwd|token|secret|key|sig|auth|credential|cookie|session|jwt|bearer", re.IGNORECASE
)
_WEB_SCHEMES = frozenset({"http", "https", "ws", "wss"})


def redact_url(spec: str) -> str:
    """``spec`` with every credential replaced by ***; text that is not a URL is kept."""
    scheme, sep, rest = spec.partition("://")
    if not sep:
        return spec
    end = min((at for at in map(rest.find, "/?#") if at != -1), default=len(rest))
    netloc, tail = rest[:end], rest[end:]
    userinfo, at, hostport = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.partition(':')[0]}:{HIDDEN}@{hostport}"
    elif at and scheme.lower() in _WEB_SCHEMES:
        netloc = f"{HIDDEN}@{hostport}"
    path, qmark, query = tail.partition("?")
    if qmark:
        fragment = ""
        if "#" in query:
            query, fragment = query.split("#", 1)
            fragment = "#" + fragment
        pairs = []
        for pair in query.split("&"):
            key, eq, _ = pair.partition("=")
            secret = eq and SECRET_PARAMETER.search(unquote(key))
            pairs.append(f"{key}={HIDDEN}" if secret else pair)
        tail = f"{path}?{'&'.join(pairs)}{fragment}"
    return f"{scheme}://{netloc}{tail}"
