"""The redirect of a native app's authorization (RFC 8252 §7.3): a listener on
127.0.0.1, on a port the system picks, that takes the one redirect carrying
the code and answers the browser with a short page.

Any process on the machine can reach the port, so a redirect counts only when
its ``state`` is the one of the authorization foliko sent the user to (RFC
6749 §10.12): any other (a code, or an error, of someone else's making) is
answered 400 and ignored, and the listener goes on waiting, until the right
one or the deadline."""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs, urlsplit

CALLBACK_PATH = "/callback"
_PAGE = (
    "<!doctype html><meta charset=utf-8><title>foliko</title>"
    "<p>{text}</p><p>You can close this window.</p>"
)


class AuthorizationDenied(Exception):
    """The authorization server redirected back with an ``error``."""


class Loopback:
    """Open with ``start`` (before the authorization URL is made: it names the
    port), await ``result``, then ``close``."""

    def __init__(self, port: int = 0):
        self.port = port
        self._server: asyncio.Server | None = None
        self._result: asyncio.Future[dict[str, str]] | None = None
        self._state: str | None = None

    def expect(self, authorization_url: str) -> None:
        """Take only the redirect that carries the ``state`` of this authorization URL."""
        states = parse_qs(urlsplit(authorization_url).query).get("state")
        self._state = states[0] if states else None

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self.port}{CALLBACK_PATH}"

    async def start(self) -> None:
        self._result = asyncio.get_running_loop().create_future()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def result(self) -> dict[str, str]:
        """The redirect's query parameters (``code``, ``state``, ``iss``)."""
        assert self._result is not None
        return await self._result

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            target = request.split(b"\r\n", 1)[0].split(b" ")
            url = urlsplit(target[1].decode("latin-1") if len(target) > 1 else "/")
            if url.path != CALLBACK_PATH:
                self._answer(writer, 404, "Not found.")
                return
            query = {key: values[0] for key, values in parse_qs(url.query).items()}
            if self._state is None or not _same(query.get("state"), self._state):
                self._answer(writer, 400, "This is not the authorization foliko waits for.")
                return
            if "error" in query:
                text = "foliko was not authorized."
                self._settle(AuthorizationDenied(_denial(query)))
            elif "code" in query:
                text = "foliko is authorized."
                self._settle(query)
            else:
                self._answer(writer, 400, "No authorization code in this address.")
                return
            self._answer(writer, 200, text)
        except (TimeoutError, OSError, ValueError, asyncio.IncompleteReadError):
            pass
        finally:
            await _closed(writer)

    def _settle(self, outcome: dict[str, str] | BaseException) -> None:
        if self._result is None or self._result.done():
            return
        if isinstance(outcome, BaseException):
            self._result.set_exception(outcome)
        else:
            self._result.set_result(outcome)

    @staticmethod
    def _answer(writer: asyncio.StreamWriter, status: int, text: str) -> None:
        body = _PAGE.format(text=text).encode()
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}[status]
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/html; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )


def _same(given: str | None, expected: str) -> bool:
    import hmac

    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def _denial(query: dict[str, str]) -> str:
    error = query.get("error", "")
    description = query.get("error_description", "")
    return f"{error}: {description}" if description else error


async def _closed(writer: asyncio.StreamWriter) -> None:
    try:
        await writer.drain()
        writer.close()
        await writer.wait_closed()
    except OSError:
        pass
