"""Start and stop the real third-party test peers of ../shared/peers from tests.

Each ``start-*.sh`` script installs what is missing, starts its server in the background, waits
until it answers and prints its PID. Tests use them through session fixtures; a peer that cannot
start fails the test that needs it (never a silent skip), with the script's own message.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Peer:
    """A running peer server."""

    name: str
    port: int
    pid: int
    group: bool = False
    model: str | None = None
    """The model name requests must carry, where the server insists on one."""

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            if self.group:
                os.killpg(self.pid, signal.SIGTERM)
            else:
                os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            if self.group:
                os.killpg(self.pid, signal.SIGKILL)
            else:
                os.kill(self.pid, signal.SIGKILL)


def run_start_script(
    script: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout_s: float = 1800,
) -> int:
    """Run a peer's start script and return the PID it prints.

    Raises:
        RuntimeError: with the script's stderr when it fails.
    """
    proc = subprocess.run(
        ["bash", str(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, **(env or {})},
        check=False,
    )
    lines = [ln for ln in proc.stdout.split() if ln.strip().isdigit()]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"{script.name} {' '.join(args)} failed (exit {proc.returncode}):\n"
            f"{proc.stderr[-3000:]}\n{proc.stdout[-1000:]}"
        )
    return int(lines[-1])


LATE_START_S = 300.0
"""How much longer :class:`BackgroundStarts` waits for a server its start script gave up on."""


def _late_start(port: int, failure: RuntimeError) -> int:
    """The process group of a server on ``port`` that its start script stopped waiting for
    ("did not become healthy"), once it answers ``/health``; re-raises ``failure`` otherwise."""
    if "did not become healthy" not in str(failure):
        raise failure
    leaders = [
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit()
        and _serves_on(entry, port)
        and os.getpgid(int(entry.name)) == int(entry.name)
    ]
    if not leaders:
        raise failure
    try:
        wait_http(f"http://127.0.0.1:{port}/health", timeout_s=LATE_START_S)
    except RuntimeError as exc:
        for pid in leaders:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        raise failure from exc
    return leaders[0]


def _serves_on(proc: Path, port: int) -> bool:
    try:
        argv = (proc / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"serve" in argv and b"--port" in argv and str(port).encode() in argv


class BackgroundStarts:
    """Peers started by their scripts in background threads, waited for when a test needs them.

    A start that failed raises its error in every test that waits for it (never a skip).
    """

    def __init__(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="peer-start")
        self._starts: dict[str, concurrent.futures.Future[Peer]] = {}
        self._stopped: set[str] = set()

    def __contains__(self, key: str) -> bool:
        return key in self._starts

    def start(
        self, key: str, name: str, script: Path, *args: str, after: str | None = None
    ) -> None:
        """Start ``script`` on a free port with ``args``, as peer ``name`` (a process group).

        ``after``: start only once that peer has started (or failed to): two heavy servers
        starting at once on two cores each take twice as long, so the first test waits for both.
        """
        before = self._starts.get(after) if after is not None else None

        def run() -> Peer:
            if before is not None:
                concurrent.futures.wait([before])
            port = free_port()
            try:
                pid = run_start_script(script, str(port), *args)
            except RuntimeError as exc:
                # The script gives up waiting for health after ~200 s and leaves the server
                # starting; on a loaded box it may still come up.
                pid = _late_start(port, exc)
            return Peer(name, port, pid, group=True)

        self._starts[key] = self._pool.submit(run)

    def wait(self, key: str) -> Peer:
        """The peer once it answers; raises what its start raised."""
        return self._starts[key].result()

    def stop(self, key: str) -> None:
        """Stop peer ``key`` if it started (waiting for its start); a second stop does nothing."""
        start = self._starts.get(key)
        if start is not None and key not in self._stopped:
            self._stopped.add(key)
            with contextlib.suppress(Exception):
                start.result().stop()

    def stop_all(self) -> None:
        """Stop every peer that started (waiting for starts still running)."""
        for key in list(self._starts):
            self.stop(key)
        self._pool.shutdown(wait=True)


def wait_http(url: str, *, timeout_s: float = 120.0) -> None:
    """Wait until ``url`` answers with a 2xx status."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2.0).is_success:
                return
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.3)
    raise RuntimeError(f"{url} did not answer within {timeout_s:.0f} s ({last})")


@contextlib.contextmanager
def serve_http(handler: Callable[..., BaseHTTPRequestHandler]) -> Iterator[str]:
    """The standard library's HTTP server on 127.0.0.1 (an ephemeral port), in a thread.

    Yields the base URL (``http://127.0.0.1:PORT``); shuts the server down on exit.
    """
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextlib.contextmanager
def serve_text(page: Callable[[], str]) -> Iterator[str]:
    """A plain HTTP server answering every GET with ``page()``; yields its ``/metrics`` URL.

    For pages no real peer serves on demand (a /metrics page out of format, a scripted
    sequence of values).
    """

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with serve_http(Handler) as base_url:
        yield f"{base_url}/metrics"


def wait_for(predicate: Callable[[], bool], *, timeout_s: float = 10.0) -> None:
    """Poll ``predicate`` until it holds; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)
