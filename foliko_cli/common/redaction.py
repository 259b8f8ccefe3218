"""URLs as foliko shows them: credentials and token-like query values hidden.

A password may sit in the user part (``user:secret@host``, ``@`` and all:
the host starts after the last ``@``), a token may be the whole user part of
a web URL (``https://TOKEN@host``), and a query may carry ``?password=``,
``?token=``, ``?api_key=``, ``?sig=`` and the like. ``redact_url`` hides all
of them; every place that shows a URL (``config show``, storage locations,
model base URLs, MCP servers, errors) goes through it.

``scrub`` hides secrets (an MCP server's client secret and tokens) in text a
server sent back, in every form it may take there: raw, URL-encoded,
JSON-escaped, and as HTTP Basic credentials.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
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


# secrets in text


def secret_forms(secret: str) -> set[str]:
    """How ``secret`` may appear in text someone echoes back: as it is,
    URL-encoded (``%2F`` and form style) and JSON-escaped."""
    import json
    from urllib.parse import quote, quote_plus

    forms = {
        secret,
        quote(secret, safe=""),
        quote_plus(secret),
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
    }
    return {form for form in forms if form}


def basic_credentials(user: str, secret: str) -> set[str]:
    """The HTTP Basic credentials of ``user`` and ``secret`` (RFC 7617), plain and
    with both form-encoded first (OAuth's client_secret_basic, RFC 6749 §2.3.1),
    in base64 and base64url, with and without padding."""
    import base64
    from urllib.parse import quote, quote_plus

    pairs = {
        f"{user}:{secret}",
        f"{quote(user, safe='')}:{quote(secret, safe='')}",
        f"{quote_plus(user)}:{quote_plus(secret)}",
    }
    found = set()
    for pair in pairs:
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            text = encode(pair.encode()).decode()
            found |= {text, text.rstrip("=")}
    return found


_REMEMBERED: set[str] = set()


def remember_secrets(secrets: Iterable[str | None]) -> None:
    """Secrets this process sends somewhere: ``scrub`` hides them always (and
    with it the MCP loggers' filter, ``mcp/logs.py``)."""
    _REMEMBERED.update(secret for secret in secrets if secret)


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with each secret (and the ones remembered) hidden in every form
    ``secret_forms`` knows, longest first."""
    forms = {form for secret in {*secrets, *_REMEMBERED} if secret for form in secret_forms(secret)}
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, HIDDEN)
    return text


def remembered() -> bool:
    return bool(_REMEMBERED)
