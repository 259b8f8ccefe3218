"""foliko as the client under test of the MCP conformance suite
(``@modelcontextprotocol/conformance client --command "python conformance_client.py"``).

The suite starts a server for one scenario and runs this with its URL, the
scenario's name in MCP_CONFORMANCE_SCENARIO and what a user would have been
given (a pre-registered client, say) in MCP_CONFORMANCE_CONTEXT. It does what
a user does, with the installed ``foliko`` (beside this Python): configure the
server in the user's config file, ``foliko mcp login`` when it needs OAuth (the browser is
oauth_browser.py, which follows the redirects), list its tools and call each
one with ``/tool`` (the echo model), logging in again once when a call asks
for a wider scope. Exit 0 when every step did.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
FOLIKO = str(Path(sys.executable).with_name("foliko"))
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"
ARGUMENTS = {"add_numbers": {"a": 2, "b": 3}}
LOGIN_NEEDED = "foliko mcp login conf"


def toml(value: object) -> str:
    return json.dumps(value)  # the strings and lists used here are the same in TOML


def server_table(url: str, scenario: str, context: dict) -> str:
    lines = ["[mcp_servers.conf]", f"url = {toml(url)}", 'elicitation = "defaults"']
    if scenario.startswith("auth/"):
        lines.append('auth = "oauth"')
        if context.get("client_id"):
            lines.append(f"client_id = {toml(context['client_id'])}")
        else:
            lines.append(f"client_metadata_url = {toml(CLIENT_METADATA_URL)}")
        if context.get("client_secret"):
            lines.append('client_secret_env = "CONFORMANCE_CLIENT_SECRET"')
    return "\n".join(lines) + "\n"


def foliko(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [FOLIKO, *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
    )
    sys.stderr.write(f"$ foliko {' '.join(args)} -> {done.returncode}\n{done.stderr}")
    sys.stdout.write(done.stdout)
    return done


def main() -> int:
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    with tempfile.TemporaryDirectory() as where:
        home = Path(where)
        (home / "config.toml").write_text(server_table(url, scenario, context))
        log = home / "browser.log"
        env = {
            **os.environ,
            "FOLIKO_HOME": str(home / "state"),
            "FOLIKO_CONFIG": str(home / "config.toml"),
            "FOLIKO_MODEL": "echo",
            "BROWSER": f"{sys.executable} {HERE / 'oauth_browser.py'} %s",
            "OAUTH_TEST_BROWSER_LOG": str(log),
            "CONFORMANCE_CLIENT_SECRET": str(context.get("client_secret") or ""),
        }

        def run(*args: str) -> subprocess.CompletedProcess:
            return foliko(*args, env=env, cwd=home)

        if scenario.startswith("auth/") and run("mcp", "login", "conf").returncode != 0:
            return 1
        listed = run("mcp", "tools", "conf", "--json")
        if listed.returncode != 0:
            return 1
        for row in json.loads(listed.stdout):
            call = f"/tool {row['name']} {json.dumps(ARGUMENTS.get(row['tool'], {}))}"
            done = run("chat", "-s", "conformance", call)
            if done.returncode == 2 and LOGIN_NEEDED in done.stderr:  # a wider scope (step-up)
                if run("mcp", "login", "conf").returncode != 0:
                    return 1
                done = run("chat", "-s", "conformance", call)
            if done.returncode != 0:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
