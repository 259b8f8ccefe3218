"""HTTP for remote providers: one client per provider, retries, errors, server-sent events.

httpx2 is imported here only, and this module only when a remote model runs.
A provider keeps one ``AsyncClient`` (made on first use, on the running event
loop) for every step of every turn, so connections are reused; ``aclose()``
ends it. POSTs to a plain-HTTP server with no proxy in the way (a local
model server, where the client's own CPU is most of a turn's) go through
``http1``'s lighter client instead, with the same retries and errors.
429 and 5xx answers and connection failures are retried with exponential
backoff and full jitter, honouring ``Retry-After``, never past the
turn's deadline; a failure no wait can mend (a host name that does not
resolve, a refused connection to this machine) is tried once more, then
fails. Other 4xx answers fail at once with a message naming the provider and
the fix; a prompt the model's window cannot hold raises
``ContextOverflowError``. The API key never appears in a message.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import errno
import random
import re
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import orjson

from foliko_cli.common.redaction import redact_url
from foliko_cli.errors import (
    ContextOverflowError,
    ImagesRefusedError,
    ModelError,
    ModelRejectedError,
    ModelTimeoutError,
    UsageError,
)
from foliko_cli.models import http1
from foliko_cli.models.base import WIRE, RequestWired

Answer = httpx2.Response | http1.Response
READ_ERRORS = (httpx2.HTTPError, http1.TransportError)
# every wait of a request is bounded by what is left of the turn: one running out is the turn's
TIMEOUTS = (httpx2.TimeoutException, http1.ReadTimeout)
NEVER_RETRIED = frozenset({501, 505})
MAX_ATTEMPTS = 6
_IMAGES_REFUSED = re.compile(r"image.{0,40}(support|mmproj)|(support|vision).{0,40}image", re.I)
BASE_DELAY = 0.5
MAX_DELAY = 20.0
HOPELESS_RETRY_DELAY = 0.2
"""A refused loopback connection or an unknown host name is tried once more after
this (a server may be just starting), then fails: no backoff can mend it."""
_UNKNOWN_NAME = frozenset(
    code for code in (getattr(socket, n, None) for n in ("EAI_NONAME", "EAI_NODATA")) if code
)

# How each server says the prompt is too long: llama.cpp ("exceeds the available
# context size (1024 tokens)"), OpenAI and vLLM ("maximum context length is 8192
# tokens", code context_length_exceeded), Anthropic ("prompt is too long: 210000
# tokens > 200000 maximum"), Ollama ("context length").
_OVERFLOW = re.compile(
    r"context[ _](size|length)|context_length_exceeded|prompt is too long|"
    r"too many tokens|maximum context",
    re.IGNORECASE,
)
_WINDOW_PATTERNS = (
    re.compile(r"context size \((\d+) tokens\)", re.IGNORECASE),
    re.compile(r"maximum context length is (\d+)", re.IGNORECASE),
    re.compile(r"tokens > (\d+) maximum", re.IGNORECASE),
    re.compile(r"context length (?:of|is) (\d+)", re.IGNORECASE),
)


def retry_after(response: Answer) -> float | None:
    """Seconds the server asked us to wait, from ``Retry-After`` (seconds or a date)."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def retryable(status: int) -> bool:
    """429 and the 5xx answers that may pass (Anthropic's 529 "overloaded" too)."""
    return status == 429 or (500 <= status < 600 and status not in NEVER_RETRIED)


def backoff(attempt: int) -> float:
    return random.uniform(0, min(MAX_DELAY, BASE_DELAY * 2**attempt))


def overflow_window(status: int, body: bytes) -> tuple[bool, int | None]:
    """Whether an error answer says the prompt is too long, and the window it names."""
    if status not in (400, 413, 422):
        return False, None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    error = data.get("error", data) if isinstance(data, dict) else None
    if isinstance(error, dict):
        if isinstance(error.get("n_ctx"), int):
            return True, error["n_ctx"]
        if error.get("code") == "context_length_exceeded":
            text = str(error.get("message", ""))
            return True, _named_window(text)
    text = _error_detail(body)
    if not _OVERFLOW.search(text):
        return False, None
    return True, _named_window(text)


def _named_window(text: str) -> int | None:
    for pattern in _WINDOW_PATTERNS:
        found = pattern.search(text)
        if found:
            return int(found.group(1))
    return None


class HttpModelClient:
    """One provider endpoint: ``label`` names it in errors, ``key_hint`` the key's source.

    ``transport`` replaces the network (tests pass an ``httpx2.MockTransport``).
    """

    def __init__(
        self,
        label: str,
        base_url: str,
        headers: dict[str, str],
        *,
        key_hint: str | None,
        secret: str | None,
        transport: Any = None,
    ):
        self.label = label
        self.base_url, self._auth = _split_credentials(base_url.rstrip("/"))
        self.headers = headers
        self.key_hint = key_hint
        self._secrets = [s for s in (secret, self._auth and self._auth[1]) if s]
        self._transport = transport
        self._client: httpx2.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._urls: dict[str, httpx2.URL] = {}
        self._endpoints: dict[str, http1.Endpoint | None] = {}
        self._pool: http1.Pool | None = None
        self._pool_loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def for_spec(
        cls, spec: Any, headers: dict[str, str], key: str | None, transport: Any = None
    ) -> HttpModelClient:
        """The client for a ``models.ModelSpec``: its provider, base URL and key."""
        return cls(
            spec.provider,
            spec.base_url,
            headers,
            key_hint=spec.key_hint,
            secret=key,
            transport=transport,
        )

    @property
    def where(self) -> str:
        return f"{self.label} at {redact_url(self.base_url)}"

    def client(self) -> httpx2.AsyncClient:
        """The provider's client, made on first use; a new one on another event loop.
        It carries the provider's headers, so a request merges none of its own."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop or self._client.is_closed:
            self._client = httpx2.AsyncClient(
                auth=self._auth, transport=self._transport, headers=self.headers
            )
            self._loop = loop
        return self._client

    def _endpoint(self, path: str) -> http1.Endpoint | None:
        """Where ``http1`` sends POSTs to ``path``; None when they go through httpx2."""
        if path not in self._endpoints:
            plain = self._transport is None and self._auth is None
            url = self.base_url + path
            self._endpoints[path] = http1.endpoint(url, self.headers) if plain else None
        return self._endpoints[path]

    def _http1(self) -> http1.Pool:
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool_loop is not loop:
            self._pool, self._pool_loop = http1.Pool(), loop
        return self._pool

    def _url(self, path: str) -> httpx2.URL:
        """``base_url + path``, parsed once (a turn's every model call posts to it)."""
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = httpx2.URL(self.base_url + path)
        return url

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None and self._pool_loop is asyncio.get_running_loop():
            pool.close()
        client, self._client = self._client, None
        if client is not None and self._loop is asyncio.get_running_loop():
            await client.aclose()

    def redact(self, text: str) -> str:
        """``text`` on one line, without secrets, at most 300 characters.

        A secret is replaced where it stands alone, not inside a longer word:
        a one-letter key must not turn "unexpected" into "une***pected"."""
        text = " ".join(text.split())
        for secret in self._secrets:
            text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])", "***", text)
        return text[:300]

    def _status_error(self, response: Answer, body: bytes) -> ModelError | ImagesRefusedError:
        detail = self.redact(_error_detail(body))
        status = response.status_code
        where = self.where
        if status == 401:
            fix = f"check {self.key_hint}" if self.key_hint else "check the API key"
            return ModelRejectedError(f"{where} rejected the API key (401: {detail}); {fix}", 401)
        if status == 403:
            return ModelRejectedError(
                f"{where} refused the request (403: {detail}); "
                "check the key's permissions and the model's access",
                403,
            )
        if status == 404:
            return ModelRejectedError(
                f"{where} does not know this model or endpoint (404: {detail}); "
                "check the model name and the base URL",
                404,
            )
        if status >= 400 and _IMAGES_REFUSED.search(detail):
            return ImagesRefusedError(
                f"{where} does not take images ({status}: {detail}); nothing was saved",
                fix="use a vision model (for llama.cpp, give llama-server the model's mmproj file)",
            )
        overflow, window = overflow_window(status, body)
        if overflow:
            return ContextOverflowError(
                f"{where} says the prompt does not fit the model's context window "
                f"({status}: {detail})",
                window=window,
            )
        if retryable(status):
            return ModelError(
                f"{where} kept failing ({status}: {detail}); "
                "try again later or raise the turn's timeout"
            )
        return ModelRejectedError(
            f"{where} rejected the request ({status}: {detail}); check the model's options",
            status,
        )

    @contextlib.asynccontextmanager
    async def _response(
        self, path: str, body: dict[str, Any], deadline: float
    ) -> AsyncIterator[Answer]:
        """The answer to a POST, retried as the module says; closed on leaving,
        which drops the connection mid-stream so the server stops generating."""
        payload = orjson.dumps(body)
        wired = WIRE.get()
        if wired is not None:
            wired.append(self.shown_request(path, payload))
            raise RequestWired
        endpoint = self._endpoint(path)
        attempt = 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self.too_late()
            delay = None
            failure: ModelError | ImagesRefusedError
            try:
                response = await self._post(path, endpoint, payload, remaining)
            except TIMEOUTS:
                raise self.too_late() from None
            except (httpx2.TransportError, http1.TransportError) as exc:
                hopeless = self._hopeless(exc)
                if hopeless is None:
                    failure = ModelError(
                        f"cannot reach {self.where} "
                        f"({type(exc).__name__}: {self.redact(str(exc)) or 'no detail'}); "
                        "is the server running and the base URL right?"
                    )
                    delay = backoff(attempt)
                else:
                    failure = ModelError(f"cannot reach {self.where}: {hopeless}")
                    delay = HOPELESS_RETRY_DELAY if attempt == 0 else None
            else:
                if response.status_code < 400:
                    try:
                        yield response
                    finally:
                        await response.aclose()
                    return
                try:
                    body_bytes = await response.aread()
                except READ_ERRORS:
                    body_bytes = b""
                finally:
                    await response.aclose()
                failure = self._status_error(response, body_bytes)
                if retryable(response.status_code) and not isinstance(failure, UsageError):
                    hinted = retry_after(response)
                    delay = hinted if hinted is not None else backoff(attempt)
            attempt += 1
            if delay is None or attempt >= MAX_ATTEMPTS or time.monotonic() + delay >= deadline:
                raise failure
            await asyncio.sleep(delay)

    def _hopeless(self, exc: BaseException) -> str | None:
        """Why no retry within the turn can mend this connection failure, with the
        fix, or None: the host name does not resolve, or a server on this machine
        refuses the connection (nothing listens there)."""
        seen: set[int] = set()
        current: BaseException | None = exc
        while current is not None and id(current) not in seen:
            exc = current
            seen.add(id(exc))
            if isinstance(exc, socket.gaierror) and exc.errno in _UNKNOWN_NAME:
                return f"its host name does not resolve ({self.redact(str(exc))}); fix the base URL"
            if _refused(exc) and is_loopback(self.base_url):
                return (
                    "the connection was refused, nothing listens there; "
                    "start the server or fix the base URL"
                )
            current = exc.__cause__ or exc.__context__
        return None

    def shown_request(self, path: str, payload: bytes) -> dict[str, Any]:
        """A POST of ``payload`` to ``path`` as the server gets it, secrets as ***."""
        headers = {name: self.redact(value) for name, value in self.headers.items()}
        if self._auth is not None:
            headers["authorization"] = "Basic ***"
        return {
            "method": "POST",
            "url": redact_url(self.base_url + path),
            "headers": headers,
            "body": orjson.loads(payload),
        }

    async def _post(
        self, path: str, endpoint: http1.Endpoint | None, payload: bytes, timeout: float
    ) -> Answer:
        """One attempt: the answer once its headers are in, its body still to read."""
        if endpoint is not None:
            return await self._http1().post(endpoint, payload, timeout)
        client = self.client()
        request = client.build_request(
            "POST", self._url(path), content=payload, timeout=httpx2.Timeout(timeout)
        )
        return await client.send(request, stream=True)

    async def post_json(self, path: str, body: dict[str, Any], deadline: float) -> Any:
        async with self._response(path, body, deadline) as response:
            try:
                data = await response.aread()
            except READ_ERRORS as exc:
                raise self.cut_off(exc) from None
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            raise ModelError(
                f"{self.where} answered with something that is not JSON; check the base URL"
            ) from None

    async def get_json(self, url: str, timeout: float, *, body: Any = None) -> Any:
        """One quick request for metadata (GET, or POST with ``body``): no retries.

        Raises ``httpx2.HTTPError`` or ``ValueError``; callers that only probe
        catch both.
        """
        client = self.client()
        if body is None:
            response = await client.get(url, timeout=timeout)
        else:
            response = await client.post(url, content=orjson.dumps(body), timeout=timeout)
        response.raise_for_status()
        return orjson.loads(response.content)

    @staticmethod
    def status_errors() -> tuple[type[Exception], ...]:
        """What ``get_json`` raises for an error status or a body that is not JSON."""
        return (httpx2.HTTPStatusError, orjson.JSONDecodeError)

    async def events(
        self, path: str, body: dict[str, Any], deadline: float
    ) -> AsyncIterator[tuple[str, Any]]:
        """Server-sent events as (event name, parsed data); ``[DONE]`` ends the stream."""
        async with self._response(path, body, deadline) as response:
            async for item in self._parse_events(response):
                yield item

    async def _parse_events(self, response: Answer) -> AsyncIterator[tuple[str, Any]]:
        event, data_lines = "message", []
        lines = response.aiter_lines()
        while True:
            try:
                line = await anext(lines)
            except StopAsyncIteration:
                return
            except READ_ERRORS as exc:
                raise self.cut_off(exc) from None
            if line.startswith(":"):
                continue
            if line:
                name, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if name == "event":
                    event = value
                elif name == "data":
                    data_lines.append(value)
                continue
            if data_lines:
                data = "\n".join(data_lines)
                if data.strip() == "[DONE]":
                    yield event, None
                    return
                yield event, self._parse_event_data(data)
            event, data_lines = "message", []

    def _parse_event_data(self, data: str) -> Any:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            raise ModelError(
                f"{self.label} sent a stream event that is not JSON; check the base URL"
            ) from None

    def too_late(self) -> ModelTimeoutError:
        return ModelTimeoutError(f"{self.where} did not answer in time; raise the turn's timeout")

    def cut_off(self, exc: BaseException | None = None) -> ModelError:
        """The reply stopped coming: the turn's time ran out, or the stream broke."""
        if isinstance(exc, TIMEOUTS):
            return self.too_late()
        return ModelError(
            f"the stream from {self.where} ended before the "
            "reply was complete; the turn was not saved: try again"
        )


def _refused(exc: BaseException) -> bool:
    """A refused connection; asyncio reports every address of a name refusing
    (``localhost``: ::1 and 127.0.0.1) as one OSError holding their messages."""
    if isinstance(exc, ConnectionRefusedError):
        return True
    codes = re.findall(r"\[Errno (-?\d+)\]", str(exc)) if type(exc) is OSError else []
    return bool(codes) and all(int(code) == errno.ECONNREFUSED for code in codes)


def is_loopback(url: str) -> bool:
    """Whether ``url``'s host is this machine (localhost, 127.0.0.0/8, ::1)."""
    import ipaddress
    from urllib.parse import urlsplit

    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``http://user:pw@host/v1`` -> (``http://host/v1``, (user, pw)): no password in URLs."""
    from urllib.parse import unquote, urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.netloc.rpartition("@")[2]
    plain = urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return plain, (unquote(parts.username or ""), unquote(parts.password or ""))


def _error_detail(body: bytes) -> str:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", errors="replace") or "no detail"
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict):
            return str(error.get("message") or error)
        return str(error)
    return str(data)
