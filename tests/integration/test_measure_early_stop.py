"""Early stop in the load generator, against a simulator of known capacity (~15 req/s).

A probe far above capacity stops once it has provably failed, long before its window ends,
whether the shards run in worker processes (their counts summed in the parent) or in-process;
a probe below capacity is never stopped; a TPOT bound alone also stops a probe. With the pass
certification (the adaptive sweep's search probes), a probe below capacity stops once so few
window requests are left that its p99 can no longer exceed the bound.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tokenwatt.load.probe import LoadGenerator
from tokenwatt.load.workload import build_workload
from tokenwatt.schema.run import ProbeRecord
from tokenwatt.schema.spec import SloSpec
from tokenwatt.sim.launch import launch, settings_from_spec
from tokenwatt.store import load_spec
from tokenwatt.sweep import ProbePlan

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SPEC = Path("tests/data/capacity-sim.spec.yaml")
WARMUP_S, WINDOW_S = 1.0, 4.0
CLIENT_BOUND_TRIES = 3
"""A probe the client could not pace is run again, up to this many times in all."""


@pytest.fixture(scope="module")
def capacity(repo: Path):
    loaded = load_spec(repo / SPEC)
    with launch(settings_from_spec(loaded)) as sim:
        yield loaded.spec, sim


async def _probe(
    capacity,
    rate_rps,
    *,
    slo=None,
    index=0,
    early_stop=True,
    certify_pass=False,
    window_s=WINDOW_S,
    **generator,
):
    spec, sim = capacity
    work = build_workload(spec, context_tokens=4096)
    async with LoadGenerator(spec.engine, work, base_url=sim.base_url, **generator) as gen:
        for _ in range(CLIENT_BOUND_TRIES):
            t0 = time.monotonic()
            record = await gen.probe(
                ProbePlan(
                    phase="search",
                    rate_rps=rate_rps,
                    warmup_s=WARMUP_S,
                    window_s=window_s,
                    early_stop=early_stop,
                    certify_pass=certify_pass,
                ),
                index=index,
                slo=slo or spec.slo,
            )
            returned_ns = time.monotonic_ns()
            elapsed_s = time.monotonic() - t0
            if not record.client_bound:
                break
            # A loaded box held the client back (send lag): the probe says nothing about the
            # server, and a run would measure it again; so do the tests.
    ProbeRecord.model_validate(record.model_dump())  # it round-trips through the schema
    return record, elapsed_s, returned_ns


@pytest.mark.parametrize(
    "generator",
    [{"workers": 2}, {"in_process": True}],
    ids=["two-worker-processes", "in-process"],
)
async def test_overloaded_probe_stops_early(capacity, generator):
    record, _, returned_ns = await _probe(capacity, 30.0, **generator)  # twice the capacity
    stop = record.early_stop
    assert stop is not None
    assert record.slo_pass is False
    assert stop.planned_window_requests == 120  # constant arrivals: 30 req/s x 4 s
    assert stop.exceeding_needed == 2  # 120 - ceil(118.8) + 1
    assert stop.ttft_exceeding >= stop.exceeding_needed
    # requests queue for the few slots: TTFT passes 400 ms within a second or two of the
    # window start, far before the window (let alone the drain) ends
    assert stop.stopped_ns < record.window_end_ns
    # ...and the probe returns then, not after the queue has drained (~4 s past the window)
    assert returned_ns < record.window_end_ns + 1_000_000_000
    assert stop.unsent_window_requests > 0
    assert record.window_requests + stop.unsent_window_requests == 120
    assert record.failures_by_cause.get("cancelled", 0) == stop.cut_window_requests
    assert record.ttft_ms.p99 is not None
    assert record.ttft_ms.p99 > 400
    if "workers" in generator:
        assert record.workers == 2


async def test_probe_below_capacity_is_never_stopped(capacity):
    record, elapsed_s, _ = await _probe(capacity, 10.0, workers=1, index=1)
    assert record.early_stop is None
    assert record.slo_pass, (record.ttft_ms, record.client_bound_reasons)
    assert record.window_requests == 40
    assert elapsed_s >= WARMUP_S + WINDOW_S


async def test_tpot_bound_alone_stops_a_probe(capacity):
    # steps take ~26.5 ms: a 20 ms TPOT bound fails every request, each as it finishes
    slo = SloSpec(ttft_p99_ms=60_000, tpot_p99_ms=20)
    record, _, _ = await _probe(capacity, 10.0, slo=slo, workers=1, index=2)
    stop = record.early_stop
    assert stop is not None
    assert stop.ttft_exceeding == 0
    assert stop.tpot_exceeding >= stop.exceeding_needed == 1  # 40 window requests: one proves it
    assert stop.stopped_ns < record.window_end_ns
    assert record.slo_pass is False


@pytest.mark.parametrize(
    "generator",
    [{"workers": 2}, {"in_process": True}],
    ids=["two-worker-processes", "in-process"],
)
async def test_probe_below_capacity_stops_once_its_pass_is_certain(capacity, generator):
    # 10 req/s x 12 s = 120 window requests; nearest rank allows one over (120 - ceil(118.8)),
    # so two over prove a fail, and a pass is certain once none is over and one is left.
    # Constant arrivals: the last window request is sent at the window's end and is cut.
    record, _, _ = await _probe(
        capacity, 10.0, index=4, early_stop=False, certify_pass=True, window_s=12.0, **generator
    )
    stop = record.early_stop
    assert stop is not None, record.client_bound_reasons
    assert stop.outcome == "pass"
    assert record.slo_pass
    left = stop.cut_window_requests + stop.unsent_window_requests
    assert left >= 1
    assert max(stop.ttft_exceeding, stop.tpot_exceeding) + left < stop.exceeding_needed
    assert stop.exceeding_needed == 2
    assert record.window_requests + stop.unsent_window_requests == 120


async def test_pass_certification_never_stops_a_failing_probe(capacity):
    record, _, _ = await _probe(
        capacity, 30.0, workers=1, index=5, early_stop=False, certify_pass=True
    )
    assert record.early_stop is None
    assert record.slo_pass is False
