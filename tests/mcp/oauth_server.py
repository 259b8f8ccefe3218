"""An MCP server that requires OAuth (the ``mcp`` package's MCPServer as the
resource server, validating tokens) and a small authorization server beside
it, in one process on 127.0.0.1:PORT (``python oauth_server.py PORT``).

The authorization server (issuer ``http://127.0.0.1:PORT``) serves its
RFC 8414 metadata, dynamic registration (RFC 7591), ``/authorize`` (which
approves at once: the "browser" only follows the redirect) and ``/token``
(authorization code with PKCE S256, refresh token, client credentials;
client_secret_basic, client_secret_post or none). The resource server is at
``/mcp``, its RFC 9728 metadata at the path-based well-known URL; its tool
``admin`` needs the scope ``admin`` and answers a token without it with 403
``insufficient_scope`` (a step-up).

OAUTH_TEST_OPTIONS (JSON) sets ``expires_in``, ``refresh`` (false: refresh
grants fail), ``registration`` (false: no registration endpoint), ``cimd``
(Client ID Metadata Documents are supported), ``deny`` (the user refuses
at /authorize), ``clients``
({id: {"secret": ..., "method": ...}}, pre-registered), ``auth_methods``
(token_endpoint_auth_methods_supported), ``grant_admin`` (false: the
scope admin is never granted) and ``echo`` (the token endpoint answers 400
with the request's headers and body in its error). ``POST /test/revoke`` revokes every token;
``GET /test/log`` is what happened, for the tests to check.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import sys
import time
from urllib.parse import urlencode, urlsplit

import uvicorn
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

PORT = int(sys.argv[1])
BASE = f"http://127.0.0.1:{PORT}"
RESOURCE = f"{BASE}/mcp"
OPTIONS = json.loads(os.environ.get("OAUTH_TEST_OPTIONS") or "{}")
EXPIRES_IN = OPTIONS.get("expires_in", 3600)
SCOPES = ["mcp", "admin"]

clients: dict[str, dict] = {
    client_id: {
        "client_secret": entry.get("secret"),
        "token_endpoint_auth_method": entry.get("method", "client_secret_basic"),
        "redirect_uris": None,
    }
    for client_id, entry in OPTIONS.get("clients", {}).items()
}
codes: dict[str, dict] = {}
tokens: dict[str, dict] = {}
refresh_tokens: dict[str, dict] = {}
log: list[dict] = []


class Verifier:
    async def verify_token(self, token: str) -> AccessToken | None:
        grant = tokens.get(token)
        if grant is None or grant["expires_at"] < time.time():
            return None
        return AccessToken(
            token=token,
            client_id=grant["client_id"],
            scopes=grant["scopes"],
            expires_at=int(grant["expires_at"]),
            resource=grant["resource"],
        )


server = MCPServer(
    "foliko-oauth-test",
    token_verifier=Verifier(),
    auth=AuthSettings(
        issuer_url=BASE,
        resource_server_url=RESOURCE,
        required_scopes=["mcp"],
        validate_token_resource=True,
    ),
)


@server.tool()
def whoami() -> str:
    """Say who is calling (the protected tool)."""
    return "hello from the protected server"


@server.tool()
def admin() -> str:
    """A tool that needs the scope admin."""
    return "admin done"


def _error(status: int, error: str, description: str = "") -> JSONResponse:
    log.append({"event": "error", "error": error, "description": description})
    return JSONResponse({"error": error, "error_description": description}, status_code=status)


DISCOVERY = OPTIONS.get("discovery", "header")
"""How the client must find the authorization server: ``header`` (the 401's
``resource_metadata``), ``root`` (only the root well-known protected-resource
URL), ``legacy`` (no protected-resource metadata: the 2025-03-26 fallback to
the server's origin) or ``oidc`` (authorization-server metadata only as
OpenID Connect discovery)."""
PRM_PATH = "/.well-known/oauth-protected-resource/mcp"


@server.custom_route("/.well-known/oauth-protected-resource", methods=["GET"])
async def root_resource_metadata(request: Request) -> Response:
    if DISCOVERY != "root":
        return _error(404, "not_found")
    return JSONResponse(
        {"resource": RESOURCE, "authorization_servers": [BASE], "scopes_supported": ["mcp"]}
    )


@server.custom_route("/.well-known/openid-configuration", methods=["GET"])
async def openid_configuration(request: Request) -> Response:
    if DISCOVERY != "oidc":
        return _error(404, "not_found")
    return await metadata(request)


@server.custom_route("/.well-known/oauth-authorization-server", methods=["GET"])
async def oauth_authorization_server(request: Request) -> Response:
    if DISCOVERY == "oidc":
        return _error(404, "not_found")
    return await metadata(request)


async def metadata(request: Request) -> Response:
    document = {
        "issuer": BASE,
        "authorization_endpoint": f"{BASE}/authorize",
        "token_endpoint": f"{BASE}/token",
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": OPTIONS.get(
            "auth_methods", ["client_secret_basic", "client_secret_post", "none"]
        ),
        "scopes_supported": SCOPES,
    }
    if OPTIONS.get("registration", True):
        document["registration_endpoint"] = f"{BASE}/register"
    if OPTIONS.get("cimd"):
        document["client_id_metadata_document_supported"] = True
    return JSONResponse(document)


def _client(client_id: str) -> dict | None:
    """A registered client, or (``cimd``) a Client ID Metadata Document's URL,
    taken as a public client without fetching it (the tests are offline)."""
    if OPTIONS.get("cimd") and client_id.startswith("https://"):
        return {"client_secret": None, "token_endpoint_auth_method": "none", "redirect_uris": None}
    return clients.get(client_id)


@server.custom_route("/register", methods=["POST"])
async def register(request: Request) -> Response:
    if not OPTIONS.get("registration", True):
        return _error(404, "not_found")
    body = await request.json()
    client_id = "dyn-" + secrets.token_hex(4)
    method = body.get("token_endpoint_auth_method") or "client_secret_basic"
    secret = None if method == "none" else secrets.token_hex(8)
    clients[client_id] = {
        "client_secret": secret,
        "token_endpoint_auth_method": method,
        "redirect_uris": body.get("redirect_uris"),
    }
    log.append({"event": "register", "client_id": client_id, "body": body})
    answer = {**body, "client_id": client_id, "token_endpoint_auth_method": method}
    if secret:
        answer["client_secret"] = secret
    return JSONResponse(answer, status_code=201)


def _loopback_match(registered: list[str] | None, uri: str) -> bool:
    """RFC 8252 §7.3: any port of a registered loopback redirect URI."""
    if registered is None:
        return urlsplit(uri).hostname == "127.0.0.1"
    asked = urlsplit(uri)
    return any(
        (urlsplit(r).hostname, urlsplit(r).path) == (asked.hostname, asked.path) for r in registered
    )


@server.custom_route("/authorize", methods=["GET"])
async def authorize(request: Request) -> Response:
    query = dict(request.query_params)
    log.append({"event": "authorize", "query": query})
    client = _client(query.get("client_id", ""))
    if client is None:
        return _error(400, "invalid_client", "unknown client")
    redirect_uri = query.get("redirect_uri", "")
    if not _loopback_match(client["redirect_uris"], redirect_uri):
        return _error(400, "invalid_request", "redirect_uri not registered")
    if query.get("response_type") != "code" or query.get("code_challenge_method") != "S256":
        return _error(400, "invalid_request", "PKCE S256 is required")
    if OPTIONS.get("deny"):
        back = {"error": "access_denied", "error_description": "the user said no"}
        back["state"] = query.get("state", "")
        return RedirectResponse(f"{redirect_uri}?{urlencode(back)}", status_code=302)
    scopes = (query.get("scope") or "").split()
    if not OPTIONS.get("grant_admin", True):
        scopes = [scope for scope in scopes if scope != "admin"]
    code = secrets.token_urlsafe(16)
    codes[code] = {
        "client_id": query["client_id"],
        "redirect_uri": redirect_uri,
        "challenge": query.get("code_challenge"),
        "scopes": scopes,
        "resource": query.get("resource"),
    }
    back = {"code": code, "state": query.get("state", ""), "iss": BASE}
    return RedirectResponse(f"{redirect_uri}?{urlencode(back)}", status_code=302)


def _client_auth(request: Request, form: dict) -> tuple[str | None, str]:
    """The authenticated client's id (None: it failed) and the method it used."""
    header = request.headers.get("authorization", "")
    if header.lower().startswith("basic "):
        client_id, _, secret = base64.b64decode(header[6:]).decode().partition(":")
        method = "client_secret_basic"
    elif "client_secret" in form:
        client_id, secret, method = (
            form.get("client_id", ""),
            form["client_secret"],
            "client_secret_post",
        )
    else:
        client_id, secret, method = form.get("client_id", ""), None, "none"
    client = _client(client_id)
    if client is None or client["token_endpoint_auth_method"] != method:
        return None, method
    if method != "none" and client["client_secret"] != secret:
        return None, method
    return client_id, method


def _issue(client_id: str, scopes: list[str], resource: str | None) -> dict:
    access, refresh = "at-" + secrets.token_urlsafe(16), "rt-" + secrets.token_urlsafe(16)
    grant = {
        "client_id": client_id,
        "scopes": scopes,
        "resource": resource,
        "expires_at": time.time() + EXPIRES_IN,
    }
    tokens[access] = grant
    refresh_tokens[refresh] = grant
    return {
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": EXPIRES_IN,
        "refresh_token": refresh,
        "scope": " ".join(scopes),
    }


@server.custom_route("/token", methods=["POST"])
async def token(request: Request) -> Response:
    if OPTIONS.get("echo"):  # a server that echoes the request in its error
        echoed = {"headers": dict(request.headers), "body": (await request.body()).decode()}
        return JSONResponse({"error": "invalid_request", "echo": echoed}, status_code=400)
    form = dict(await request.form())
    client_id, method = _client_auth(request, form)
    grant_type = form.get("grant_type")
    log.append(
        {
            "event": "token",
            "grant_type": grant_type,
            "method": method,
            "resource": form.get("resource"),
        }
    )
    if client_id is None:
        return _error(401, "invalid_client", f"client authentication ({method}) failed")
    if grant_type == "authorization_code":
        code = codes.pop(form.get("code", ""), None)
        if code is None or code["client_id"] != client_id:
            return _error(400, "invalid_grant", "unknown code")
        verifier = form.get("code_verifier", "")
        digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=")
        if digest.decode() != code["challenge"]:
            return _error(400, "invalid_grant", "PKCE verification failed")
        if form.get("redirect_uri") != code["redirect_uri"]:
            return _error(400, "invalid_grant", "redirect_uri differs")
        return JSONResponse(
            _issue(client_id, code["scopes"], form.get("resource") or code["resource"])
        )
    if grant_type == "refresh_token":
        grant = refresh_tokens.pop(form.get("refresh_token", ""), None)
        if grant is None or not OPTIONS.get("refresh", True) or grant["client_id"] != client_id:
            return _error(400, "invalid_grant", "refresh token not accepted")
        for spent in [access for access, held in tokens.items() if held is grant]:
            del tokens[spent]  # the pair rotates: the old access token goes too
        return JSONResponse(_issue(client_id, grant["scopes"], form.get("resource")))
    if grant_type == "client_credentials":
        scopes = (form.get("scope") or "mcp").split()
        return JSONResponse(_issue(client_id, scopes, form.get("resource")))
    return _error(400, "unsupported_grant_type", str(grant_type))


@server.custom_route("/test/revoke", methods=["POST"])
async def revoke(request: Request) -> Response:
    tokens.clear()
    refresh_tokens.clear()
    return JSONResponse({"revoked": True})


@server.custom_route("/test/log", methods=["GET"])
async def show_log(request: Request) -> Response:
    return JSONResponse(log)


def _without_resource_metadata(send):
    """``send`` with the ``resource_metadata`` parameter cut from a 401's
    WWW-Authenticate (the client must look for the metadata itself)."""

    async def sending(message):
        if message["type"] == "http.response.start" and message["status"] == 401:
            headers = [
                (name, b"Bearer" if name.lower() == b"www-authenticate" else value)
                for name, value in message["headers"]
            ]
            message = {**message, "headers": headers}
        await send(message)

    return sending


class StepUp:
    """Answers a call of ``admin`` with 403 insufficient_scope unless the token has ``admin``."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"].startswith("/.well-known/"):
            log.append({"event": "discovery", "path": scope["path"]})
        if scope["path"] == PRM_PATH and DISCOVERY in ("root", "legacy"):
            await JSONResponse({"error": "not_found"}, status_code=404)(scope, receive, send)
            return
        if scope["path"] != "/mcp" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        if DISCOVERY != "header":
            send = _without_resource_metadata(send)
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        headers = dict(scope["headers"])
        bearer = headers.get(b"authorization", b"").decode()[7:]
        grant = tokens.get(bearer)
        try:
            request = json.loads(body)
        except ValueError:
            request = None
        if (
            grant is not None
            and isinstance(request, dict)
            and request.get("method") == "tools/call"
            and request.get("params", {}).get("name") == "admin"
            and "admin" not in grant["scopes"]
        ):
            log.append({"event": "step-up"})
            challenge = (
                'Bearer error="insufficient_scope", scope="mcp admin", '
                f'resource_metadata="{BASE}/.well-known/oauth-protected-resource/mcp"'
            )
            response = JSONResponse(
                {"error": "insufficient_scope"},
                status_code=403,
                headers={"WWW-Authenticate": challenge},
            )
            await response(scope, receive, send)
            return
        sent = False

        async def replay():
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


if __name__ == "__main__":
    app = StepUp(server.streamable_http_app())
    uvicorn.run(app, host="127.0.0.1", port=PORT, log_level="warning")
