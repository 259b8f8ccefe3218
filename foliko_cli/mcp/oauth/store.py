"""Per-server OAuth state in ``$FOLIKO_HOME/mcp-auth/NAME.json`` (mode 0600).

The file holds the tokens, when the access token expires (``expires_at``,
a Unix time: ``expires_in`` alone means nothing after a restart) and the
client registration the authorization server gave foliko. It belongs to one
server URL: after the URL changes, what it holds is not used.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

AUTH_DIRECTORY = "mcp-auth"


def token_path(home: Path, server: str) -> Path:
    return home / AUTH_DIRECTORY / f"{server}.json"


class TokenFile:
    """The SDK's ``TokenStorage`` for one server, kept in one JSON file."""

    def __init__(self, path: Path, server_url: str):
        self.path = path
        self.server_url = server_url
        self.seen: str | None = None
        """The access token this process last read or wrote: another process
        that refreshed meanwhile left a different one."""

    def read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("server_url") != self.server_url:
            return {}
        return data

    def write(self, data: dict[str, Any]) -> None:
        """Written whole to a private temporary file, then renamed over the old one."""
        from foliko_cli.common.files import replaced
        from foliko_cli.common.redaction import remember_secrets

        tokens = data.get("tokens")
        if isinstance(tokens, dict):
            remember_secrets(str(tokens.get(k) or "") for k in ("access_token", "refresh_token"))
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with replaced(self.path) as out:
            json.dump({**data, "server_url": self.server_url}, out, indent=2)

    def expires_at(self) -> float | None:
        value = self.read().get("expires_at")
        return float(value) if isinstance(value, int | float) else None

    async def get_tokens(self) -> Any:
        from mcp.shared.auth import OAuthToken

        tokens = self.read().get("tokens")
        try:
            token = OAuthToken.model_validate(tokens) if tokens else None
        except ValueError:
            return None
        self.seen = token.access_token if token is not None else None
        return token

    async def set_tokens(self, tokens: Any) -> None:
        data = self.read()
        data["tokens"] = tokens.model_dump(mode="json", exclude_none=True)
        self.seen = tokens.access_token
        expires_in = tokens.expires_in
        data["expires_at"] = None if expires_in is None else time.time() + int(expires_in)
        self.write(data)

    async def get_client_info(self) -> Any:
        from mcp.shared.auth import OAuthClientInformationFull

        client = self.read().get("client")
        try:
            return OAuthClientInformationFull.model_validate(client) if client else None
        except ValueError:
            return None

    async def set_client_info(self, client_info: Any) -> None:
        data = self.read()
        data["client"] = client_info.model_dump(mode="json", exclude_none=True)
        self.write(data)

    def newer_tokens(self) -> bool:
        """Whether another process stored other tokens since this one last looked."""
        tokens = self.read().get("tokens")
        return isinstance(tokens, dict) and tokens.get("access_token") not in (None, self.seen)

    def forget_tokens(self, *, unless_newer: bool = False) -> None:
        """The tokens go (with ``unless_newer``, only those this process knows);
        a dynamic registration stays (it is no secret of the user's)."""
        if unless_newer and self.newer_tokens():
            return
        data = self.read()
        if "tokens" in data or "expires_at" in data:
            data.pop("tokens", None)
            data.pop("expires_at", None)
            self.write(data)

    def remove(self) -> bool:
        """Forget everything; True when there was a file."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True
