"""Server storage URLs (PostgreSQL, Redis): one parser, and the redactor of
foliko_cli/common/redaction.py that every URL foliko shows (``storage.shown``,
``location``, ``info()``, every error) goes through.
"""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from foliko_cli.common.redaction import HIDDEN, redact_url
from foliko_cli.errors import StorageConfigError

redact = redact_url


class ServerURL(NamedTuple):
    """A parsed server URL. ``options`` are the query pairs foliko itself reads
    (removed from ``query``, which goes to the driver)."""

    scheme: str
    user: str | None
    password: str | None
    host: str
    port: int
    path: str
    query: list[tuple[str, str]]
    options: dict[str, str]

    @property
    def where(self) -> str:
        """``host:port``, an IPv6 address in brackets."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def driver_url(self, scheme: str | None = None) -> str:
        """The URL for the driver: credentials kept, foliko's own options removed."""
        netloc = ""
        if self.user is not None or self.password is not None:
            netloc = quote(self.user or "", safe="")
            if self.password is not None:
                netloc += ":" + quote(self.password, safe="")
            netloc += "@"
        host = f"[{self.host}]" if ":" in self.host else self.host
        netloc += f"{host}:{self.port}"
        query = urlencode(self.query, quote_via=quote)  # libpq reads no + as a space
        return urlunsplit((scheme or self.scheme, netloc, self.path, query, ""))


def parse_server_url(
    spec: str,
    *,
    schemes: tuple[str, ...],
    default_port: int,
    own_options: tuple[str, ...],
    example: str,
) -> ServerURL:
    """Parse ``spec``; a malformed URL, a port outside 1-65535 or an empty value of
    one of ``own_options`` is a StorageConfigError (exit 2) naming ``example``."""
    try:
        parts = urlsplit(spec)
        port = parts.port
    except ValueError as exc:
        raise StorageConfigError(
            f"malformed storage URL {redact(spec)!r}: {exc}; write {example}"
        ) from None
    scheme = parts.scheme.lower()
    if scheme.split("+", 1)[0] not in schemes:
        raise StorageConfigError(f"not a {schemes[0]} URL: {redact(spec)!r}; write {example}")
    if port is not None and not 0 < port < 65536:
        raise StorageConfigError(
            f"invalid port {port} in {redact(spec)!r}; ports are 1-65535: write {example}"
        )
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    options: dict[str, str] = {}
    query = []
    for key, value in pairs:
        if key in own_options:
            if not value.strip():
                raise StorageConfigError(
                    f"empty {key}= in {redact(spec)!r}; give a value or leave it out"
                )
            options[key] = value
        else:
            query.append((key, value))
    password = unquote(parts.password) if parts.password is not None else None
    if password is None:
        password = next((v for k, v in query if k == "password"), None)
    return ServerURL(
        scheme=scheme,
        user=unquote(parts.username) if parts.username else None,
        password=password,
        host=parts.hostname or "localhost",
        port=port or default_port,
        path=parts.path,
        query=query,
        options=options,
    )


def hide(text: str, secret: str | None) -> str:
    """``text`` (a driver's message) with ``secret`` replaced by ***."""
    return text.replace(secret, HIDDEN) if secret else text
