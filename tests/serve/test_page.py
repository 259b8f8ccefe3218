"""The web page at / in real headless Chromium (Debian's, driven by Playwright)."""

from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def chromium_or_skip() -> str:
    found = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    if found:
        return found
    why = "Chromium is not installed (apt-get install chromium)"
    if os.environ.get("FOLIKO_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{why} (FOLIKO_REQUIRE_SERVICES=1)")
    pytest.skip(why)


def test_page_lists_opens_and_continues_a_session(start_server, tmp_path):
    executable = chromium_or_skip()
    import httpx2 as httpx
    from playwright.sync_api import expect, sync_playwright

    keys = tmp_path / "keys.toml"
    keys.write_text('[keys]\n"page-key" = "pat"\n')
    keys.chmod(0o600)
    server = start_server("--api-keys", str(keys))
    auth = {"Authorization": "Bearer page-key"}
    seeded = httpx.post(
        server.url + "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "first words"}]},
        headers={**auth, "X-Session-Id": "seeded"},
    )
    assert seeded.status_code == 200

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=ARGS)
        try:
            page = browser.new_page()
            page.goto(server.url + "/")
            expect(page.locator("#login")).to_be_visible()
            page.fill("#key", "page-key")
            page.click("#save-key")
            link = page.locator("a.session", has_text="seeded")
            expect(link).to_be_visible()
            link.click()
            expect(page.locator("#transcript .user")).to_have_text(["first words"])
            expect(page.locator("#transcript .assistant")).to_have_text(["first words"])
            page.fill("#message", "typed in the browser")
            page.click("#send")
            reply = page.locator("#transcript .assistant[data-done=true]")
            expect(reply).to_have_text("typed in the browser")
            assert page.evaluate("sessionStorage.getItem('foliko-api-key')") == "page-key"
            page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
        finally:
            browser.close()
    assert (tmp_path / "page.png").stat().st_size > 0
    stored = httpx.get(server.url + "/v1/sessions/seeded", headers=auth).json()
    assert [m["content"] for m in stored["messages"]][-2:] == ["typed in the browser"] * 2
