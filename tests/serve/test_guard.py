"""Other web sites, foreign Host names and non-JSON bodies are kept out
(foliko_cli/serve/guard.py), against real ``foliko serve`` processes and a
page on another origin in headless Chromium."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import httpx2 as httpx
import pytest

from .servers import turn
from .test_page import ARGS, chromium_or_skip

pytestmark = pytest.mark.process  # reads the server's own stderr

ALLOWED = "http://app.example:3000"
TURN = {"model": "echo", "messages": [{"role": "user", "content": "injected"}]}


def messages(http, session: str) -> list[str]:
    response = http.get(f"/v1/sessions/{session}")
    assert response.status_code == 200, response.text
    return [m["content"] for m in response.json()["messages"]]


def error_of(response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    kind = "permission_error" if status == 403 else "invalid_request_error"
    assert error["code"] == code and error["type"] == kind
    return error["message"]


@pytest.fixture(scope="module")
def victim(http) -> str:
    turn(http, "victim", "first words")
    return "victim"


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", None],
)
def test_a_body_that_is_not_json_is_refused_before_it_is_read(http, victim, content_type):
    before = messages(http, victim)
    headers = {"X-Session-Id": victim}
    if content_type is not None:
        headers["Content-Type"] = content_type
    import json

    refused = http.post("/v1/chat/completions", content=json.dumps(TURN), headers=headers)
    message = error_of(refused, 415, "unsupported_media_type")
    assert "Content-Type: application/json" in message
    assert messages(http, victim) == before


def test_a_multipart_post_and_a_text_delete_are_refused(http, victim):
    before = messages(http, victim)
    form = http.post(
        "/v1/responses", files={"input": ("x.txt", b"hi")}, data={"conversation": victim}
    )
    assert "multipart/form-data" in error_of(form, 415, "unsupported_media_type")
    deleted = http.request(
        "DELETE", f"/v1/sessions/{victim}", content=b"{}", headers={"Content-Type": "text/plain"}
    )
    error_of(deleted, 415, "unsupported_media_type")
    assert messages(http, victim) == before


def test_a_body_less_request_needs_no_content_type(http):
    turn(http, "short-lived")
    assert http.delete("/v1/sessions/short-lived").status_code == 200
    assert http.get("/v1/sessions/short-lived").status_code == 404


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Origin": "http://localhost:1"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:1"},
    ],
    ids=["foreign", "null", "other-port", "fetch-site-cross", "fetch-site-same"],
)
def test_a_request_from_another_site_is_refused_and_changes_nothing(http, victim, headers):
    before = messages(http, victim)
    sent = {"X-Session-Id": victim, **headers}
    refused = http.post("/v1/chat/completions", json=TURN, headers=sent)
    error_of(refused, 403, "cross_origin_refused")
    assert "access-control-allow-origin" not in refused.headers
    assert http.get("/v1/sessions", headers=headers).status_code == 403
    assert messages(http, victim) == before


def test_the_server_s_own_origin_and_a_link_to_the_page_pass(http, server, victim):
    own = {"Origin": server.url, "Sec-Fetch-Site": "same-origin"}
    sent = {**own, "X-Session-Id": "own"}
    assert http.post("/v1/chat/completions", json=TURN, headers=sent).status_code == 200
    assert messages(http, "own") == ["injected", "injected"]
    link = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
    page = http.get("/", headers=link)
    assert page.status_code == 200 and '<script type="module"' in page.text
    assert http.get("/v1/sessions", headers=link).status_code == 403


def test_a_preflight_from_another_site_is_refused(http):
    preflight = http.options(
        "/v1/chat/completions",
        headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
    )
    error_of(preflight, 403, "cross_origin_refused")
    assert "access-control-allow-origin" not in preflight.headers


@pytest.mark.parametrize(
    "host", ["evil.example", "evil.example:8080", "127.0.0.1.nip.io", "10.0.0.1", "[fe80::1]"]
)
def test_a_foreign_host_gets_421_before_any_route(http, victim, host):
    before = messages(http, victim)
    sent = {"Host": host, "X-Session-Id": victim}
    message = error_of(
        http.post("/v1/chat/completions", json=TURN, headers=sent), 421, "misdirected_request"
    )
    assert "--allowed-host" in message
    error_of(http.get("/v1/sessions", headers={"Host": host}), 421, "misdirected_request")
    assert messages(http, victim) == before


@pytest.mark.parametrize(
    "host", ["localhost", "LOCALHOST:9", "app.localhost", "127.0.0.2", "[::1]:9"]
)
def test_loopback_names_are_served(http, host):
    assert http.get("/v1/models", headers={"Host": host}).status_code == 200


def test_allowed_hosts_and_origins_from_the_command_line_reach_the_workers(start_server):
    server = start_server(
        *("--workers", "2", "--allowed-host", "foliko.test", "--allowed-host", "*.lan.test"),
        *("--allow-origin", ALLOWED),
    )
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for host in ("foliko.test", "FOLIKO.TEST:8080", "box.lan.test"):
            assert http.get("/v1/models", headers={"Host": host}).status_code == 200, host
        error_of(http.get("/v1/models", headers={"Host": "lan.test"}), 421, "misdirected_request")

        preflight = http.options(
            "/v1/chat/completions",
            headers={
                "Origin": ALLOWED,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type, x-session-id, x-stainless-os",
            },
        )
        assert preflight.status_code == 204
        assert preflight.headers["access-control-allow-origin"] == ALLOWED
        assert "POST" in preflight.headers["access-control-allow-methods"]
        allowed = {h.strip() for h in preflight.headers["access-control-allow-headers"].split(",")}
        wanted = {"authorization", "content-type", "x-session-id", "x-foliko-timeout"}
        assert wanted | {"x-client-request-id", "x-stainless-os"} <= allowed
        assert preflight.headers["vary"] == "Origin"

        sent = {"Origin": ALLOWED, "Sec-Fetch-Site": "cross-site", "X-Session-Id": "from-app"}
        answer = http.post("/v1/chat/completions", json=TURN, headers=sent)
        assert answer.status_code == 200, answer.text
        assert answer.headers["access-control-allow-origin"] == ALLOWED
        assert "x-request-id" in answer.headers["access-control-expose-headers"]
        assert answer.headers["vary"] == "Origin"
        assert messages(http, "from-app") == ["injected", "injected"]

        error_of(
            http.post("/v1/chat/completions", json=TURN, headers={"Origin": "http://app.example"}),
            403,
            "cross_origin_refused",
        )
        text = http.post(
            "/v1/chat/completions",
            content=b"{}",
            headers={"Origin": ALLOWED, "Content-Type": "text/plain"},
        )
        error_of(text, 415, "unsupported_media_type")
        assert text.headers.get("access-control-allow-origin") == ALLOWED
    assert "POST /v1/chat/completions 403" in server.stderr  # the access log saw the refusals


def _own_address() -> str:
    """A non-loopback address of this machine (UDP connect sends nothing)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            pytest.skip("this machine has no non-loopback IPv4 address")
        address = probe.getsockname()[0]
    if address.startswith("127.") or address == "0.0.0.0":
        pytest.skip("this machine has no non-loopback IPv4 address")
    return address


def test_a_wildcard_bind_answers_to_the_machine_s_addresses_not_to_names(start_server, tmp_path):
    keys = tmp_path / "keys.toml"
    keys.write_text('[keys]\n"k" = "ann"\n')
    keys.chmod(0o600)
    server = start_server("--host", "0.0.0.0", "--api-keys", str(keys))
    port = server.url.rsplit(":", 1)[1]
    address = _own_address()
    auth = {"Authorization": "Bearer k"}
    with httpx.Client(base_url=f"http://{address}:{port}", timeout=30, headers=auth) as http:
        assert http.get("/v1/models").status_code == 200
        assert http.get("/v1/models", headers={"Host": f"localhost:{port}"}).status_code == 200
        for host in ("evil.example", "192.0.2.99", "0.0.0.0"):
            refused = http.get("/v1/models", headers={"Host": host})
            message = error_of(refused, 421, "misdirected_request")
            assert "--allowed-host" in message, message


def test_an_origin_that_is_not_one_is_a_usage_error(start_server):
    server = start_server("--allow-origin", "null", wait=False)
    assert server.exit_code() == 2
    assert "--allow-origin 'null' is not an origin" in server.stderr


UPGRADE = {
    "Connection": "Upgrade",
    "Upgrade": "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({"Host": "evil.example"}, 421, "misdirected_request"),
        ({"Origin": "http://evil.example"}, 403, "cross_origin_refused"),
    ],
)
def test_websocket_upgrades_check_host_and_origin(http, headers, status, code):
    error_of(http.get("/v1/responses", headers={**UPGRADE, **headers}), status, code)


def test_a_websocket_from_the_server_s_own_origin_opens(server):
    from websockets.sync.client import connect

    url = server.url.replace("http://", "ws://") + "/v1/responses"
    with connect(url, origin=server.url, open_timeout=10) as socket:
        socket.ping().wait(10)


class _PageServer:
    """A web page of another site: served on another port and opened as
    ``localhost`` while the server is at 127.0.0.1, so another origin and another site."""

    def __init__(self, html: str):
        body = html.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                return None

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/html")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://localhost:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


ATTACK = """<!doctype html><title>attack</title><script>
const target = %(target)r;
const turn = JSON.stringify({input: "injected", conversation: "victim"});
async function attempt(name, path, options) {
  try {
    const response = await fetch(target + path, options);
    return [name, response.type, response.status];
  } catch (error) {
    return [name, "refused", String(error)];
  }
}
window.results = Promise.all([
  attempt("text-no-cors", "/v1/responses",
          {method: "POST", mode: "no-cors", headers: {"content-type": "text/plain"}, body: turn}),
  attempt("form-no-cors", "/v1/responses", {method: "POST", mode: "no-cors",
          body: new URLSearchParams({input: "injected", conversation: "victim"})}),
  attempt("json-cors", "/v1/responses",
          {method: "POST", mode: "cors", body: turn,
           headers: {"content-type": "application/json"}}),
  attempt("delete-cors", "/v1/sessions/victim", {method: "DELETE", mode: "cors"}),
  attempt("read-cors", "/v1/sessions/victim", {mode: "cors"}),
]);
</script>"""


@pytest.fixture
def attack_page(server) -> Iterator[_PageServer]:
    page = _PageServer(ATTACK % {"target": server.url})
    try:
        yield page
    finally:
        page.stop()


def test_a_page_on_another_site_in_chromium_changes_nothing(server, http, victim, attack_page):
    executable = chromium_or_skip()
    from playwright.sync_api import sync_playwright

    before = messages(http, victim)
    log_start = len(server.stderr_lines)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=ARGS)
        try:
            page = browser.new_page()
            page.goto(attack_page.url)
            results = {
                name: (kind, status) for name, kind, status in page.evaluate("window.results")
            }
        finally:
            browser.close()
    assert results["text-no-cors"] == ("opaque", 0)
    assert results["form-no-cors"] == ("opaque", 0)
    for name in ("json-cors", "delete-cors", "read-cors"):
        assert results[name][0] == "refused", (name, results[name])
    assert messages(http, victim) == before
    log = "".join(server.stderr_lines[log_start:])
    assert log.count("POST /v1/responses 403") == 2, log  # the simple requests did arrive
    assert "OPTIONS /v1/responses 403" in log and "GET /v1/sessions/{session_id} 403" in log
