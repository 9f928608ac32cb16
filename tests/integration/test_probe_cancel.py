"""Ctrl-C stops a probe within a second and leaves no worker process behind."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.peer

SCRIPT = """
import asyncio, sys
from tests import factories
from tokenwatt.load.probe import LoadGenerator
from tokenwatt.load.workload import build_workload
from tokenwatt.sweep import ProbePlan

async def main():
    spec = factories.spec(
        engine={"endpoint": sys.argv[1], "model": "sim"},
        workload={"input_tokens": 16, "output_tokens": 50},
    )
    work = build_workload(spec, context_tokens=4096)
    headers = {"X-Sim-TTFT-Ms": "10", "X-Sim-ITL-Ms": "40"}
    async with LoadGenerator(spec.engine, work, workers=int(sys.argv[2]), headers=headers) as gen:
        print("started", flush=True)
        plan = ProbePlan(phase="search", rate_rps=200, warmup_s=1, window_s=60)
        await gen.probe(plan, index=0, slo=spec.slo)

try:
    asyncio.run(main())
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


def children(pid):
    out = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True, check=False
    ).stdout
    return [int(p) for p in out.split()]


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for every practical purpose
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


@pytest.mark.parametrize("workers", [1, 2])
def test_ctrl_c_stops_within_a_second(nginx_sse, repo, workers):
    with subprocess.Popen(
        [sys.executable, "-c", SCRIPT, f"{nginx_sse.base_url}/v1", str(workers)],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, like a terminal's foreground job
    ) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stderr is not None
            assert proc.stdout.readline().strip() == "started"
            time.sleep(1.5)  # warm-up under way, hundreds of streams open
            kids = children(proc.pid)
            assert len(kids) >= workers
            start = time.monotonic()
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole group
            proc.wait(timeout=5)
            elapsed = time.monotonic() - start
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        stderr = proc.stderr.read()
    assert proc.returncode == 130, stderr[-2000:]
    assert elapsed < 1.0
    deadline = time.monotonic() + 1.0
    while any(alive(k) for k in kids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(k) for k in kids)
