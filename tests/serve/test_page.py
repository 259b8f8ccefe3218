"""The web app at / in real headless Chromium (Debian's, driven by Playwright),
against a real ``foliko serve`` with the echo model and a fake upstream model.

Few tests, each a person's whole visit: the browser starts once per module.
Screenshots of each view go to ``test-artefacts/webapp`` (or
``$FOLIKO_TEST_ARTEFACTS/webapp``); axe-core (installed from npm into the
test cache) checks the main views for serious accessibility violations.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from models.fake_servers import FakeServer, Reply, free_port, openai_stream_events
from npm_cache import NPM_CACHE, npm_install

from .servers import ServeProcess, foliko_env, held, run_cli, wait_until

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
AXE = "axe-core@4.10.3"
ARTEFACTS = Path(
    os.environ.get("FOLIKO_TEST_ARTEFACTS") or Path(__file__).parents[2] / "test-artefacts"
)
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def chromium_or_skip() -> str:
    found = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    if found:
        return found
    why = "Chromium is not installed (apt-get install chromium)"
    if os.environ.get("FOLIKO_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{why} (FOLIKO_REQUIRE_SERVICES=1)")
    pytest.skip(why)


@pytest.fixture(scope="module")
def browser():
    executable = chromium_or_skip()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def upstream():
    server = FakeServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def web(tmp_path_factory, upstream):
    """``foliko serve`` whose models are echo (the default), ``slow`` (the fake
    upstream) and ``broken`` (a port nothing listens on)."""
    home = tmp_path_factory.mktemp("web-home")
    config = home / "config.toml"
    config.write_text(
        f'[models.slow]\nmodel = "openai:m"\nbase_url = "{upstream.url}/v1"\n'
        'api_key_env = "FAKE_KEY"\n'
        f'[models.broken]\nmodel = "openai:m"\nbase_url = "http://127.0.0.1:{free_port()}/v1"\n'
        'api_key_env = "FAKE_KEY"\n'
    )
    env = foliko_env(home, {"FOLIKO_CONFIG": str(config), "FAKE_KEY": "k"})
    running = ServeProcess([], env, [], home=home)
    try:
        yield running.wait_ready()
    finally:
        running.kill()


@pytest.fixture(scope="module")
def http(web):
    import httpx2 as httpx

    with httpx.Client(base_url=web.url, timeout=30) as client:
        yield client


def open_page(browser, url: str, viewport=DESKTOP, *, csp: bool = True, **options):
    """A page in a context of its own (its own storage). Without ``csp`` the
    page's Content-Security-Policy is off: what the renderer does is then all
    that keeps a message's HTML from running, and axe-core can be added."""
    context = browser.new_context(viewport=viewport, bypass_csp=not csp, **options)
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.goto(url)
    return page


def ready(page):
    from playwright.sync_api import expect

    expect(page.locator("html[data-ready=true]")).to_have_count(1)
    return page


def screenshot(page, name: str) -> None:
    folder = ARTEFACTS / "webapp"
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"))
    assert (folder / f"{name}.png").stat().st_size > 0


def axe_violations(page, axe_script: Path) -> list[dict]:
    """What axe-core finds of serious or critical impact in the page as it is."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(axe_script))
    found = page.evaluate(
        "axe.run(document, {resultTypes: ['violations']}).then(r => r.violations)"
    )
    return [
        {"id": v["id"], "nodes": [n["target"] for n in v["nodes"]]}
        for v in found
        if v["impact"] in ("serious", "critical")
    ]


@pytest.fixture(scope="module")
def axe_script() -> Path:
    modules = npm_install(NPM_CACHE / "axe-core", "npm (for axe-core)", packages=[AXE])
    return modules / "axe-core" / "axe.min.js"


def stored(http, session_id: str) -> dict:
    response = http.get(f"/v1/sessions/{session_id}")
    assert response.status_code == 200, response.text
    return response.json()


def iso(ms: int) -> str:
    """A time in ms as JavaScript's Date.toISOString writes it."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def no_sideways_scroll(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def hand_over(target, how: str, name: str, data: bytes, media_type: str) -> None:
    """Files as a person gives them: ``drop`` them on ``target`` or ``paste`` them in."""
    target.evaluate(
        """(node, [how, name, bytes, type]) => {
            const data = new DataTransfer();
            data.items.add(new File([new Uint8Array(bytes)], name, {type}));
            const options = {bubbles: true, cancelable: true};
            if (how === "paste") {
                node.dispatchEvent(new ClipboardEvent("paste", {...options, clipboardData: data}));
            } else {
                node.dispatchEvent(new DragEvent("dragover", {...options, dataTransfer: data}));
                node.dispatchEvent(new DragEvent("drop", {...options, dataTransfer: data}));
            }
        }""",
        [how, name, list(data), media_type],
    )


MARKDOWN = """## Plan

- one
- two
  - nested

1. first
2. second

| day | km |
|-----|---:|
| Mon | 12 |

```python
print('hi')
```

<img src=x onerror="window.__xss = 1"> <script>window.__xss = 2</script>
[click](javascript:window.__xss=3) and **bold** text"""

XSS = [
    "<script>window.__xss = 'script'</script>",
    "<img src=x onerror=\"window.__xss = 'img'\">",
    "<svg onload=\"window.__xss = 'svg'\"></svg>",
    "[x](javascript:window.__xss='link')",
    "[x](JaVaScRiPt:window.__xss='case')",
    "![x](javascript:window.__xss='image')",
    "<a href=\"javascript:window.__xss='a'\">a</a>",
    "<iframe src=\"javascript:window.__xss='iframe'\"></iframe>",
    "```\n</code></pre><img src=x onerror=\"window.__xss='fence'\">\n```",
    "| <img src=x onerror=\"window.__xss='cell'\"> |\n|---|\n| x |",
    "<details open ontoggle=\"window.__xss='details'\">",
    "`<img src=x onerror=\"window.__xss='code'\">`",
]


def test_a_conversation_from_the_first_load(browser, web, http):
    """Start one, Markdown replies (and no HTML run), the title from the first
    message, keyboard, usage per reply, regenerate, edit and resend, fork from a
    message, a system prompt, the model picker and a failed send."""
    from playwright.sync_api import expect

    page = ready(
        open_page(browser, web.url, csp=False, permissions=["clipboard-read", "clipboard-write"])
    )
    expect(page.get_by_role("heading", name="Start a conversation")).to_be_visible()
    expect(page.get_by_role("navigation", name="Sessions")).to_be_visible()
    expect(page.get_by_role("searchbox", name="Search")).to_be_visible()
    expect(page.get_by_role("button", name="New session")).to_be_visible()
    model = page.get_by_role("combobox", name="Model")
    expect(model.locator("option")).to_have_text(["Default model", "echo", "broken", "slow"])

    box = page.get_by_role("textbox", name="Message")
    box.click()
    box.type("Packing list")
    box.press("Shift+Enter")
    box.type("for the trip")
    assert box.input_value() == "Packing list\nfor the trip"
    expect(page.get_by_role("article")).to_have_count(0)  # Shift+Enter sent nothing
    box.press("Enter")
    first = page.get_by_role("article", name="assistant message 2")
    expect(first).to_contain_text("for the trip")
    expect(first.locator(".usage")).to_have_text(
        re.compile(r"^echo · \d+ in · \d+ out · \d+\.\d\d s$")
    )
    expect(page.get_by_role("article", name=re.compile("^user"))).to_have_count(1)
    link = page.get_by_role("navigation", name="Sessions").get_by_role(
        "link", name=re.compile("Packing list")
    )
    expect(link).to_have_attribute("aria-current", "page")
    session_id = link.get_attribute("data-id")
    assert session_id.startswith("conv_")
    assert stored(http, session_id)["metadata"]["title"] == "Packing list"
    written = [m["created_at"] for m in stored(http, session_id)["messages"]]
    times = page.get_by_role("article").locator("time")
    expect(times).to_have_count(2)
    assert [times.nth(i).get_attribute("datetime") for i in range(2)] == [iso(t) for t in written]
    expect(times.first).to_have_text(re.compile(r"\d:\d\d"))
    expect(box).to_have_value("")

    box.fill(MARKDOWN)
    page.get_by_role("button", name="Send").click()
    reply = page.get_by_role("article", name="assistant message 4")
    expect(reply.locator("h4")).to_have_text("Plan")
    expect(reply.locator("ul > li")).to_have_count(3)
    expect(reply.locator("ul ul > li")).to_have_text(["nested"])
    expect(reply.locator("ol > li")).to_have_text(["first", "second"])
    expect(reply.locator("th")).to_have_text(["day", "km"])
    expect(reply.locator("td").last).to_have_css("text-align", "right")
    expect(reply.locator(".code pre code")).to_have_text("print('hi')")
    expect(reply.locator(".code code .hl-f")).to_have_text(["print"])  # highlighted
    expect(reply.locator(".code code .hl-s")).to_have_text(["'hi'"])
    assert reply.locator(".hl-s").evaluate("n => getComputedStyle(n).color") != reply.locator(
        ".code code"
    ).evaluate("n => getComputedStyle(n).color")
    expect(reply.locator("strong")).to_have_text("bold")
    expect(reply).to_contain_text('<img src=x onerror="window.__xss = 1">')
    expect(reply).to_contain_text("<script>window.__xss = 2</script>")
    assert reply.locator("img, script, a[href^='javascript' i]").count() == 0
    reply.get_by_role("button", name="Copy code").click()
    expect(reply.get_by_role("button", name="Copy code")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == "print('hi')"

    # the renderer against the usual payloads: nothing runs, nothing active is made
    made = page.evaluate(
        """async (payloads) => {
            const {renderMarkdown} = await import('/app/markdown.js');
            const box = document.createElement('div');
            for (const text of payloads) box.append(renderMarkdown(text));
            document.body.append(box);
            await new Promise((done) => setTimeout(done, 50));
            const active = box.querySelectorAll(
                'script, img, svg, iframe, details, [onerror], [onload], [ontoggle], '
                + 'a[href^="javascript" i]');
            const text = box.textContent;
            box.remove();
            return {active: active.length, text};
        }""",
        XSS,
    )
    assert made["active"] == 0
    assert "<script>window.__xss = 'script'</script>" in made["text"]
    assert page.evaluate("window.__xss") is None

    before = stored(http, session_id)["messages"]
    page.get_by_role("button", name="Regenerate").click()
    wait_until(
        lambda: stored(http, session_id)["messages"][-1]["request_id"] != before[-1]["request_id"]
    )
    again = stored(http, session_id)["messages"]
    assert len(again) == 4 and again[2]["content"] == MARKDOWN
    expect(page.get_by_role("article")).to_have_count(4)
    expect(page.locator("article.pending")).to_have_count(0)

    page.get_by_role("article", name="user message 3").get_by_role("button", name="Edit").click()
    expect(box).to_have_value(MARKDOWN)
    expect(page.get_by_role("button", name="Cancel edit")).to_be_visible()
    box.fill("Edited question")
    box.press("Enter")
    expect(page.get_by_role("article", name="assistant message 4")).to_have_text(
        re.compile("Edited question")
    )
    expect(page.get_by_role("article")).to_have_count(4)
    assert [m["content"] for m in stored(http, session_id)["messages"]][2:] == [
        "Edited question"
    ] * 2

    page.get_by_role("button", name="System prompt").click()
    dialog = page.get_by_role("dialog", name="System prompt")
    dialog.get_by_role("textbox").fill("Answer in French.")
    dialog.get_by_role("button", name="Save").click()
    expect(dialog).to_be_hidden()
    assert stored(http, session_id)["metadata"]["system_prompt"] == "Answer in French."

    page.get_by_role("button", name="Fork from message 1", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Packing list (fork)")
    expect(page.get_by_role("article")).to_have_count(1)
    fork_id = page.locator("a.session[aria-current=page]").get_attribute("data-id")
    fork = stored(http, fork_id)
    assert fork["metadata"]["forked_from"] == session_id
    forks = page.get_by_role("list", name="Forks of Packing list")  # under its origin
    expect(forks.get_by_role("link")).to_have_text([re.compile(r"^Packing list \(fork\)")])
    origin = page.locator("#sessions > li").filter(has=page.locator(f"a[data-id='{session_id}']"))
    expect(origin.locator(f"ul.forks a[data-id='{fork_id}']")).to_have_count(1)
    assert [m["content"] for m in fork["messages"]] == ["Packing list\nfor the trip"]

    # a failed send: the text stays, one line says what went wrong, nothing is saved
    model.select_option("broken")
    box.fill("this one fails")
    box.press("Enter")
    error = page.get_by_role("alert")
    expect(error).to_contain_text("Not sent:")
    expect(error).to_contain_text("the connection was refused")
    assert "\n" not in error.inner_text()
    expect(box).to_have_value("this one fails")
    expect(page.get_by_role("article")).to_have_count(1)
    assert len(stored(http, fork_id)["messages"]) == 1
    model.select_option("")
    box.press("Enter")
    expect(page.get_by_role("article")).to_have_count(3)
    expect(error).to_be_hidden()
    assert page.errors == []


SCROLL_TO = """async (node, end) => {  // scroll to an end until its message is there
    const frame = () => new Promise((done) => requestAnimationFrame(done));
    const done = () => end === "top" ? node.querySelector("article[data-index='0']")
        : node.querySelector("article:last-of-type .footer button[aria-label='Regenerate']");
    const edge = () => node.querySelector("article[data-index]")?.dataset.index;
    let scrolls = 0;
    while (!done() && scrolls < 100) {
        const shown = edge();
        node.scrollTop = end === "top" ? 0 : node.scrollHeight;
        scrolls++;
        for (let i = 0; i < 60 && edge() === shown; i++) await frame();
    }
    node.scrollTop = end === "top" ? 0 : node.scrollHeight;
    return scrolls;
}"""


def long_message(sections: int, session_id: str = "long-message") -> list[dict]:
    """A session whose reply is ``sections`` sections of Markdown, then THE VERY END."""
    section = (
        "## Part {n}\n\nSome *text* of part {n}.\n\n"
        "```python\ndef part_{n}():\n    return {n}\n```\n\n"
    )
    text = "".join(section.format(n=n) for n in range(sections)) + "THE VERY END"
    messages = [
        {"role": "user", "content": "everything, please", "created_at": 1_700_000_000_000},
        {"role": "assistant", "content": text, "created_at": 1_700_000_001_000},
    ]
    metadata = {"title": session_id.replace("-", " ").capitalize(), "created_at": 1_700_000_000_000}
    return [{"session_id": session_id, "messages": messages, "variables": {}, "metadata": metadata}]


def long_session(count: int) -> list[dict]:
    messages = [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"message {i + 1}" + (" zebra-needle" if i == 500 else ""),
            "created_at": 1_700_000_000_000 + i,
        }
        for i in range(count)
    ]
    metadata = {"created_at": 1_700_000_000_000, "last_active": 1_700_000_000_000}
    return [{"session_id": "long", "messages": messages, "variables": {}, "metadata": metadata}]


def test_sessions_search_trash_attachments_and_layout(browser, web, http, tmp_path, axe_script):
    """Imported titles, search opening a session at the match, a thousand messages
    rendered as they are scrolled to, rename, delete and undo, attachments by
    picker, drop and paste, long lines, light and dark, phone width, axe."""
    from cli.imports.test_chatgpt import chatgpt_export
    from playwright.sync_api import expect

    exported = tmp_path / "conversations.json"
    exported.write_text(json.dumps(chatgpt_export()))
    imported = run_cli(
        web.home, "sessions", "import", "--format", "chatgpt", "--branches", "all", str(exported)
    )
    assert imported.returncode == 0, imported.stderr
    (tmp_path / "long.json").write_text(json.dumps(long_session(1000) + long_message(2000)))
    assert run_cli(web.home, "sessions", "import", str(tmp_path / "long.json")).returncode == 0

    page = ready(open_page(browser, web.url, csp=False))
    sessions = page.get_by_role("navigation", name="Sessions")
    expect(sessions.get_by_role("link", name=re.compile("^Tokyo trip"))).to_have_count(
        3
    )  # and branches
    assert axe_violations(page, axe_script) == []
    screenshot(page, "first-load-desktop")

    page.keyboard.press("Control+k")
    search = page.get_by_role("searchbox", name="Search")
    expect(search).to_be_focused()
    search.fill("zebra")
    hit = page.locator("#search-results a.hit")
    expect(hit).to_have_count(1)
    expect(hit.locator("mark")).to_have_text("zebra")
    hit.click()
    target = page.get_by_role("article", name="user message 501")
    expect(target).to_be_focused()
    expect(target).to_have_class(re.compile("hit"))
    assert page.get_by_role("article").count() < 200  # a window of the session, not all of it

    page.keyboard.press("/")
    expect(search).to_be_focused()
    page.keyboard.press("Escape")
    sessions.get_by_role("link", name=re.compile("^long")).click()
    articles = page.get_by_role("article")
    expect(page.get_by_role("article", name="assistant message 1000")).to_be_visible()
    assert articles.count() <= 40
    expect(page.get_by_role("article", name="assistant message 1000")).to_contain_text(
        "message 1000"
    )
    transcript = page.locator("#transcript")
    scrolls = transcript.evaluate(SCROLL_TO, "top")
    assert 20 <= scrolls <= 30  # 40 at a time
    assert page.locator("article").first.get_attribute("aria-label") == "user message 1"
    first_one = page.get_by_role("article", name="user message 1", exact=True)
    expect(first_one.locator(".body")).to_have_text("message 1")  # rendered near the screen
    assert articles.count() <= 120  # the window moved: those furthest below left the page
    expect(page.get_by_role("article", name="assistant message 1000")).to_have_count(0)
    assert 20 <= transcript.evaluate(SCROLL_TO, "bottom") <= 30  # and back to the end
    expect(page.get_by_role("article", name="assistant message 1000")).to_be_in_viewport()
    assert articles.count() <= 120
    expect(page.get_by_role("article", name="user message 1")).to_have_count(0)

    # a long message shows its start, and all of it on asking
    sessions.get_by_role("link", name=re.compile("^Long message")).click()
    long_one = page.get_by_role("article", name="assistant message 2")
    expect(long_one.get_by_role("button", name="Show all")).to_be_visible()
    expect(long_one.locator(".cut")).to_contain_text("more characters")
    expect(long_one).not_to_contain_text("THE VERY END")
    assert long_one.locator("h4").count() < 300  # a piece of it, not the 2,000 sections
    long_one.get_by_role("button", name="Show all of message 2").click()
    expect(long_one.get_by_role("button", name="Show less of message 2")).to_be_focused()
    end = long_one.get_by_text("THE VERY END")
    wait_until(  # to the bottom, as the pieces on the way are rendered
        lambda: transcript.evaluate(SCROLL_TO, "bottom") == 0 and end.count() == 1,
        what="the end of the long message",
    )
    end.scroll_into_view_if_needed()
    expect(end).to_be_in_viewport()
    assert axe_violations(page, axe_script) == []
    screenshot(page, "long-message-desktop")
    expect(long_one.locator(".code code .hl-f").last).to_have_text("part_1999")
    assert long_one.locator("h4").count() < 1000  # the pieces far from the screen are emptied
    long_one.get_by_role("button", name="Show less").click()
    expect(long_one.get_by_role("button", name="Show all")).to_be_focused()
    expect(long_one).not_to_contain_text("THE VERY END")

    # rename, then delete and undo
    sessions.get_by_role("link", name=re.compile("^Größe")).click()
    page.get_by_role("button", name="Rename").click()
    dialog = page.get_by_role("dialog", name="Rename session")
    dialog.get_by_role("textbox", name="Name").fill("Sizes")
    dialog.get_by_role("button", name="Save").click()
    renamed = sessions.get_by_role("link", name=re.compile("^Sizes"))
    expect(renamed).to_have_attribute("aria-current", "page")
    renamed_id = renamed.get_attribute("data-id")
    assert stored(http, renamed_id)["metadata"]["title"] == "Sizes"
    page.get_by_role("button", name="Delete").click()
    expect(page.get_by_role("status")).to_contain_text("Deleted “Sizes”.")
    expect(renamed).to_have_count(0)
    assert http.get(f"/v1/sessions/{renamed_id}").status_code == 404
    page.get_by_role("status").get_by_role("button", name="Undo").click()
    expect(renamed).to_have_attribute("aria-current", "page")
    assert stored(http, renamed_id)["metadata"]["title"] == "Sizes"

    # attachments: the picker, a drop and a paste
    page.get_by_role("button", name="New session").click()
    page.set_input_files(
        "#files", files=[{"name": "notes.txt", "mimeType": "text/plain", "buffer": b"picked words"}]
    )
    hand_over(page.locator("#main"), "drop", "dropped.md", b"dropped words", "text/markdown")
    box = page.get_by_role("textbox", name="Message")
    hand_over(box, "paste", "pasted.txt", b"pasted words", "text/plain")
    chips = page.locator("#chips .chip")
    expect(chips).to_have_count(3)
    page.get_by_role("button", name="Remove pasted.txt").click()
    expect(chips).to_have_count(2)
    hand_over(box, "paste", "pasted.txt", b"pasted words", "text/plain")
    box.fill("three files")
    box.press("Enter")
    reply = page.get_by_role("article", name="assistant message 2")
    for words in ("picked words", "dropped words", "pasted words"):
        expect(reply).to_contain_text(words)
    expect(page.get_by_role("article", name="user message 1").locator(".chip")).to_have_count(3)
    expect(chips).to_have_count(0)

    # long lines wrap, long code scrolls inside its block
    box.fill("x" * 3000 + "\n\n```python\n# a comment\nprint('" + "y" * 800 + "', 42, None)\n```")
    box.press("Enter")
    long_reply = page.get_by_role("article", name="assistant message 4")
    expect(long_reply.locator("pre")).to_have_count(1)
    assert long_reply.evaluate("node => node.scrollWidth <= node.clientWidth")
    assert long_reply.locator("pre").evaluate("node => node.scrollWidth > node.clientWidth")
    assert no_sideways_scroll(page)
    assert axe_violations(page, axe_script) == []
    screenshot(page, "session-desktop")

    page.emulate_media(color_scheme="dark")
    expect(page.locator("body")).to_have_css("background-color", "rgb(22, 24, 28)")
    assert axe_violations(page, axe_script) == []
    screenshot(page, "session-desktop-dark")
    page.emulate_media(color_scheme="light")
    expect(page.locator("body")).to_have_css("background-color", "rgb(255, 255, 255)")

    phone = ready(open_page(browser, web.url, PHONE, csp=False, is_mobile=True, has_touch=True))
    expect(phone.get_by_role("textbox", name="Message")).to_be_visible()
    expect(phone.get_by_role("button", name="Send")).to_be_visible()
    assert no_sideways_scroll(phone)
    screenshot(phone, "first-load-phone")
    phone.get_by_role("button", name="Show sessions").click()
    phone.get_by_role("navigation", name="Sessions").get_by_role("link", name="Sizes").click()
    expect(phone.get_by_role("article", name=re.compile("^assistant")).first).to_be_visible()
    expect(phone.get_by_role("navigation", name="Sessions")).not_to_be_in_viewport()
    assert no_sideways_scroll(phone)
    assert axe_violations(phone, axe_script) == []
    screenshot(phone, "session-phone")
    assert page.errors == [] and phone.errors == []


def test_a_large_message_under_the_pages_policy(browser, web, tmp_path):
    """A 2 MB message opens with its start shown and the message box ready; Show all
    finds its pieces in a worker the page's policy allows; nothing is asked of
    any origin but the page's own."""
    from playwright.sync_api import expect

    (tmp_path / "large.json").write_text(json.dumps(long_message(25_000, "large-message")))
    assert run_cli(web.home, "sessions", "import", str(tmp_path / "large.json")).returncode == 0
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    asked, workers, said = [], [], []
    page.on("request", lambda request: asked.append(request.url))
    page.on("worker", lambda worker: workers.append(worker.url))
    page.on("console", lambda message: said.append(message.text))
    page.goto(web.url + "/#s=large-message")
    large = page.get_by_role("article", name="assistant message 2")
    expect(large).to_be_in_viewport()
    expect(page.get_by_role("textbox", name="Message")).to_be_focused()
    expect(large.locator(".cut")).to_contain_text("more characters")
    large.get_by_role("button", name="Show all").click()
    expect(large.locator(".piece")).not_to_have_count(0)
    assert large.locator(".piece").count() > 100  # 2 MB in pieces of about 16,000 characters
    assert workers == [web.url + "/app/markdown-worker.js"]

    # a tool's long result: its start, then all of it, as the text it is
    output = "".join(f"line {n} <b>not bold</b>\n" for n in range(20_000)) + "LAST LINE"
    tooled = [
        {"role": "user", "content": "read it", "created_at": 1_700_000_000_000},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "x"}}],
            "created_at": 1_700_000_000_001,
        },
        {
            "role": "tool",
            "tool_call_id": "c1",
            "name": "read_file",
            "content": output,
            "created_at": 1_700_000_000_002,
        },
        {"role": "assistant", "content": "done", "created_at": 1_700_000_000_003},
    ]
    session = {"session_id": "tooled", "messages": tooled, "variables": {}, "metadata": {}}
    (tmp_path / "tooled.json").write_text(json.dumps([session]))
    assert run_cli(web.home, "sessions", "import", str(tmp_path / "tooled.json")).returncode == 0
    page.goto(web.url + "/#s=tooled")
    result = page.get_by_role("article", name="tool message 3")
    result.get_by_text("Result of read_file").click()
    expect(result.locator("pre").first).to_contain_text("line 0 <b>not bold</b>")
    expect(result).not_to_contain_text("LAST LINE")
    result.get_by_role("button", name="Show all").click()
    end = result.get_by_text("LAST LINE")
    to_end = "node => { node.scrollIntoView(false); return true; }"  # as its pieces are rendered
    wait_until(lambda: result.evaluate(to_end) and end.count() == 1, what="the result's end")
    assert result.locator("b").count() == 0
    assert said == []  # no policy refused anything
    assert asked and all(url.startswith(web.url + "/") for url in asked)
    context.close()


def test_stop_a_busy_session_and_an_image(browser, web, http, upstream):
    """Stop (Escape) cancels the running turn and saves nothing of it; a turn that
    waits for a busy session says so, then runs; a pasted image reaches the model."""
    import threading

    from playwright.sync_api import expect

    release = threading.Event()
    upstream.queue(
        Reply(events=openai_stream_events(["partial ", "never"]), stall=release, stall_after=3)
    )
    page = ready(open_page(browser, web.url))
    page.get_by_role("combobox", name="Model").select_option("slow")
    box = page.get_by_role("textbox", name="Message")
    box.fill("stop me")
    box.press("Enter")
    expect(page.get_by_role("article", name="assistant message")).to_contain_text("partial")
    expect(page.get_by_role("button", name="Send")).to_be_hidden()
    session_id = page.evaluate("new URLSearchParams(location.hash.slice(1)).get('s')")
    page.get_by_role("button", name="Stop").focus()
    page.keyboard.press("Escape")
    expect(page.get_by_role("status")).to_contain_text("Stopped: nothing of that turn was saved.")
    expect(box).to_have_value("stop me")
    expect(page.get_by_role("button", name="Send")).to_be_visible()
    release.set()
    assert http.get(f"/v1/sessions/{session_id}").status_code == 404  # it was never saved

    assert run_cli(web.home, "chat", "-s", "busy-s", "first").returncode == 0
    page.get_by_role("combobox", name="Model").select_option("")
    page.goto(web.url + "/#s=busy-s")
    ready(page)
    box = page.get_by_role("textbox", name="Message")
    with held(web.home, "busy-s"):
        box.fill("after the other")
        box.press("Enter")
        expect(page.get_by_role("status")).to_contain_text("Session busy")
        expect(page.get_by_role("button", name="Stop")).to_be_visible()
    expect(page.get_by_role("article", name="assistant message 4")).to_contain_text(
        "after the other"
    )
    assert [m["content"] for m in stored(http, "busy-s")["messages"]][-1] == "after the other"

    upstream.queue(Reply(events=openai_stream_events(["a tiny picture"])))
    page.get_by_role("combobox", name="Model").select_option("slow")
    hand_over(box, "paste", "dot.png", PNG, "image/png")
    expect(page.locator("#chips .chip")).to_have_count(1)
    box.fill("what is this?")
    box.press("Enter")
    expect(page.get_by_role("article", name="assistant message 6")).to_contain_text(
        "a tiny picture"
    )
    expect(page.get_by_role("article", name="user message 5").locator("img.thumb")).to_have_count(1)
    usage = page.get_by_role("article", name="assistant message 6").locator(".usage")
    expect(usage).to_have_text(re.compile(r"^slow \(openai:m\) · "))  # the name it was picked by
    assert stored(http, "busy-s")["messages"][4]["model_alias"] == "slow"
    sent = upstream.requests[-1].body["messages"][-1]["content"]
    assert any(part.get("type") == "image_url" for part in sent)
    assert page.errors == []


def test_the_key_is_asked_once_and_shows_only_its_users_sessions(browser, start_server, tmp_path):
    from playwright.sync_api import expect

    keys = tmp_path / "keys.toml"
    keys.write_text('[keys]\n"alice-key" = "alice"\n"bob-key" = "bob"\n')
    keys.chmod(0o600)
    server = start_server("--api-keys", str(keys))
    import httpx2 as httpx

    for key, name in (("alice-key", "alices-notes"), ("bob-key", "bobs-notes")):
        seeded = httpx.post(
            server.url + "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hello"}]},
            headers={"Authorization": f"Bearer {key}", "X-Session-Id": name},
        )
        assert seeded.status_code == 200

    page = open_page(browser, server.url)
    dialog = page.get_by_role("dialog", name="API key")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("alert")).to_have_text("this server needs an API key: enter yours")
    dialog.get_by_label("API key").fill("wrong-key")
    dialog.get_by_role("button", name="Use key").click()
    expect(dialog.get_by_role("alert")).to_have_text(
        "the API key was refused: enter a key this server was given"
    )
    dialog.get_by_label("API key").fill("alice-key")
    dialog.get_by_role("button", name="Use key").click()
    expect(dialog).to_be_hidden()
    sessions = page.get_by_role("navigation", name="Sessions")
    expect(sessions.get_by_role("link")).to_have_text([re.compile("^alices-notes")])
    assert page.evaluate("localStorage.getItem('foliko-api-key')") == "alice-key"

    page.reload()
    ready(page)
    expect(page.get_by_role("dialog")).to_be_hidden()
    expect(sessions.get_by_role("link")).to_have_text([re.compile("^alices-notes")])
    box = page.get_by_role("textbox", name="Message")
    box.fill("from the browser")
    box.press("Enter")
    expect(page.get_by_role("article", name="assistant message 2")).to_contain_text(
        "from the browser"
    )
    assert page.errors == []
