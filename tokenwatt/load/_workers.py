"""Worker processes: each runs one :class:`~tokenwatt.load._shard.Shard` on its own event loop.

The parent talks to them over pipes: ``("probe", ShardPlan)``, ``("stop",)``, ``("exit",)``
in; ``("ready", pid)``, ``("window_done",)``, ``("exceed", ttft, tpot, finished)`` (early stop: the
shard's counts of window requests over the SLO), ``("result", ShardResult)``, ``("error", text)``
out. Workers ignore SIGINT (Ctrl-C reaches the whole process group; the parent decides how
they stop) and exit when the parent's end of the pipe closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from tokenwatt.client.openai import OpenAIClient, TransportName
from tokenwatt.errors import TokenwattError
from tokenwatt.load._shard import (
    ExceedTally,
    Shard,
    ShardPlan,
    ShardResult,
    precise_event_loop,
    reduce_timer_slack,
)
from tokenwatt.load.workload import Workload
from tokenwatt.redact import guard_handlers, guardable
from tokenwatt.schema.spec import EngineSpec

__all__ = ["WorkerInit", "WorkerPool", "serve", "worker_logging", "worker_main"]

logger = logging.getLogger(__name__)

_WORKER_START_TIMEOUT_S = 120.0
_WORKER_EXIT_TIMEOUT_S = 0.4


@dataclass(frozen=True, slots=True)
class WorkerInit:
    """Everything a worker process needs to build its client (sent once, over a pipe)."""

    engine: EngineSpec
    workload: Workload
    base_url: str | None
    env: dict[str, str]
    """Only the API key variable, if the engine names one."""
    headers: dict[str, str]
    request_timeout_s: float
    transport: TransportName
    spin_s: float
    log_level: int


def worker_logging(level: int, env: Mapping[str, str]) -> None:
    """Set up a worker's log handlers with the parent's redaction.

    Auth headers, URL credentials and the API key the worker was given never reach its log
    (:mod:`tokenwatt.redact`).
    """
    logging.basicConfig(level=level)
    secrets = [(name, value) for name, value in env.items() if guardable(value)]
    guard_handlers(logging.getLogger().handlers, secrets)


@contextlib.contextmanager
def _children_start_ignoring_sigint() -> Iterator[None]:
    """Start processes inside with SIGINT ignored from their first instruction.

    An ignored signal stays ignored across exec, so a worker ignores Ctrl-C from birth, not
    only once :func:`worker_main` runs: a Ctrl-C reaching the group while a worker is still
    importing (seconds on a loaded box) would print a KeyboardInterrupt traceback from the
    child. The parent ignores SIGINT only for the fork and exec themselves (milliseconds);
    elsewhere it keeps its handler.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may change handlers (and receives the signal)
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is None:  # a handler not installed from Python: leave it alone
        yield
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def worker_main(conn: Connection, init: WorkerInit) -> None:
    """Entry point of a worker process: serve probe commands until told to exit.

    Messages in: ``("probe", ShardPlan)``, ``("stop",)``, ``("exit",)``.
    Messages out: ``("ready", pid)``, ``("window_done",)``, ``("exceed", ttft, tpot, finished)``,
    ``("result", ShardResult)``, ``("error", text)``.
    """
    # Ctrl-C reaches the whole process group; the parent decides how workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    worker_logging(init.log_level, init.env)
    if not reduce_timer_slack():
        logger.debug("could not reduce the timer slack: pacing is coarser")
    try:
        with asyncio.Runner(loop_factory=precise_event_loop) as runner:
            runner.run(serve(conn, init))
    finally:
        conn.close()


async def serve(conn: Connection, init: WorkerInit) -> None:
    """Serve one shard's probe commands on ``conn`` until told to exit (module docstring)."""
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()

    def readable() -> None:
        try:
            inbox.put_nowait(conn.recv())
        except (EOFError, OSError):  # the parent is gone
            loop.remove_reader(conn.fileno())
            inbox.put_nowait(("exit",))

    loop.add_reader(conn.fileno(), readable)
    task: asyncio.Task[None] | None = None
    async with OpenAIClient(
        init.engine,
        base_url=init.base_url,
        env=init.env,
        headers=init.headers,
        request_timeout_s=init.request_timeout_s,
        transport=init.transport,
    ) as client:
        shard = Shard(client, init.workload, spin_s=init.spin_s)

        async def run(plan: ShardPlan) -> None:
            try:
                result = await shard.run(
                    plan,
                    on_window_done=lambda: conn.send(("window_done",)),
                    on_exceed=lambda ttft, tpot, done: conn.send(("exceed", ttft, tpot, done)),
                )
            except (OSError, ValueError, RuntimeError) as exc:
                conn.send(("error", f"worker {plan.shard}: {type(exc).__name__}: {exc}"))
                return
            conn.send(("result", result))

        conn.send(("ready", os.getpid()))
        while True:
            message = await inbox.get()
            if message[0] == "probe":
                task = loop.create_task(run(message[1]))
            elif message[0] == "stop":
                shard.stop()
            else:  # exit
                shard.stop()
                if task is not None:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                break
    loop.remove_reader(conn.fileno())


class WorkerPool:
    """W worker processes, each with its own event loop and client.

    Every worker's messages arrive in one inbox, tagged with the worker's number, in the order
    each worker sent them.
    """

    def __init__(self, inits: Sequence[WorkerInit]) -> None:
        self._inits = list(inits)
        self._procs: list[BaseProcess] = []
        self._conns: list[Connection] = []
        self._inbox: asyncio.Queue[tuple[int, tuple[Any, ...]]] = asyncio.Queue()

    def __len__(self) -> int:
        return len(self._inits)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        context = multiprocessing.get_context("spawn")
        for w, init in enumerate(self._inits):
            parent, child = context.Pipe()
            proc = context.Process(target=worker_main, args=(child, init), daemon=True)
            with _children_start_ignoring_sigint():
                proc.start()
            child.close()
            loop.add_reader(parent.fileno(), self._reader(w, parent, self._inbox))
            self._procs.append(proc)
            self._conns.append(parent)
        starting = set(range(len(self._inits)))
        while starting:
            w, message = await self._receive(timeout_s=_WORKER_START_TIMEOUT_S)
            if message[0] != "ready":
                raise TokenwattError(f"load worker {w} did not start: {message}")
            starting.discard(w)
        logger.info("started %d load worker processes", len(self._inits))

    @staticmethod
    def _reader(w: int, conn: Connection, inbox: asyncio.Queue[tuple[int, tuple[Any, ...]]]) -> Any:
        def readable() -> None:
            try:
                inbox.put_nowait((w, conn.recv()))
            except (EOFError, OSError):
                asyncio.get_running_loop().remove_reader(conn.fileno())
                inbox.put_nowait((w, ("dead",)))

        return readable

    async def _receive(self, *, timeout_s: float | None = None) -> tuple[int, tuple[Any, ...]]:
        """The next message from any worker; a dead or failed worker raises."""
        async with asyncio.timeout(timeout_s):
            w, message = await self._inbox.get()
        if message[0] == "dead":
            self._procs[w].join(0.5)  # reap it, for its exit code
            raise TokenwattError(
                f"load worker {w} (pid {self._procs[w].pid}) died"
                f" (exit code {self._procs[w].exitcode})"
            )
        if message[0] == "error":
            raise TokenwattError(f"load worker failed: {message[1]}")
        return w, message

    def _send_all(self, message: tuple[Any, ...]) -> None:
        for conn in self._conns:
            with contextlib.suppress(OSError, ValueError):
                conn.send(message)

    async def run(
        self, plans: Sequence[ShardPlan], *, tally: ExceedTally | None = None
    ) -> list[ShardResult]:
        """Run one probe on every worker; stop them all once every window is done.

        With ``tally`` (early stop), the workers' counts of window requests over the SLO are
        summed as they come, and every worker is stopped as soon as the sum proves the probe
        failed. A worker's result is its last message of a probe, so nothing of this probe is
        left in the inbox for the next one.
        """
        for conn, plan in zip(self._conns, plans, strict=True):
            conn.send(("probe", plan))
        try:
            window_open = set(range(len(plans)))
            results: dict[int, ShardResult] = {}
            stopping = False
            while len(results) < len(plans):
                if not window_open and not stopping:
                    self._send_all(("stop",))
                    stopping = True
                w, message = await self._receive()
                kind = message[0]
                if kind == "window_done":
                    window_open.discard(w)
                elif kind == "exceed":
                    if tally is not None and tally.update(w, message[1], message[2], message[3]):
                        window_open.clear()  # verdict proven: stop every worker now
                elif kind == "result" and stopping:
                    results[w] = message[1]
                else:
                    raise TokenwattError(f"load worker {w}: unexpected message {kind}")
            return [results[w] for w in range(len(plans))]
        except BaseException:
            self._send_all(("stop",))
            raise

    async def close(self) -> None:
        """Stop every worker: ask first, then terminate what is left (bounded, under a second)."""
        loop = asyncio.get_running_loop()
        self._send_all(("exit",))
        deadline = time.monotonic() + _WORKER_EXIT_TIMEOUT_S
        # Polling: a process exit has no awaitable here, and this runs once per pool.
        while any(p.is_alive() for p in self._procs) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        for proc in self._procs:
            if proc.is_alive():
                proc.terminate()
        for proc in self._procs:
            proc.join(0.2)
            if proc.is_alive():
                proc.kill()
                proc.join(0.2)
        for conn in self._conns:
            with contextlib.suppress(OSError, ValueError):
                loop.remove_reader(conn.fileno())
            conn.close()
        self._procs.clear()
        self._conns.clear()
