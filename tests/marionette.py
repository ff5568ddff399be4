"""Headless Firefox driven over Marionette, its own remote protocol (length-prefixed JSON on a TCP socket), with
the standard library alone: no geckodriver, no client library.

Run as a script inside a network namespace of its own (loopback only), so that Marionette's socket and any request
a page makes stay there: it reads one job (JSON) on stdin, {"firefox": PATH, "profile": DIR, "pages": [{"url": URL,
"scripts": {NAME: JS expression}, "before_screenshot": JS or null, "screenshot": PNG path or null}]}, and writes
one answer on stdout: per page, each script's value (the expression JSON-encoded in the page, decoded here).
"""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

TIMEOUT_S = 60
# Port 0: Firefox picks a free one and writes it into the profile (MarionetteActivePort). The rest keeps a fresh
# profile from opening first-run pages or asking to be the default browser.
PREFS = {
    "marionette.port": 0,
    "browser.shell.checkDefaultBrowser": False,
    "browser.startup.homepage_override.mstone": "ignore",
    "datareporting.policy.dataSubmissionEnabled": False,
    "toolkit.telemetry.reportingpolicy.firstRun": False,
}


class Marionette:
    def __init__(self, address: tuple[str, int]):
        self._socket = socket.create_connection(address, timeout=TIMEOUT_S)
        self._stream = self._socket.makefile("rb")
        self._next = 0
        hello = self._receive()
        if hello.get("marionetteProtocol") != 3:
            raise RuntimeError(f"Marionette speaks another protocol: {hello}")

    def _receive(self):
        length = b""
        while (byte := self._stream.read(1)) != b":":
            if not byte:
                raise EOFError("Firefox closed Marionette's socket")
            length += byte
        return json.loads(self._stream.read(int(length)))

    def send(self, command: str, **params):
        self._next += 1
        data = json.dumps([0, self._next, command, params]).encode()
        self._socket.sendall(str(len(data)).encode() + b":" + data)
        kind, number, error, result = self._receive()
        if kind != 1 or number != self._next:
            raise RuntimeError(f"{command}: an answer out of turn: {[kind, number, error, result]}")
        if error is not None:
            raise RuntimeError(f"{command}: {error}")
        return result

    def evaluate(self, expression: str):
        return json.loads(self.send("WebDriver:ExecuteScript", script=f"return {expression};", args=[])["value"])


def start(firefox: str, profile: Path) -> tuple[subprocess.Popen, Marionette]:
    profile.mkdir(parents=True, exist_ok=True)
    prefs = "".join(f"user_pref({json.dumps(name)}, {json.dumps(value)});\n" for name, value in PREFS.items())
    (profile / "user.js").write_text(prefs)
    argv = [firefox, "--headless", "--marionette", "--no-remote", "-profile", str(profile), "about:blank"]
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=sys.stderr, stderr=subprocess.STDOUT)
    port_file = profile / "MarionetteActivePort"
    deadline = time.monotonic() + TIMEOUT_S
    while not (port_file.is_file() and port_file.read_text().strip()):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"Firefox did not start Marionette (exit {process.poll()})")
        time.sleep(0.1)
    client = Marionette(("127.0.0.1", int(port_file.read_text())))
    client.send("WebDriver:NewSession", capabilities={})
    return process, client


def run(job: dict) -> list[dict]:
    process, client = start(job["firefox"], Path(job["profile"]))
    answers = []
    try:
        for page in job["pages"]:
            client.send("WebDriver:SetWindowRect", width=1280, height=900)
            client.send("WebDriver:Navigate", url=page["url"])  # returns once the page has loaded
            answers.append({name: client.evaluate(script) for name, script in page["scripts"].items()})
            if page.get("before_screenshot"):
                client.send("WebDriver:ExecuteScript", script=page["before_screenshot"], args=[])
            if page.get("screenshot"):
                shot = client.send("WebDriver:TakeScreenshot", full=True, hash=False)["value"]
                Path(page["screenshot"]).write_bytes(base64.b64decode(shot))
    finally:
        try:
            client.send("Marionette:Quit", flags=["eForceQuit"])
        except (EOFError, OSError, RuntimeError):
            pass
        try:
            process.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return answers


if __name__ == "__main__":
    json.dump(run(json.load(sys.stdin)), sys.stdout)
