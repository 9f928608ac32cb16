"""A probe against the simulator records the engine's telemetry and passes its audits.

The simulator serves vLLM's metric names (running, waiting, KV usage, preemptions, prefix-cache
queries and hits), so the probe sees real values: below capacity (~15 req/s) the engine's own
count agrees with Little's law, every scheduled request is accounted for, the tokens add up and
the prefix cache (on, as in vLLM) finds nothing in random prompts; far above capacity the waiting queue grows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenwatt.load.probe import LoadGenerator
from tokenwatt.load.workload import build_workload
from tokenwatt.schema.run import ProbeRecord
from tokenwatt.sim.launch import launch, settings_from_spec
from tokenwatt.store import load_spec
from tokenwatt.sweep import ProbePlan
from tokenwatt.telemetry import queue_growing

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SPEC = Path("tests/data/capacity-sim.spec.yaml")


@pytest.fixture(scope="module")
def capacity(repo: Path):
    loaded = load_spec(repo / SPEC)
    with launch(settings_from_spec(loaded)) as sim:
        yield loaded.spec, sim


async def _probe(
    capacity, rate_rps: float, *, warmup_s: float, window_s: float, early_stop: bool = False
) -> ProbeRecord:
    spec, sim = capacity
    work = build_workload(spec, context_tokens=4096)
    async with LoadGenerator(
        spec.engine, work, base_url=sim.base_url, metrics_url=sim.metrics_url, in_process=True
    ) as gen:
        plan = ProbePlan(
            phase="search",
            rate_rps=rate_rps,
            warmup_s=warmup_s,
            window_s=window_s,
            early_stop=early_stop,
        )
        record = await gen.probe(plan, index=0, slo=spec.slo)
    return ProbeRecord.model_validate(record.model_dump())


async def test_probe_below_capacity_has_telemetry_and_passes_its_audits(capacity):
    record = await _probe(capacity, 8.0, warmup_s=2.0, window_s=6.0)
    t = record.engine
    assert t is not None
    assert t.dialect == "vllm"
    assert t.samples >= 15  # every 0.25 s over 6 s, less scrape time
    assert t.running_mean is not None
    assert t.running_mean > 0.5
    assert t.waiting_mean is not None
    assert t.kv_cache_usage_mean_pct is not None
    assert 0 < t.kv_cache_usage_mean_pct <= t.kv_cache_usage_max_pct  # type: ignore[operator]
    assert t.preemptions == 0
    assert t.prefix_cache_hit_rate_pct == 0.0  # random prompts: looked up, never found
    assert t.spec_decode_acceptance_pct is None  # not exposed: not measured
    assert not queue_growing(t)
    assert record.batch_source == "metrics"
    assert record.running_batch_mean == pytest.approx(t.running_mean)
    audits = record.audits
    assert audits is not None
    assert audits.littles_law is not None
    assert audits.littles_law.agrees, audits.littles_law
    assert audits.conservation is not None
    assert audits.conservation.holds
    assert audits.conservation.scheduled == record.window_requests == 48  # constant: 8 x 6
    assert audits.tokens is not None
    assert audits.tokens.usage_mismatches == 0
    assert audits.tokens.short_ignore_eos == 0
    # Short answers, 2 s of warm-up: the load is in steady state when the window opens, and
    # the audit's times in the system are the requests' own send-to-last-byte times.
    steady = audits.steady_state
    assert steady is not None
    assert steady.requests == record.window_requests
    assert steady.holds
    assert steady.shortfall_pct == 0.0
    assert record.requests is not None
    longest_e2e_s = max(v for v in record.requests.e2e_ms if v is not None) / 1000
    assert steady.longest_time_in_system_s == pytest.approx(longest_e2e_s, rel=0.05)
    assert steady.steady_warmup_s < 2.0


async def test_overloaded_probe_shows_a_growing_queue(capacity):
    record = await _probe(capacity, 30.0, warmup_s=1.0, window_s=4.0, early_stop=True)
    t = record.engine
    assert t is not None
    assert t.waiting_growth is not None
    assert queue_growing(t), t.waiting_growth
    assert record.audits is not None
    assert record.audits.conservation is not None
    assert record.audits.conservation.holds  # cut and never-sent requests are accounted for
