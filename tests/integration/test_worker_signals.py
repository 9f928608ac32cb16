"""Load workers ignore Ctrl-C from their first instruction, not only once their main runs.

Ctrl-C reaches the whole process group; a worker still importing when it arrives (seconds on a
loaded box) printed a KeyboardInterrupt traceback from multiprocessing's spawn_main, which the
Ctrl-C test of a measure run caught once beside other work.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

from tokenwatt.load._workers import _children_start_ignoring_sigint


def _ignored_signals(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return int(line.split()[1], 16)
    raise AssertionError(f"no SigIgn line for {pid}")


def _sleep() -> None:
    time.sleep(30)


def _sigint_bit() -> int:
    return 1 << (signal.SIGINT - 1)


def test_a_worker_starts_with_sigint_ignored_and_the_parent_keeps_its_handler():
    context = multiprocessing.get_context("spawn")
    before = signal.getsignal(signal.SIGINT)
    with _children_start_ignoring_sigint():
        proc = context.Process(target=_sleep, daemon=True)
        proc.start()
    try:
        assert proc.pid is not None
        # at once, before the child has imported anything of ours
        assert _ignored_signals(proc.pid) & _sigint_bit()
        os.kill(proc.pid, signal.SIGINT)
        time.sleep(0.5)
        assert proc.is_alive()  # ignored, not a KeyboardInterrupt
    finally:
        proc.kill()
        proc.join()
    assert signal.getsignal(signal.SIGINT) is before
    assert not _ignored_signals(os.getpid()) & _sigint_bit()


def test_without_it_a_spawned_child_starts_with_the_default_sigint():
    # the control: what the worker start did before (and what any other child still gets)
    proc = multiprocessing.get_context("spawn").Process(target=_sleep, daemon=True)
    proc.start()
    try:
        assert proc.pid is not None
        assert not _ignored_signals(proc.pid) & _sigint_bit()
    finally:
        proc.kill()
        proc.join()
