"""Probes against servers that fail: every failed request stays in the denominator."""

import math
import time

import pytest

from tests import factories
from tests.peers import free_port
from tokenwatt.load.probe import LoadGenerator
from tokenwatt.load.workload import build_workload
from tokenwatt.schema.run import ProbeRecord
from tokenwatt.schema.spec import SloSpec
from tokenwatt.sweep import ProbePlan

pytestmark = pytest.mark.anyio

SLO = SloSpec(ttft_p99_ms=100_000, tpot_p99_ms=100_000)


def setup(url):
    spec = factories.spec(
        engine={"endpoint": url, "model": "m"},
        workload={"input_tokens": 8, "output_tokens": 4},
        measurement={"request_timeout_s": 0.3, "max_concurrency": 1000},
    )
    return spec, build_workload(spec, context_tokens=4096)


async def probe(url, *, rate=30.0, window=1.0):
    spec, work = setup(url)
    async with LoadGenerator(spec.engine, work, request_timeout_s=0.3, in_process=True) as gen:
        return await gen.probe(
            ProbePlan(phase="search", rate_rps=rate, warmup_s=0.2, window_s=window),
            index=0,
            slo=SLO,
        )


@pytest.mark.parametrize(
    ("fault", "cause"),
    [("http500", "http_error"), ("cut", "connection_error"), ("garbage", "malformed_stream")],
)
async def test_failed_requests_count_as_infinite_latency(fault_server, fault, cause):
    record = await probe(fault_server.base_url(fault))
    n = record.window_requests
    assert n > 10
    assert record.failed == n
    assert record.ok == 0
    assert record.failures_by_cause == {cause: n}
    assert cause in record.failure_examples
    assert record.requests.status == [cause] * n
    assert record.requests.ttft_ms == [None] * n
    assert record.ttft_ms.count == n
    assert math.isinf(record.ttft_ms.p50)
    assert math.isinf(record.ttft_ms.p99)
    assert math.isinf(record.e2e_ms.mean)
    assert record.goodput_tok_s == 0
    assert not record.slo_pass
    # inf survives the run file's JSON as "Infinity"
    text = record.model_dump_json()
    assert '"p99":"Infinity"' in text
    p99 = ProbeRecord.model_validate_json(text).ttft_ms.p99
    assert p99 is not None
    assert math.isinf(p99)


async def test_stalled_server_times_out_and_the_drain_ends(fault_server):
    start = time.monotonic()
    record = await probe(fault_server.base_url("stall"), rate=20.0, window=1.0)
    assert record.failures_by_cause == {"timeout": record.window_requests}
    # drain = the last window request's timeout, not forever
    assert (record.end_ns - record.window_end_ns) / 1e9 < 0.6
    assert time.monotonic() - start < 4


async def test_down_server(fault_server):
    record = await probe(f"http://127.0.0.1:{free_port()}/v1", rate=30.0)
    assert record.window_requests > 10
    assert record.failures_by_cause == {"connection_error": record.window_requests}
    assert not record.slo_pass


async def test_probe_records_its_index_and_phase(fault_server):
    spec, work = setup(fault_server.base_url("ok"))
    async with LoadGenerator(
        spec.engine,
        work,
        request_timeout_s=float(spec.measurement.request_timeout_s),
        max_concurrency=spec.measurement.max_concurrency,
        workers=1,
    ) as gen:
        record = await gen.probe(
            ProbePlan(phase="rates", rate_rps=20.0, warmup_s=0.0, window_s=1.0),
            index=5,
            slo=spec.slo,
        )
    assert record.index == 5
    assert record.phase == "rates"
    assert record.failed == 0
    assert record.window_requests > 5
    assert record.slo_pass == (not record.client_bound)
