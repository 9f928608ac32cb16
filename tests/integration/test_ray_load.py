"""The load generator on a real two-node Ray cluster on this machine (tests/ray_cluster.py).

Timing-sensitive (quiet, tests/conftest.py): the same probe's latencies from local workers and
from Ray actors, against nginx-sse whose delays are set per request; and Ctrl-C stopping every
actor within a second.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.measure_cli import children, kill_group, measure_argv, wait_gone
from tests.ray_cluster import (
    actor_pids,
    cluster,
    cluster_spec,
    nginx_setup,
    wait_for_line,
)
from tokenwatt.load.probe import LoadGenerator
from tokenwatt.schema.spec import LoadClusterSpec, SloSpec
from tokenwatt.sweep import ProbePlan

ray = pytest.importorskip("ray", reason="Ray is part of the test install (.[dev,ray])")

pytestmark = [pytest.mark.anyio, pytest.mark.peer, pytest.mark.slow]
__all__ = ["cluster"]  # fixture

SLO = SloSpec(ttft_p99_ms=2000, tpot_p99_ms=200)
DELAYS = {"X-Sim-TTFT-Ms": "200", "X-Sim-ITL-Ms": "20"}
STOP_WITHIN_S = 2.0  # "within a second", plus room for a busy shared 2-core machine
PLAN = ProbePlan(phase="search", rate_rps=40.0, warmup_s=0.5, window_s=3.0)


async def test_ray_actors_measure_what_local_workers_measure(nginx_sse, cluster):
    spec, work = nginx_setup(nginx_sse)
    async with LoadGenerator(
        spec.engine, work, headers=DELAYS, request_timeout_s=10, workers=2
    ) as gen:
        local = await gen.probe(PLAN, index=0, slo=SLO)
        scheduled = gen.window_requests(PLAN.rate_rps, PLAN.warmup_s, PLAN.window_s, stream=0)
    on_ray = LoadClusterSpec(address=cluster.address, server_nodes=True)
    async with LoadGenerator(
        spec.engine, work, headers=DELAYS, request_timeout_s=10, cluster=on_ray
    ) as gen:
        assert gen.cluster_info is not None
        assert len(gen.cluster_info.nodes) == 2
        assert gen.max_workers == 2  # one CPU per node
        remote = await gen.probe(PLAN, index=0, slo=SLO)
    assert not ray.is_initialized()  # the generator left the cluster it joined
    # The same schedule (stream 0), split over two actors on two nodes, merged back.
    assert remote.window_requests == local.window_requests == scheduled
    assert remote.ok == scheduled
    actors = remote.load_actors
    assert actors is not None
    assert len(actors) == 2
    assert len({a.node_id for a in actors}) == 2  # one actor on each node
    assert sum(a.window_requests for a in actors) == scheduled
    assert all(a.same_clock and a.clock_offset_ns == 0 for a in actors)  # one host, one clock
    assert all(a.round_trips >= 8 for a in actors)
    assert all(a.pid != os.getpid() for a in actors)
    assert local.load_actors is None
    for name in ("ttft_ms", "tpot_ms"):
        for q in ("p50", "p99"):
            a = getattr(getattr(local, name), q)
            b = getattr(getattr(remote, name), q)
            assert b == pytest.approx(a, rel=0.05), (name, q, a, b)
    assert remote.slo_pass == (not remote.client_bound)


def test_ctrl_c_stops_every_actor_within_a_second(repo, tmp_path, cluster):
    spec = cluster_spec(repo, tmp_path, cluster.address, window_s=30)
    out = tmp_path / "run.json"
    before = set(actor_pids())  # other tests' actors, on their way out
    proc = subprocess.Popen(
        measure_argv(spec, out, "--no-accuracy"),
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    with proc:
        try:
            wait_for_line(proc, r"probe 0 \(rates\)", 180)
            deadline = time.monotonic() + 60
            while len(set(actor_pids()) - before) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            actors = sorted(set(actor_pids()) - before)
            assert len(actors) == 2, actors
            # Each actor spawns its shard's worker process (seconds on a loaded box).
            while time.monotonic() < deadline and not all(children(a) for a in actors):
                time.sleep(0.1)
            shards = [pid for actor in actors for pid in children(actor)]
            assert len(shards) >= 2, shards
            actors += shards
            time.sleep(2.0)
            os.killpg(proc.pid, signal.SIGINT)
            sent = time.monotonic()
            left = wait_gone(actors, timeout_s=STOP_WITHIN_S)
            took = time.monotonic() - sent
            _, err = proc.communicate(timeout=60)
        finally:
            kill_group(proc)
    assert not left, f"actors {left} still running {took:.1f} s after Ctrl-C"
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    assert out.is_file()  # the partial run is written (no probe finished: nothing else)
