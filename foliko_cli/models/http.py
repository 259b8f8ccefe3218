"""HTTP for remote providers: retries, error messages, server-sent events.

httpx is imported here only, and this module only when a remote model runs.
429 and 5xx answers and connection failures are retried with exponential
backoff and full jitter, honouring ``Retry-After``, never past the turn's
deadline. Other 4xx answers fail at once with a message naming the provider
and the fix. The API key never appears in a message.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import random
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson

from foliko_cli.errors import ModelError

NEVER_RETRIED = frozenset({501, 505})
MAX_ATTEMPTS = 6
BASE_DELAY = 0.5
MAX_DELAY = 20.0


def retry_after(response: httpx.Response) -> float | None:
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


class HttpModelClient:
    """One provider endpoint: ``label`` names it in errors, ``key_hint`` the key's source."""

    def __init__(
        self,
        label: str,
        base_url: str,
        headers: dict[str, str],
        *,
        key_hint: str | None,
        secret: str | None,
    ):
        self.label = label
        self.base_url, self._auth = _split_credentials(base_url.rstrip("/"))
        self.headers = headers
        self.key_hint = key_hint
        self._secrets = [s for s in (secret, self._auth and self._auth[1]) if s]

    def _clean(self, text: str) -> str:
        text = " ".join(text.split())
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text[:300]

    def _status_error(self, response: httpx.Response, body: bytes) -> ModelError:
        detail = self._clean(_error_detail(body))
        status = response.status_code
        where = f"{self.label} at {self.base_url}"
        if status == 401:
            fix = f"check {self.key_hint}" if self.key_hint else "check the API key"
            return ModelError(f"{where} rejected the API key (401: {detail}); {fix}")
        if status == 403:
            return ModelError(
                f"{where} refused the request (403: {detail}); "
                "check the key's permissions and the model's access"
            )
        if status == 404:
            return ModelError(
                f"{where} does not know this model or endpoint (404: {detail}); "
                "check the model name and the base URL"
            )
        if retryable(status):
            return ModelError(
                f"{where} kept failing ({status}: {detail}); try again later or raise --timeout"
            )
        return ModelError(
            f"{where} rejected the request ({status}: {detail}); check the model's options"
        )

    @contextlib.asynccontextmanager
    async def _response(
        self, path: str, body: dict[str, Any], deadline: float
    ) -> AsyncIterator[httpx.Response]:
        url = self.base_url + path
        payload = orjson.dumps(body)
        attempt = 0
        async with httpx.AsyncClient(auth=self._auth) as client:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ModelError(
                        f"{self.label} at {self.base_url} did not answer in time; raise --timeout"
                    )
                request = client.build_request(
                    "POST",
                    url,
                    content=payload,
                    headers=self.headers,
                    timeout=httpx.Timeout(remaining),
                )
                delay = None
                try:
                    response = await client.send(request, stream=True)
                except httpx.TransportError as exc:
                    failure = ModelError(
                        f"cannot reach {self.label} at {self.base_url} "
                        f"({type(exc).__name__}: {self._clean(str(exc)) or 'no detail'}); "
                        "is the server running and the base URL right?"
                    )
                    delay = backoff(attempt)
                else:
                    if response.status_code < 400:
                        try:
                            yield response
                        finally:
                            await response.aclose()
                        return
                    body_bytes = await response.aread()
                    await response.aclose()
                    failure = self._status_error(response, body_bytes)
                    if retryable(response.status_code):
                        hinted = retry_after(response)
                        delay = hinted if hinted is not None else backoff(attempt)
                attempt += 1
                if delay is None or attempt >= MAX_ATTEMPTS or time.monotonic() + delay >= deadline:
                    raise failure
                await asyncio.sleep(delay)

    async def post_json(self, path: str, body: dict[str, Any], deadline: float) -> Any:
        async with self._response(path, body, deadline) as response:
            try:
                data = await response.aread()
            except httpx.HTTPError:
                raise self.cut_off() from None
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            raise ModelError(
                f"{self.label} at {self.base_url} answered with something that "
                "is not JSON; check the base URL"
            ) from None

    async def events(
        self, path: str, body: dict[str, Any], deadline: float
    ) -> AsyncIterator[tuple[str, Any]]:
        """Server-sent events as (event name, parsed data); ``[DONE]`` ends the stream."""
        async with self._response(path, body, deadline) as response:
            async for item in self._parse_events(response):
                yield item

    async def _parse_events(self, response: httpx.Response) -> AsyncIterator[tuple[str, Any]]:
        event, data_lines = "message", []
        lines = response.aiter_lines()
        while True:
            try:
                line = await anext(lines)
            except StopAsyncIteration:
                return
            except httpx.HTTPError:
                raise self.cut_off() from None
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

    def cut_off(self) -> ModelError:
        return ModelError(
            f"the stream from {self.label} at {self.base_url} ended before the "
            "reply was complete; the turn was not saved: try again"
        )


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
