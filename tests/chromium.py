"""Headless Debian Chromium driven through the DevTools protocol over a pipe (no extra package).

``--remote-debugging-pipe`` makes Chromium read protocol commands from fd 3 and write replies and
events to fd 4, each message a JSON text followed by a NUL byte: no websocket client needed.
The browser gets no network: every host name but 127.0.0.1 resolves to nothing, background
services are off, and each request the page makes is recorded so a test can assert that none
left the machine.

    with Chromium() as browser:
        page = browser.open("http://127.0.0.1:8000/")
        page.evaluate("document.title")
        page.screenshot(path)
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("TOKENWATT_CHROMIUM", "/usr/bin/chromium")

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--mute-audio",
    "--hide-scrollbars",
    # Network off: nothing but the loopback test server resolves, and no proxy is consulted.
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    "--no-proxy-server",
]


class ChromiumError(RuntimeError):
    """The browser failed to start, answered with an error, or did not answer in time."""


def require_chromium() -> str:
    """The path of Debian's chromium; a clear failure if it is missing (never a skip)."""
    path = shutil.which(CHROMIUM) or shutil.which("chromium")
    if path is None:
        raise ChromiumError(
            f"Chromium not found at {CHROMIUM}: install Debian's package with"
            " scripts/setup.d/40-chromium.sh (apt-get install chromium)"
        )
    return path


@dataclass
class Page:
    """One tab, attached through a flat session."""

    browser: Chromium
    session_id: str
    requests: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.browser.call(method, params, session_id=self.session_id)

    def evaluate(self, expression: str) -> Any:
        reply = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in reply:
            raise ChromiumError(f"script failed: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def screenshot(self, path: Path, *, full_page: bool = True) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params["clip"] = {
                "x": 0,
                "y": 0,
                "width": size["width"],
                "height": min(size["height"], 8000),
                "scale": 1,
            }
            params["captureBeyondViewport"] = True
        data = self.call("Page.captureScreenshot", params)["data"]
        path.write_bytes(base64.b64decode(data))
        return path


class Chromium:
    """A headless Chromium process and its protocol pipe."""

    def __init__(self, *, timeout_s: float = 30.0, width: int = 1280, height: int = 900) -> None:
        self.timeout_s = timeout_s
        self.width = width
        self.height = height
        self._next_id = 0
        self._buffer = b""
        self._events: list[dict[str, Any]] = []
        self._pages: dict[str, Page] = {}

    def __enter__(self) -> Chromium:
        binary = require_chromium()
        self._profile = tempfile.mkdtemp(prefix="tw-chromium-")
        cmd_read, self._cmd_write = os.pipe()
        self._reply_read, reply_write = os.pipe()
        args = [binary, *FLAGS, f"--user-data-dir={self._profile}", "--remote-debugging-pipe"]
        # A file, not a pipe: nobody reads Chromium's log while it runs, and a full pipe blocks it.
        self._log = Path(tempfile.mkstemp(prefix="tw-chromium-", suffix=".log")[1])
        log = self._log.open("wb")
        # The shell puts the pipe ends on fds 3 and 4, where Chromium expects them.
        self._proc = subprocess.Popen(
            ["bash", "-c", f'exec "$@" 3<&{cmd_read} 4>&{reply_write}', "chromium", *args],
            pass_fds=(cmd_read, reply_write),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        log.close()
        os.close(cmd_read)
        os.close(reply_write)
        try:
            self.call("Browser.getVersion")
        except ChromiumError:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._proc.poll() is None:
                with contextlib.suppress(ChromiumError):
                    self.call("Browser.close", timeout_s=5)
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
        finally:
            for fd in (self._cmd_write, self._reply_read):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._log.unlink(missing_ok=True)
            shutil.rmtree(self._profile, ignore_errors=True)

    # -- protocol ------------------------------------------------------------------------------

    def _send(self, message: dict[str, Any]) -> None:
        os.write(self._cmd_write, json.dumps(message).encode() + b"\0")

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChromiumError("no answer from Chromium in time")
            ready, _, _ = select.select([self._reply_read], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._reply_read, 1 << 20)
            if not chunk:
                err = self._log.read_text(errors="replace")[-2000:]
                raise ChromiumError(f"Chromium closed the pipe (exit {self._proc.poll()}): {err}")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def _dispatch(self, message: dict[str, Any]) -> None:
        page = self._pages.get(message.get("sessionId", ""))
        method = message.get("method")
        params = message.get("params", {})
        if page is not None:
            if method == "Network.requestWillBeSent":
                page.requests.append(params["request"]["url"])
            elif method == "Network.loadingFailed":
                page.failed.append((params.get("requestId", ""), params.get("errorText", "")))
            elif method == "Runtime.exceptionThrown":
                page.console_errors.append(json.dumps(params.get("exceptionDetails", {}))[:500])
        self._events.append(message)

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        session_id: str | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session_id is not None:
            message["sessionId"] = session_id
        self._send(message)
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise ChromiumError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self._dispatch(reply)

    def wait_event(self, method: str, *, session_id: str, timeout_s: float | None = None) -> None:
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while True:
            for i, event in enumerate(self._events):
                if event.get("method") == method and event.get("sessionId") == session_id:
                    del self._events[i]
                    return
            self._dispatch(self._read_message(deadline))

    # -- pages ---------------------------------------------------------------------------------

    def open(self, url: str) -> Page:
        """Open a new tab at ``url`` and wait for its load event."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})
        page = Page(self, session["sessionId"])
        self._pages[page.session_id] = page
        page.call("Page.enable")
        page.call("Network.enable")
        page.call("Runtime.enable")
        page.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
        )
        self._events.clear()
        page.call("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired", session_id=page.session_id)
        return page
