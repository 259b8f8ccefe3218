"""The ``httpx2.Auth`` for a server with ``auth = "oauth"``: the SDK's provider
for its grant, with foliko's token file, credentials and refresh margin.

What the SDK leaves to the application, done here:

- the access token's expiry, the authorization server's metadata and the
  protected resource's metadata survive a restart (the token file), so a
  token is refreshed before it expires, at the right token endpoint, with
  the ``resource`` parameter, by a process that has not discovered anything;
- a pre-registered client (``client_id``, ``client_secret_env``) is used as
  configured, and its token endpoint authentication is the configured one or
  else the one the server's metadata supports (``client_secret_basic``
  first, as RFC 8414 makes it the default);
- without ``login`` (any run but ``foliko mcp login``) a step that needs the
  user's browser raises ``LoginRequired`` instead; the scope it would have
  asked for is kept, for the next login to ask for it.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from foliko_cli.common.redaction import basic_credentials, remember_secrets
from foliko_cli.mcp.oauth.loopback import Loopback
from foliko_cli.mcp.oauth.store import TokenFile, token_path
from foliko_cli.mcp.server_config import ServerConfig

if TYPE_CHECKING:
    from mcp.client.auth.oauth2 import OAuthContext

REFRESH_MARGIN = 60.0
"""An access token with less than this many seconds left is refreshed before use."""
LOGIN_TIMEOUT = 300.0
PLACEHOLDER_REDIRECT = "http://127.0.0.1/callback"
CLIENT_NAME = "foliko"


class LoginRequired(Exception):
    """The server needs the user to authorize foliko (in a browser) first."""


class Login:
    """What an interactive authorization needs: ``open_url`` shows the user the
    authorization URL (the application's: the core prints nothing) and
    ``loopback`` (started) takes the redirect."""

    def __init__(self, open_url: Callable[[str], None], loopback: Loopback):
        self.open_url = open_url
        self.loopback = loopback


def client_secret(config: ServerConfig) -> tuple[str | None, LoginRequired | None]:
    """The secret ``client_secret_env`` names, or why there is none."""
    if config.client_secret_env is None:
        return None, None
    secret = os.environ.get(config.client_secret_env)
    if secret:
        return secret, None
    return None, LoginRequired(
        f"MCP server {config.name!r} needs its client secret in ${config.client_secret_env} "
        "(client_secret_env), which is not set; export it"
    )


def _auth_method(config: ServerConfig, secret: str | None, metadata: Any) -> str:
    if config.token_endpoint_auth_method is not None:
        return config.token_endpoint_auth_method
    if secret is None:
        return "none"
    supported = getattr(metadata, "token_endpoint_auth_methods_supported", None)
    if supported and "client_secret_basic" not in supported and "client_secret_post" in supported:
        return "client_secret_post"
    return "client_secret_basic"


class _Foliko:
    """What both providers share (a mixin over the SDK's ``OAuthClientProvider``)."""

    config: ServerConfig
    store: TokenFile
    login: Login | None
    secret: str | None
    problem: LoginRequired | None
    context: OAuthContext
    """Set by the SDK's provider this class is mixed into."""

    def _setup(
        self, config: ServerConfig, store: TokenFile, login: Login | None, problem: Any
    ) -> None:
        self.config, self.store, self.login, self.problem = config, store, login, problem
        self.refused_with: int | None = None
        remember_secrets(self.secrets())

    def secrets(self) -> tuple[str, ...]:
        """What no answer, error or log line may show: the client secret (also
        as the HTTP Basic credentials it makes with the client id) and the
        tokens, those held and those stored. Each is remembered, so that the
        SDK's log records hide them too."""
        client = getattr(self, "context", None) and self.context.client_info
        secret = self.secret or (client.client_secret if client else None)
        found: list[str] = []
        if secret:
            found.append(secret)
            client_id = (client.client_id if client else None) or self.config.client_id
            if client_id:
                found += basic_credentials(client_id, secret)
        held = getattr(self, "context", None) and self.context.current_tokens
        if held:
            found += [held.access_token, held.refresh_token or ""]
        stored = self.store.read().get("tokens")
        if isinstance(stored, dict):
            found += [str(stored.get(key) or "") for key in ("access_token", "refresh_token")]
        found = [value for value in found if value]
        remember_secrets(found)
        return tuple(found)

    async def _adopt_newer(self) -> None:
        """Take the tokens another foliko process refreshed meanwhile (with a
        rotating refresh token, the one this process holds is spent)."""
        if getattr(self, "_initialized", False) and self.store.newer_tokens():
            self.context.current_tokens = await self.store.get_tokens()
            expires_at = self.store.expires_at()
            self.context.token_expiry_time = expires_at

    def _refresh_if_due(self) -> None:
        """Make the SDK refresh a token that expires within the margin (half its
        lifetime for a short-lived one), so that no request meets an expired one."""
        context = self.context
        tokens, expiry = context.current_tokens, context.token_expiry_time
        if tokens is None or expiry is None or not context.can_refresh_token():
            return
        margin = min(REFRESH_MARGIN, tokens.expires_in / 2) if tokens.expires_in else REFRESH_MARGIN
        if expiry - time.time() < margin:
            context.token_expiry_time = 1.0  # in the past: the SDK refreshes first

    def _restore(self) -> None:
        """What the token file remembers of an earlier process's discovery and
        tokens (after a secret that is missing stops the first request)."""
        if self.problem is not None:
            raise self.problem
        from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata

        data = self.store.read()
        expires_at = data.get("expires_at")
        if self.context.current_tokens is not None and isinstance(expires_at, int | float):
            self.context.token_expiry_time = expires_at
        try:
            if data.get("oauth_metadata") and self.context.oauth_metadata is None:
                self.context.oauth_metadata = OAuthMetadata.model_validate(data["oauth_metadata"])
            if data.get("resource_metadata") and self.context.protected_resource_metadata is None:
                self.context.protected_resource_metadata = ProtectedResourceMetadata.model_validate(
                    data["resource_metadata"]
                )
                self.context.auth_server_url = data.get("auth_server_url")
        except ValueError:
            pass
        self._refresh_if_due()

    def _remember_discovery(self) -> None:
        data = self.store.read()
        context = self.context
        if context.oauth_metadata is not None:
            data["oauth_metadata"] = context.oauth_metadata.model_dump(
                mode="json", exclude_none=True
            )
        if context.protected_resource_metadata is not None:
            data["resource_metadata"] = context.protected_resource_metadata.model_dump(
                mode="json", exclude_none=True
            )
            data["auth_server_url"] = context.auth_server_url
        data.pop("scope_wanted", None)
        self.store.write(data)

    async def _auth_flow(self, request: Any) -> Any:
        """The SDK's flow, noting the status of the request it authorizes (401:
        no valid token; 403: a step-up)."""
        await self._adopt_newer()
        self._refresh_if_due()
        flow = super()._auth_flow(request)  # type: ignore[misc]
        try:
            outgoing = await flow.__anext__()
            while True:
                response = yield outgoing
                if outgoing is request:
                    self.refused_with = response.status_code
                elif self.context.auth_server_url is None:
                    response = await legacy_metadata(outgoing, response)
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()

    def _choose_auth_method(self) -> None:
        client = self.context.client_info
        if client is not None and client.client_id == self.config.client_id:
            client.token_endpoint_auth_method = _auth_method(
                self.config, self.secret, self.context.oauth_metadata
            )

    def _refuse(self, message: str) -> LoginRequired:
        self.problem = LoginRequired(message)
        return self.problem

    async def _handle_token_response(self, response: Any) -> None:
        await super()._handle_token_response(response)  # type: ignore[misc]
        self._remember_discovery()

    async def _refresh_token(self) -> Any:
        self._choose_auth_method()
        return await super()._refresh_token()  # type: ignore[misc]


LEGACY_METADATA_PATH = "/.well-known/oauth-authorization-server"


async def legacy_metadata(request: Any, response: Any) -> Any:
    """A 2025-03-26 server's authorization server metadata, as the SDK can use it.

    Without protected resource metadata, the 2025-03-26 specification has the
    client read the metadata at the MCP server's origin, wherever its
    authorization server lives (its "authorization base URL" drops the path).
    So a server whose authorization server sits under a path publishes an
    ``issuer`` such as ``https://host/oauth`` at
    ``https://host/.well-known/oauth-authorization-server``, which the SDK
    (mcp 2.3, ``OAuthClientProvider._auth_flow``, step 2) refuses: it holds
    the issuer to the origin, as RFC 8414 §3.3 does for path-inserted URLs.
    On that legacy path only, an issuer on the origin it was read from is
    taken as that origin's: the answer is handed on with the origin as its
    issuer, and the login is bound to the origin. Any other answer is handed
    on as it came.
    """
    import httpx2

    url = request.url
    if response.status_code != 200 or url.path != LEGACY_METADATA_PATH:
        return response
    try:
        await response.aread()
        metadata = response.json()
        issuer = httpx2.URL(metadata["issuer"])
    except (ValueError, KeyError, TypeError, httpx2.InvalidURL):
        return response
    origin = f"{url.scheme}://{url.netloc.decode()}"
    same_origin = (issuer.scheme, issuer.netloc) == (url.scheme, url.netloc)
    if not same_origin or issuer.path in ("", "/"):
        return response
    return httpx2.Response(200, json={**metadata, "issuer": origin}, request=request)


def _scopes(*parts: str | None) -> str | None:
    words = dict.fromkeys(word for part in parts if part for word in part.split())
    return " ".join(words) or None


def build_auth(config: ServerConfig, home: Path, login: Login | None = None) -> Any:
    """The provider for ``config``'s grant; its ``problem`` says why it stopped
    a connection (a login needed, a secret not set)."""
    from mcp.client.auth import OAuthClientProvider
    from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
    from mcp.shared.auth import (
        AuthorizationCodeResult,
        OAuthClientInformationFull,
        OAuthClientMetadata,
    )
    from pydantic import AnyUrl

    store = TokenFile(token_path(home, config.name), config.url or "")
    secret, missing = client_secret(config)
    name = config.name
    configured_scope = _scopes(*config.scopes) if config.scopes else None
    command = f"foliko mcp login {name}"

    if config.grant == "client_credentials":

        class Unattended(_Foliko, ClientCredentialsOAuthProvider):
            async def _initialize(self) -> None:
                await super()._initialize()
                self._restore()

            async def _perform_authorization(self) -> Any:
                self._choose_auth_method()
                return await super()._perform_authorization()

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            unattended = Unattended(
                server_url=config.url or "",
                storage=store,
                client_id=config.client_id or "",
                client_secret=secret or "",
                scope=configured_scope,
                issuer=config.issuer,
            )
        unattended.secret = secret
        unattended._setup(config, store, login, missing)
        return unattended

    redirect = login.loopback.redirect_uri if login is not None else PLACEHOLDER_REDIRECT
    fixed = None
    if config.client_id is not None:
        fixed = OAuthClientInformationFull(
            client_id=config.client_id,
            client_secret=secret,
            redirect_uris=[AnyUrl(redirect)],
            grant_types=["authorization_code", "refresh_token"],
            token_endpoint_auth_method=_auth_method(config, secret, None),
        )

    class Interactive(_Foliko, OAuthClientProvider):
        async def _initialize(self) -> None:
            await super()._initialize()
            if fixed is not None:
                self.context.client_info = fixed
            elif self.context.client_info is not None and login is not None:
                self.context.client_info.redirect_uris = [AnyUrl(redirect)]
            self._restore()
            if self.login is None and self.context.current_tokens is None:
                raise self._refuse(f"MCP server {name!r} needs a login; run {command}")

        async def _perform_authorization(self) -> Any:
            wanted = self.store.read().get("scope_wanted")
            metadata = self.context.client_metadata
            metadata.scope = _scopes(metadata.scope, configured_scope, wanted)
            if self.login is None:
                data = self.store.read()
                data["scope_wanted"] = metadata.scope
                self.store.write(data)
                if self.refused_with == 403:
                    raise self._refuse(
                        f"MCP server {name!r} needs more scope ({metadata.scope}) for this "
                        f"request; run {command}"
                    )
                self.store.forget_tokens(unless_newer=True)
                raise self._refuse(
                    f"MCP server {name!r} refused foliko's token (it expired or was "
                    f"revoked); run {command}"
                )
            self._choose_auth_method()
            return await super()._perform_authorization()

    async def show(url: str) -> None:
        assert login is not None
        login.loopback.expect(url)
        login.open_url(url)

    async def wait() -> AuthorizationCodeResult:
        import asyncio

        assert login is not None
        try:
            query = await asyncio.wait_for(login.loopback.result(), LOGIN_TIMEOUT)
        except TimeoutError:
            raise LoginRequired(
                f"no authorization arrived within {LOGIN_TIMEOUT:g}s; run {command} again"
            ) from None
        return AuthorizationCodeResult(
            code=query["code"], state=query.get("state"), iss=query.get("iss")
        )

    metadata = OAuthClientMetadata(
        redirect_uris=[AnyUrl(redirect)],
        client_name=CLIENT_NAME,
        grant_types=["authorization_code", "refresh_token"],
        token_endpoint_auth_method="none",
        scope=configured_scope,
    )
    provider = Interactive(
        server_url=config.url or "",
        client_metadata=metadata,
        storage=store,
        redirect_handler=show,
        callback_handler=wait,
        client_metadata_url=config.client_metadata_url,
    )
    provider.secret = secret
    provider._setup(config, store, login, missing)
    return provider
