"""The ``[mcp_servers.NAME]`` tables: checked once, kept as written.

``${VAR}`` references in ``headers`` and ``env`` stay unexpanded here; they
are read from the environment only when the server is connected, so a secret
is never part of the configuration foliko holds, shows or stores.
"""

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from foliko_cli.common.settings import MCP_HTTP_KEYS, MCP_STDIO_KEYS, entry_problem
from foliko_cli.errors import UsageError

REFERENCE = r"\$\{([^}]*)\}"
"""A ``${VAR}`` in a command, argument, environment value, URL or header (a
pattern compiled only for text that holds ``${``: most configs have none)."""


def is_variable_name(text: str) -> bool:
    """``[A-Za-z_][A-Za-z0-9_]*``, without a regular expression (start-up, P1)."""
    return text.isascii() and text.isidentifier()


def is_server_name(text: str) -> bool:
    """``[A-Za-z0-9][A-Za-z0-9_-]*``."""
    return (
        text[:1].isalnum() and text.isascii() and text.replace("_", "a").replace("-", "a").isalnum()
    )


def references(text: str) -> list[str]:
    """The names inside each ``${...}`` of ``text``."""
    return re.findall(REFERENCE, text) if "${" in text else []


DEFAULT_STARTUP_TIMEOUT = 10.0
DEFAULT_CALL_TIMEOUT = 60.0
APPROVE_CHOICES = ("ask", "always")
ELICITATION_CHOICES = ("ask", "defaults", "decline")
AUTH_CHOICES = ("oauth",)
GRANT_CHOICES = ("authorization_code", "client_credentials")
TOKEN_AUTH_CHOICES = ("client_secret_basic", "client_secret_post", "none")


class UnsetVariableError(Exception):
    """A ``${VAR}`` in ``headers`` or ``env`` names a variable that is not set."""


class ServerConfig(NamedTuple):
    """One ``[mcp_servers.NAME]`` table, checked. A NamedTuple, not a dataclass:
    it is defined whenever a server is configured, at start-up (P1)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    tools: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT
    call_timeout: float = DEFAULT_CALL_TIMEOUT
    enabled: bool = True
    per_user: bool = False
    """Each user of ``foliko serve`` gets a connection of their own (a server
    that keeps state between calls); otherwise one connection serves all."""
    approve: str | tuple[str, ...] = "ask"
    """``"ask"``: a call is put to the user first unless the tool says it is
    read-only; ``"always"``: never asked; a tuple: those tools are approved
    (the others asked about as with ``"ask"``)."""
    elicitation: str = "ask"
    """What a question from the server gets: ``"ask"`` the user (when there is
    one to ask, else a decline), ``"defaults"`` the fields' defaults when every
    required field has one (else a decline), ``"decline"`` a decline."""

    auth: str | None = None
    """``"oauth"``: OAuth 2.1 per the MCP authorization specification (the
    keys below apply only then); None: only ``headers``."""
    grant: str = "authorization_code"
    client_id: str | None = None
    """A pre-registered client; without it, a Client ID Metadata Document
    (``client_metadata_url``) or dynamic registration."""
    client_secret_env: str | None = None
    """The environment variable that holds the client secret (never the secret)."""
    client_metadata_url: str | None = None
    scopes: tuple[str, ...] = ()
    """Scopes always asked for, besides those the server names."""
    token_endpoint_auth_method: str | None = None
    """None: as the authorization server's metadata supports."""
    issuer: str | None = None
    """The authorization server a ``client_credentials`` secret may go to."""
    redirect_port: int | None = None
    """The loopback redirect's port (None: one the system picks)."""

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "http"

    @property
    def target(self) -> str:
        """What to show for the server: its command line, or its URL without a
        password or query string (either may hold credentials)."""
        if self.command is not None:
            return " ".join([self.command, *self.args])
        from foliko_cli.storage import shown

        url, query, _ = (self.url or "").partition("?")
        return shown(url) + ("?***" if query else "")

    def approves(self, tool: str) -> bool:
        """Whether ``approve`` lets a call of ``tool`` run without asking."""
        approved = self.approve
        return approved == "always" or (isinstance(approved, tuple) and tool in approved)

    def offers(self, tool: str) -> bool:
        """Whether the allow-list (``tools``) and ``exclude`` let the model see ``tool``."""
        if self.tools is not None and tool not in self.tools:
            return False
        return tool not in self.exclude


def _problem(name: str, key: str, what: str) -> UsageError:
    return UsageError(f"[mcp_servers.{name}] '{key}' {what}; fix the config")


def _string(name: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _problem(name, key, "must be a non-empty string")
    return value


def _strings(name: str, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _problem(name, key, "must be a list of strings")
    return tuple(value)


def _check_references(name: str, key: str, text: str) -> None:
    for variable in references(text):
        if not is_variable_name(variable):
            raise _problem(name, key, f"refers to ${{{variable}}}, which is not a variable name")


def _string_table(name: str, key: str, value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise _problem(name, key, 'must be a table of strings, like { NAME = "value" }')
    for item, text in value.items():
        _check_references(name, f"{key}.{item}", text)
    return tuple(value.items())


def _seconds(name: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise _problem(name, key, "must be a number of seconds greater than 0")
    return float(value)


def _url(name: str, key: str, value: Any) -> str:
    url = _string(name, key, value)
    if not url.startswith(("http://", "https://")):
        raise _problem(name, key, "must start with http:// or https://")
    return url


def _flag(name: str, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _problem(name, key, "must be true or false")
    return value


def _approve(name: str, key: str, value: Any) -> str | tuple[str, ...]:
    if isinstance(value, list):
        return _strings(name, key, value)
    if value not in APPROVE_CHOICES:
        raise _problem(name, key, 'must be "ask", "always" or a list of tool names')
    return str(value)


def _elicitation(name: str, key: str, value: Any) -> str:
    if value not in ELICITATION_CHOICES:
        raise _problem(name, key, 'must be "ask", "defaults" or "decline"')
    return str(value)


_SERVER_CHECKS = (
    ("command", _string),
    ("cwd", _string),
    ("url", _url),
    ("args", _strings),
    ("tools", _strings),
    ("exclude", _strings),
    ("env", _string_table),
    ("headers", _string_table),
    ("startup_timeout", _seconds),
    ("call_timeout", _seconds),
    ("enabled", _flag),
    ("per_user", _flag),
    ("approve", _approve),
    ("elicitation", _elicitation),
)
"""Each key of a server's table with the function that checks its value (and
gives what ``ServerConfig`` holds), in the order they are checked."""


def _checked(name: str, entry: Mapping[str, Any], checks: tuple[Any, ...]) -> dict[str, Any]:
    """The keys of ``checks`` that ``entry`` holds, each value checked in turn."""
    return {key: check(name, key, entry[key]) for key, check in checks if key in entry}


def _check_name(name: str) -> None:
    if not is_server_name(name):
        raise UsageError(
            f"[mcp_servers.{name}]: a server name may hold only letters, digits, '_' and '-' "
            "(and starts with a letter or digit); rename the table"
        )


def _check_keys(name: str, entry: Mapping[str, Any]) -> None:
    """Only keys the table knows, for one transport (``command`` or ``url``), and
    not both an allow-list (``tools``) and ``exclude``."""
    problem = entry_problem("mcp_servers", name, entry)
    if problem:
        raise UsageError(problem)
    if ("command" in entry) == ("url" in entry):
        which = "has both 'command' and 'url'" if "command" in entry else "has neither"
        raise UsageError(
            f"[mcp_servers.{name}] {which}: set 'command' (a local server over stdio) "
            "or 'url' (a Streamable HTTP server)"
        )
    other = MCP_HTTP_KEYS if "command" in entry else MCP_STDIO_KEYS
    misplaced = [key for key in other if key in entry]
    if misplaced:
        raise _problem(name, misplaced[0], f"applies only to a server with '{other[0]}'")
    if "tools" in entry and "exclude" in entry:
        raise _problem(name, "exclude", "cannot be combined with 'tools' (an allow-list)")


def server_config(name: str, entry: Mapping[str, Any]) -> ServerConfig:
    """Check one ``[mcp_servers.NAME]`` table; every problem exits 2 naming table and key."""
    _check_name(name)
    _check_keys(name, entry)
    options = _checked(name, entry, _SERVER_CHECKS)
    options.update(_oauth_options(name, entry))
    return ServerConfig(name=name, **options)


def _https_with_path(url: str) -> bool:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.scheme == "https" and bool(parts.netloc) and parts.path not in ("", "/")


def _grant(name: str, key: str, value: Any) -> str:
    if value not in GRANT_CHOICES:
        raise _problem(name, key, 'must be "authorization_code" or "client_credentials"')
    return str(value)


def _scopes(name: str, key: str, value: Any) -> tuple[str, ...]:
    scopes = _strings(name, key, value)
    if any(not scope or " " in scope for scope in scopes):
        raise _problem(name, key, "must be a list of scopes, each one word")
    return scopes


def _token_auth_method(name: str, key: str, value: Any) -> str:
    if value not in TOKEN_AUTH_CHOICES:
        raise _problem(name, key, 'must be "client_secret_basic", "client_secret_post" or "none"')
    return str(value)


def _port(name: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise _problem(name, key, "must be a port number from 1 to 65535")
    return value


_CLIENT_CHECKS = (
    ("grant", _grant),
    ("client_id", _string),
    ("client_secret_env", _string),
    ("client_metadata_url", _string),
    ("issuer", _string),
)
"""The OAuth keys that say who the client is and how it gets a token, checked
one by one before they are checked together (``_check_client``)."""

_TOKEN_CHECKS = (("scopes", _scopes), ("token_endpoint_auth_method", _token_auth_method))
"""What the client asks for and how it proves itself at the token endpoint."""


def _refuse_oauth_keys(name: str, entry: Mapping[str, Any]) -> None:
    """Without ``auth``, no key that goes with it."""
    from foliko_cli.common.settings import MCP_OAUTH_KEYS

    stray = [key for key in MCP_OAUTH_KEYS if key in entry]
    if stray:
        raise _problem(
            name, stray[0], 'applies only with auth = "oauth"; add it or remove this key'
        )


def _check_client(name: str, options: Mapping[str, Any]) -> None:
    """A secret's variable belongs to a ``client_id``; a Client ID Metadata Document
    is an https:// URL used instead of one; an issuer is an http(s) URL."""
    if "client_secret_env" in options:
        if not is_variable_name(options["client_secret_env"]):
            raise _problem(
                name, "client_secret_env", "must name an environment variable (not hold the secret)"
            )
        if "client_id" not in options:
            raise _problem(
                name, "client_secret_env", "needs 'client_id' (the client it belongs to)"
            )
    if "client_metadata_url" in options:
        if "client_id" in options:
            raise _problem(name, "client_metadata_url", "cannot be combined with 'client_id'")
        if not _https_with_path(options["client_metadata_url"]):
            raise _problem(
                name, "client_metadata_url", "must be an https:// URL with a path (the document)"
            )
    if "issuer" in options and not options["issuer"].startswith(("http://", "https://")):
        raise _problem(name, "issuer", "must be the authorization server's http(s) URL")


def _check_secret_for_method(name: str, options: Mapping[str, Any]) -> None:
    """``token_endpoint_auth_method = "none"`` exactly when there is no secret."""
    method = options.get("token_endpoint_auth_method")
    if method is not None and (method == "none") == ("client_secret_env" in options):
        need = "needs no" if method == "none" else "needs a"
        raise _problem(name, "token_endpoint_auth_method", f"{method!r} {need} 'client_secret_env'")


def _check_grant(name: str, options: Mapping[str, Any]) -> None:
    """``client_credentials`` has a secret and no browser (no metadata document, no
    redirect port); only it has an ``issuer``."""
    if options.get("grant") == "client_credentials":
        if "client_secret_env" not in options:
            raise _problem(
                name, "grant", "\"client_credentials\" needs 'client_id' and 'client_secret_env'"
            )
        if "client_metadata_url" in options or "redirect_port" in options:
            key = "client_metadata_url" if "client_metadata_url" in options else "redirect_port"
            raise _problem(name, key, 'applies only to grant = "authorization_code"')
    elif "issuer" in options:
        raise _problem(name, "issuer", 'applies only to grant = "client_credentials"')


def _oauth_options(name: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """The OAuth keys (``auth = "oauth"`` and what goes with it), checked together."""
    if "auth" not in entry:
        _refuse_oauth_keys(name, entry)
        return {}
    if entry["auth"] not in AUTH_CHOICES:
        raise _problem(name, "auth", 'must be "oauth" (or leave it out: no authorization)')
    options: dict[str, Any] = {"auth": entry["auth"]}
    options.update(_checked(name, entry, _CLIENT_CHECKS))
    _check_client(name, options)
    options.update(_checked(name, entry, _TOKEN_CHECKS))
    _check_secret_for_method(name, options)
    if "redirect_port" in entry:
        options["redirect_port"] = _port(name, "redirect_port", entry["redirect_port"])
    _check_grant(name, options)
    return options


def server_configs(table: Mapping[str, Mapping[str, Any]]) -> dict[str, ServerConfig]:
    return {name: server_config(name, entry) for name, entry in sorted(table.items())}


def expand(text: str, environment: Mapping[str, str], where: str) -> str:
    """``text`` with each ``${VAR}`` read from ``environment``; a missing one is an error."""

    def value(match: re.Match[str]) -> str:
        variable = match.group(1)
        if variable not in environment:
            raise UnsetVariableError(f"{where} uses ${{{variable}}}, which is not set; export it")
        return environment[variable]

    return re.sub(REFERENCE, value, text) if "${" in text else text
