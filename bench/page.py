"""PAGE: the web app in Debian's Chromium (headless, driven by Playwright).

- load: from ``page.goto`` to the app ready (sessions listed, models known),
  each run against a ``foliko serve`` just started (cold) over a store of
  SESSIONS sessions, in a browser context of its own (nothing cached).
  Target: under 300 ms.
- scroll: a session of MESSAGES messages opened, then scrolled from its end
  to its start a screen at a time, one step a frame, while earlier messages
  are rendered as they come into reach; the figure is the 95th percentile of
  the frame times. Target: at most 50 ms (20 frames a second) on 2 cores.
"""

from __future__ import annotations

import os
import shutil
import sys
import time

from common import (
    PYTHON,
    Result,
    Workspace,
    canonical_messages,
    failed,
    log,
    main_single,
    percentile,
    start_server,
    stop_server,
)

LOAD_TARGET_S = 0.3
FRAME_TARGET_S = 0.05
SCROLL = """async (node) => {
    const frame = () => new Promise((done) => requestAnimationFrame(done));
    const times = [];
    let last = await frame();
    for (let steps = 0; steps < 5000; steps++) {
        if (node.scrollTop === 0 && node.querySelector("article[data-index='0']")) break;
        node.scrollTop = Math.max(0, node.scrollTop - node.clientHeight);
        const now = await frame();
        times.push(now - last);
        last = now;
    }
    return times;
}"""


def _chromium() -> str:
    found = "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else shutil.which("chromium")
    if not found:
        raise RuntimeError("Chromium is not installed (apt-get install chromium)")
    return found


def _seed(ws: Workspace, env: dict[str, str], sessions: int, messages: int) -> None:
    import orjson

    records = [
        {
            "session_id": f"s{index:04d}",
            "messages": canonical_messages(f"s{index:04d}", 2, 1_700_000_000_000 + index),
            "variables": {},
            "metadata": {"title": f"Session {index}"},
        }
        for index in range(sessions)
    ]
    records.append(
        {
            "session_id": "long",
            "messages": canonical_messages("long", messages, 1_800_000_000_000),
            "variables": {},
            "metadata": {"title": "A long session"},
        }
    )
    path = ws.fresh("page-seed") / "sessions.json"
    path.write_bytes(orjson.dumps(records))
    import subprocess

    subprocess.run(
        [PYTHON, "-m", "foliko_cli", "sessions", "import", str(path)],
        env=env,
        check=True,
        capture_output=True,
    )


def run(ws: Workspace, quick: bool = False) -> list[Result]:
    runs = 2 if quick else 7
    sessions, messages = (20, 200) if quick else (200, 1000)
    load = Result(
        "PAGE", f"page: load from a cold server ({sessions} sessions)", "s", target="< 0.3 s"
    )
    scroll = Result(
        "PAGE",
        f"page: scroll {messages:,} messages, p95 frame",
        "s",
        target="<= 0.05 s",
    )
    try:
        from playwright.sync_api import sync_playwright

        executable = _chromium()
        home = ws.fresh("page-home")
        env = ws.env(FOLIKO_HOME=str(home), FOLIKO_MODEL="echo", FOLIKO_STORAGE="sqlite")
        _seed(ws, env, sessions, messages)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=executable, args=["--headless", "--no-sandbox", "--disable-gpu"]
            )
            try:
                frames: list[float] = []
                for _ in range(runs):
                    proc, url = start_server(
                        [PYTHON, "-m", "foliko_cli", "serve", "--port", "0"], env
                    )
                    try:
                        context = browser.new_context(viewport={"width": 1280, "height": 800})
                        page = context.new_page()
                        began = time.perf_counter()
                        page.goto(url + "/")
                        page.wait_for_selector("html[data-ready=true]", state="attached")
                        load.runs.append(time.perf_counter() - began)
                        page.goto(url + "/#s=long")
                        page.wait_for_selector(f"article[data-index='{messages - 1}']")
                        times = page.locator("#transcript").evaluate(SCROLL)
                        frames += [t / 1000 for t in times]
                        if not page.locator("article[data-index='0']").count():
                            raise RuntimeError("the session's first message was never rendered")
                        context.close()
                    finally:
                        stop_server(proc)
            finally:
                browser.close()
    except Exception as exc:
        return [
            failed("PAGE", load.figure, "s", load.target, exc),
            failed("PAGE", scroll.figure, "s", scroll.target, exc),
        ]
    load.met = load.median < LOAD_TARGET_S
    scroll.value = percentile(frames, 0.95)
    scroll.runs = [scroll.value]
    scroll.met = scroll.value <= FRAME_TARGET_S
    scroll.details = {"frames": len(frames), "p50_ms": 1000 * percentile(frames, 0.5)}
    log(
        f"PAGE: load {1000 * load.median:.0f} ms median; scroll p95 frame "
        f"{1000 * scroll.value:.1f} ms over {len(frames)} frames"
    )
    return [load, scroll]


if __name__ == "__main__":
    sys.path.insert(0, ".")
    main_single(run, __doc__)
