"""OAuth 2.1 for remote MCP servers (``auth = "oauth"``), per the MCP
authorization specification, on top of the ``mcp`` SDK's providers.

The SDK does the protocol: protected-resource metadata discovery (RFC 9728,
from ``WWW-Authenticate`` then the well-known URLs), authorization-server
metadata (RFC 8414, OpenID Connect, the 2025-03-26 fallbacks), dynamic
registration (RFC 7591) or a Client ID Metadata Document, PKCE, the
``resource`` parameter (RFC 8707), scope selection and step-up on 403
``insufficient_scope``. foliko adds what an application must: where the
tokens live (``store.py``), which credentials and grant to use and when to
refresh (``provider.py``), the loopback redirect (``loopback.py``) and the
``login``/``logout`` operations (``login.py``).

Only ``foliko mcp login`` authorizes interactively. Any other run that
would need the user's browser stops with ``MCPLoginError`` naming that
command: an unattended turn must never wait on a browser.
"""
