"""The audit log of ``foliko serve``: each request an API key makes that reads
or writes a session is recorded (service/audit.py) with the key's name, the
route, the sessions and the SHA-256 of the body sent back; never the body.

The sessions are those the key's service touched while the request ran
(``touching``). ``/mcp`` is left to the MCP server, which records each of
its calls itself. A WebSocket connection is one entry, when it ends.
"""

from __future__ import annotations

import hashlib
from typing import Any

from foliko_cli.serve.access_log import route_template
from foliko_cli.service.audit import touching


class AuditMiddleware:
    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        client = (scope.get("state") or {}).get("client")
        if client is None or scope["type"] not in ("http", "websocket") or scope["path"] == "/mcp":
            await self.app(scope, receive, send)
            return
        digest = hashlib.sha256()
        status = 200

        async def hashed(message: dict[str, Any]) -> None:
            nonlocal status
            kind = message["type"]
            if kind == "http.response.start":
                status = message["status"]
            elif kind == "http.response.body":
                digest.update(message.get("body", b""))
            elif kind == "websocket.send":
                digest.update(message.get("bytes") or (message.get("text") or "").encode())
            await send(message)

        with touching() as session_ids:
            try:
                await self.app(scope, receive, hashed)
            finally:
                if session_ids:
                    route = route_template(scope)[0] or scope["path"]
                    call = f"{scope.get('method', 'GET')} {route}"
                    outcome = "ok" if status < 400 else str(status)
                    recorder = scope["app"].state.services.base.audit
                    recorder.record(
                        client, call, session_ids, digest=digest.hexdigest(), outcome=outcome
                    )
