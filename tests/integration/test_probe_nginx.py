"""Probes against nginx-sse: a real server whose delays we set, so the answers are known."""

import datetime as dt
import json

import pytest

from tests import factories
from tokenwatt.load.probe import LoadGenerator
from tokenwatt.load.workload import build_workload
from tokenwatt.metrics import MAX_SEND_LAG_P99_MS
from tokenwatt.schema.run import ProbeRecord
from tokenwatt.schema.spec import SloSpec
from tokenwatt.sweep import ProbePlan

pytestmark = [pytest.mark.anyio, pytest.mark.peer]

SLO = SloSpec(ttft_p99_ms=2000, tpot_p99_ms=50)
DELAYS = {"X-Sim-TTFT-Ms": "20", "X-Sim-ITL-Ms": "5"}


def setup(nginx_sse, **workload):
    spec = factories.spec(
        engine={"endpoint": f"{nginx_sse.base_url}/v1", "model": "sim"},
        workload={"input_tokens": 64, "output_tokens": 32, **workload},
    )
    return spec, build_workload(spec, context_tokens=4096)


async def test_probe_record_is_complete_and_right(nginx_sse):
    spec, work = setup(nginx_sse)
    started = dt.datetime.now(dt.UTC)
    async with LoadGenerator(
        spec.engine, work, headers=DELAYS, request_timeout_s=10, workers=1
    ) as gen:
        record = await gen.probe(
            ProbePlan(phase="search", rate_rps=100.0, warmup_s=0.5, window_s=2.0), index=0, slo=SLO
        )
    assert record.workers == 1
    assert record.started_utc >= started
    table = record.requests
    assert table is not None
    n = record.window_requests
    assert 140 < n < 260  # Poisson around 200
    assert len(table.status) == n
    assert record.ok == n
    assert record.failed == 0
    assert record.failures_by_cause == {}
    assert record.window_end_ns - record.window_start_ns == 2_000_000_000
    assert record.end_ns >= record.window_end_ns
    assert all(0 <= t < 2.0 for t in table.t_sched_s)
    assert table.t_sched_s == sorted(table.t_sched_s)
    assert record.offered_rate_rps == n / 2.0
    assert record.achieved_rate_rps == pytest.approx(record.offered_rate_rps, rel=0.03)
    # This box is shared with other jobs: a preempted worker can miss the 10 ms p99 bound, so
    # the test checks the typical lag and that the verdict follows the numbers. The median is
    # ~0.1 ms on a quiet box and ~1.5 ms with one of its two cores busy (measured); half the
    # client-bound bound still fails a pacer that batches its sends or drifts.
    assert sorted(table.send_lag_ms)[n // 2] < MAX_SEND_LAG_P99_MS / 2
    assert record.client_bound == (record.send_lag_p99_ms > MAX_SEND_LAG_P99_MS)
    assert record.output_tokens == 32 * n
    assert record.goodput_tok_s == 32 * n / 2.0
    assert record.request_throughput_rps == n / 2.0
    assert set(table.output_tokens) == {32}
    assert set(table.input_tokens) == {64}
    assert record.ttft_ms.p50 is not None
    assert record.tpot_ms.p50 is not None
    assert record.e2e_ms.p50 is not None
    assert 20 <= record.ttft_ms.p50 < 60
    assert 5 <= record.tpot_ms.p50 < 9
    assert record.e2e_ms.p50 >= 20 + 31 * 5
    assert record.slo_pass == (not record.client_bound)
    # Little's law: rate x decode time = ~100/s x 0.155 s
    assert record.batch_source == "littles_law"
    assert record.running_batch_mean == pytest.approx(15.5, rel=0.3)
    assert record.output_length_violations == 0
    assert record.usage_mismatches == 0
    assert record.approximate_output_tokens == 0
    # the record survives the run file's JSON
    assert ProbeRecord.model_validate_json(record.model_dump_json()) == record


async def test_same_index_same_schedule_other_index_other_schedule(nginx_sse):
    spec, work = setup(nginx_sse)
    async with LoadGenerator(spec.engine, work, in_process=True) as gen:
        probes = [
            await gen.probe(
                ProbePlan(phase="rates", rate_rps=50.0, warmup_s=0.0, window_s=1.0),
                index=i,
                slo=SLO,
            )
            for i in (7, 7, 8)
        ]
    tables = [p.requests for p in probes]
    assert all(t is not None for t in tables)
    a, b, c = (t.t_sched_s for t in tables if t is not None)
    assert a == b
    assert a != c


async def test_two_worker_processes(nginx_sse):
    spec, work = setup(nginx_sse)
    async with LoadGenerator(spec.engine, work, workers=2, headers=DELAYS) as gen:
        record = await gen.probe(
            ProbePlan(phase="search", rate_rps=150.0, warmup_s=0.5, window_s=2.0), index=1, slo=SLO
        )
        again = await gen.probe(
            ProbePlan(phase="search", rate_rps=150.0, warmup_s=0.0, window_s=1.0), index=1, slo=SLO
        )
    assert record.workers == 2
    assert record.failed == 0
    assert 220 < record.window_requests < 380
    assert record.requests is not None
    assert record.requests.t_sched_s == sorted(record.requests.t_sched_s)
    assert record.max_in_flight is not None
    assert record.max_in_flight >= 2
    assert again.workers == 2  # the pool is kept between probes
    assert again.failed == 0


async def test_concurrency_cap_makes_the_probe_client_bound(nginx_sse):
    spec, work = setup(nginx_sse)
    slow = {"X-Sim-TTFT-Ms": "100", "X-Sim-ITL-Ms": "1"}
    async with LoadGenerator(
        spec.engine, work, headers=slow, max_concurrency=2, in_process=True
    ) as gen:
        record = await gen.probe(
            ProbePlan(phase="search", rate_rps=40.0, warmup_s=0.0, window_s=1.0), index=2, slo=SLO
        )
    assert record.failed == 0
    assert record.max_in_flight == 2
    assert record.slot_wait_s > 0
    assert record.client_bound
    assert any("concurrency slot (max_concurrency 2)" in r for r in record.client_bound_reasons)
    assert not record.slo_pass
    # the wait is in the send lag, never hidden
    assert record.requests is not None
    assert max(record.requests.send_lag_ms) > 100


async def test_metrics_url_without_the_gauge_falls_back_to_littles_law(nginx_sse):
    spec, work = setup(nginx_sse)
    async with LoadGenerator(
        spec.engine, work, metrics_url=f"{nginx_sse.base_url}/metrics", in_process=True
    ) as gen:
        record = await gen.probe(
            ProbePlan(phase="search", rate_rps=20.0, warmup_s=0.0, window_s=1.0), index=3, slo=SLO
        )
    assert record.batch_source == "littles_law"


async def test_gamma_and_constant_arrivals(nginx_sse):
    for arrival, rate in (
        ({"process": "constant"}, 40.0),
        ({"process": "gamma", "burstiness": 0.5}, 40.0),
    ):
        spec, work = setup(nginx_sse, arrival=arrival)
        async with LoadGenerator(spec.engine, work, in_process=True) as gen:
            record = await gen.probe(
                ProbePlan(phase="rates", rate_rps=rate, warmup_s=0.0, window_s=1.5),
                index=4,
                slo=SLO,
            )
        assert record.failed == 0
        assert record.requests is not None
        if arrival["process"] == "constant":
            assert record.window_requests == 60
            gaps = {
                round(b - a, 6)
                for a, b in zip(
                    record.requests.t_sched_s, record.requests.t_sched_s[1:], strict=False
                )
            }
            assert gaps == {0.025}
        json.loads(record.model_dump_json())
