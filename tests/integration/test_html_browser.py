"""`envkit report --html` in real browsers: Debian's headless chromium, started by the test in a network
namespace of its own (loopback only), driven over the DevTools protocol on a pipe (no port, no library); and
Debian's headless Firefox ESR, driven over Marionette (tests/marionette.py) from inside such a namespace.

It asserts that the page requested nothing but itself (chromium's network log; Firefox's resource timing, which
lists failed requests too) and broke no Content-Security-Policy, that its tables hold the runs' figures, that each
figure drew (a laid-out, non-empty SVG), and keeps a full-page screenshot under the test's temporary folder.
One rule for both browsers: a test skips where its browser (or a network namespace) is missing, and fails instead
with ENVKIT_REQUIRE_BROWSERS=1 (CI, which installs both).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from paths import DATA
from xla_env import environment_missing

from envkit.cli import main

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium")
FIREFOX = shutil.which("firefox-esr") or shutil.which("firefox")
REQUIRED_BY = "ENVKIT_REQUIRE_BROWSERS"
MARIONETTE = Path(__file__).resolve().parents[1] / "marionette.py"
# In an empty namespace, where any request fails: the loopback interface up for Marionette's socket alone.
IN_EMPTY_NETWORK = ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "browser"]
TIMEOUT_S = 60
PAGES = {
    "commands": (DATA / "results" / "commands", ("--config", str(DATA / "page" / "envkit.yaml"))),
    "e3": (DATA / "results" / "e3", ()),  # the repository's own experiment, with its per-epoch curves and goal
    "mixed-reference": (DATA / "results" / "mixed", ("--reference",)),
}
TABLES = """JSON.stringify([...document.querySelectorAll('table')].map(
    t => [...t.rows].map(r => [...r.cells].map(c => c.innerText.trim()))))"""
FIGURES = """JSON.stringify([...document.querySelectorAll('figure svg')].map(s => {
    const box = s.getBoundingClientRect();
    return {width: box.width, height: box.height, drawn: s.querySelectorAll('path, text').length};
}))"""
RESOURCES = "JSON.stringify(performance.getEntriesByType('resource').map(entry => entry.name))"
OPEN_DETAILS = "document.querySelectorAll('details').forEach(d => d.open = true)"


class DevTools:
    """The DevTools protocol over chromium's --remote-debugging-pipe: JSON messages ending in NUL, commands
    on the child's fd 3 and events and replies on its fd 4."""

    def __init__(self, argv: list[str], log: Path):
        to_browser, self._commands = os.pipe()
        self._replies, from_browser = os.pipe()

        def pipes_at_3_and_4():  # by way of fds above both, so that neither is overwritten before it is moved
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser, from_browser)]
            for wanted, fd in zip((3, 4), high):
                os.dup2(fd, wanted)

        self.process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log.open("wb"), stderr=subprocess.STDOUT,
            pass_fds=(3, 4), preexec_fn=pipes_at_3_and_4,
        )  # fmt: skip
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._next = 0
        self.events: list[dict] = []

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._replies, 1 << 16)
            if not chunk:
                raise EOFError("chromium closed its pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, session: str | None = None, **params) -> dict:
        self._next += 1
        message = {"id": self._next, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next:
                assert "error" not in reply, reply
                return reply["result"]
            self.events.append(reply)

    def wait_for(self, method: str) -> dict:
        deadline = time.monotonic() + TIMEOUT_S
        while not (found := [event for event in self.events if event.get("method") == method]):
            self.events.append(self._read(deadline))
        return found[0]

    def evaluate(self, session: str, expression: str):
        return json.loads(self.send("Runtime.evaluate", session, expression=expression)["result"]["value"])

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (EOFError, TimeoutError, OSError):
            pass
        try:
            self.process.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._commands)
        os.close(self._replies)


@pytest.fixture
def browser(tmp_path):
    if CHROMIUM is None:
        environment_missing("chromium is not installed (Debian: apt-get install chromium)", REQUIRED_BY)
    _require_a_network_namespace()
    argv = [
        *IN_EMPTY_NETWORK, CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}", "about:blank",
    ]  # fmt: skip
    devtools = DevTools(argv, tmp_path / "chromium.log")
    yield devtools
    devtools.close()


def _require_a_network_namespace() -> None:
    if subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode != 0:
        environment_missing(
            "cannot make a network namespace here (unshare --net), and the browser gets no other network", REQUIRED_BY
        )


def _open(browser: DevTools, page: Path) -> tuple[str, list[str], list[str]]:
    """Load ``page`` in a new tab: its session, the URLs requested and the browser's log lines."""
    target = browser.send("Target.createTarget", url="about:blank")["targetId"]
    session = browser.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    for domain in ("Network", "Page", "Runtime", "Log"):
        browser.send(f"{domain}.enable", session)
    browser.send(
        "Emulation.setDeviceMetricsOverride", session, width=1280, height=900, deviceScaleFactor=1, mobile=False
    )
    browser.send("Page.navigate", session, url=page.as_uri())
    browser.wait_for("Page.loadEventFired")
    events = [event for event in browser.events if event.get("sessionId") == session]
    requested = [e["params"]["request"]["url"] for e in events if e.get("method") == "Network.requestWillBeSent"]
    logged = [e["params"]["entry"]["text"] for e in events if e.get("method") == "Log.entryAdded"]
    return session, requested, logged


def test_the_browsers_logs_catch_a_page_that_asks_for_more(browser, tmp_path):
    """The check itself: a page that loads a stylesheet, a script and an image (on a documentation address)."""
    page = tmp_path / "greedy.html"
    page.write_text(
        '<!DOCTYPE html><html><head><link rel="stylesheet" href="http://192.0.2.1/a.css">'
        '<script src="http://192.0.2.1/a.js"></script></head><body><img src="http://192.0.2.1/a.png"></body></html>'
    )
    _, requested, _ = _open(browser, page)
    assert requested[0] == page.as_uri() and len(requested) == 4, requested


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory) -> Path:
    """Under the session's temporary folder, kept when the tests pass (their own tmp_path is not:
    tmp_path_retention_policy), for CI to keep as an artifact and a person to look at."""
    return tmp_path_factory.mktemp("html-screenshots", numbered=False)


@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_page_in_headless_chromium(browser, tmp_path, screenshots, name, capsys):
    directory, options = PAGES[name]
    page = tmp_path / f"{name}.html"
    assert main(["report", str(directory), *options, "--html", str(page)]) == 0
    markdown = capsys.readouterr().out
    session, requested, logged = _open(browser, page)
    assert requested == [page.as_uri()]  # the page itself, and nothing it asked for
    assert not [text for text in logged if "Content Security Policy" in text or "Failed to load" in text], logged

    _assert_shown(markdown, browser.evaluate(session, TABLES), browser.evaluate(session, FIGURES))

    # Opened, so that the screenshot shows what differed too.
    browser.send("Runtime.evaluate", session, expression=OPEN_DETAILS)
    shot = browser.send("Page.captureScreenshot", session, format="png", captureBeyondViewport=True)
    screenshot = screenshots / f"{name}.png"
    screenshot.write_bytes(base64.b64decode(shot["data"]))
    assert screenshot.stat().st_size > 10_000
    print(f"screenshot: {screenshot}")


def _assert_shown(markdown: str, tables: list, figures: list) -> None:
    """The markdown report's rows, cell for cell, are the rows of the page's comparison tables; each figure drew."""
    rows = [
        [cell.strip() for cell in line.strip("|").split(" | ")] for line in markdown.splitlines() if line[:2] == "| "
    ]
    expected = [row for row in rows if row[0] != "---"]
    # A recipe row's speed-up cell gains on the page the spread its model lacks (a comparison's has the model's in
    # both, which tests/runs/test_html_page.py checks cell for cell): compared without it.
    expected = [[re.sub(r"(×) ± [\d.]+$", r"\1", cell) for cell in row] for row in expected]
    shown = [[re.sub(r"(×) ± [\d.]+$", r"\1", cell) for cell in row] for table in tables for row in table]
    assert expected and [row for row in shown if row in expected] == expected
    assert figures
    for figure in figures:
        assert figure["width"] > 100 and figure["height"] > 50 and figure["drawn"] > 10, figure


def _in_firefox(tmp_path: Path, pages: list[dict]) -> list[dict]:
    """Each of ``pages`` (tests/marionette.py's job) in one headless Firefox in an empty network namespace."""
    if FIREFOX is None:
        environment_missing("firefox is not installed (Debian: apt-get install firefox-esr)", REQUIRED_BY)
    _require_a_network_namespace()
    job = {"firefox": FIREFOX, "profile": str(tmp_path / "firefox-profile"), "pages": pages}
    done = subprocess.run(
        [*IN_EMPTY_NETWORK, sys.executable, str(MARIONETTE)],
        input=json.dumps(job), capture_output=True, text=True, timeout=4 * TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)


def test_firefoxs_resource_timing_catches_a_page_that_asks_for_more(tmp_path):
    """The check itself, in Firefox: the greedy page's stylesheet, script and image, each failed, are listed."""
    page = tmp_path / "greedy.html"
    page.write_text(
        '<!DOCTYPE html><html><head><link rel="stylesheet" href="http://192.0.2.1/a.css">'
        '<script src="http://192.0.2.1/a.js"></script></head><body><img src="http://192.0.2.1/a.png"></body></html>'
    )
    [answer] = _in_firefox(tmp_path, [{"url": page.as_uri(), "scripts": {"requested": RESOURCES}}])
    assert sorted(answer["requested"]) == [f"http://192.0.2.1/a.{kind}" for kind in ("css", "js", "png")]


@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_page_in_headless_firefox(tmp_path, screenshots, name, capsys):
    directory, options = PAGES[name]
    page = tmp_path / f"{name}.html"
    assert main(["report", str(directory), *options, "--html", str(page)]) == 0
    markdown = capsys.readouterr().out
    screenshot = screenshots / f"{name}-firefox.png"
    scripts = {"requested": RESOURCES, "tables": TABLES, "figures": FIGURES}
    [answer] = _in_firefox(
        tmp_path,
        [{"url": page.as_uri(), "scripts": scripts, "before_screenshot": OPEN_DETAILS, "screenshot": str(screenshot)}],
    )
    assert answer["requested"] == []  # nothing the page asked for, not even a request that failed
    _assert_shown(markdown, answer["tables"], answer["figures"])
    assert screenshot.stat().st_size > 10_000
    print(f"screenshot: {screenshot}")
