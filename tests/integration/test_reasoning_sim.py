"""The simulator as a reasoning model (``engine.sim.reasoning_fraction``), over HTTP and in
virtual time: the first tokens of a chat answer stream as ``reasoning_content``, so the time to
first answer token comes later than the first token, and the reasoning tokens are the server's
count (``usage.completion_tokens_details``). (Real streams of that shape from a scripted server:
tests/integration/test_client_reasoning.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenwatt.load.probe import LoadGenerator
from tokenwatt.load.workload import build_workload
from tokenwatt.plan import engine_config, with_spec
from tokenwatt.schema.run import ProbeRecord
from tokenwatt.schema.spec import FixedTokens
from tokenwatt.sim.launch import launch, settings_from_spec
from tokenwatt.sim.virtual import VirtualServer
from tokenwatt.store import load_spec
from tokenwatt.sweep import ProbePlan

pytestmark = pytest.mark.anyio

OUTPUT = 12  # of which round(0.25 * 12) = 3 reasoning


def reasoning_spec(repo: Path, fraction: float = 0.25):
    loaded = load_spec(repo / "tests/data/tiny-sim.spec.yaml")
    spec = loaded.spec
    assert spec.engine.sim is not None
    sim = spec.engine.sim.model_copy(update={"reasoning_fraction": fraction})
    engine = spec.engine.model_copy(update={"api": "chat", "sim": sim, "ignore_eos": True})
    workload = spec.workload.model_copy(update={"output_tokens": FixedTokens(value=OUTPUT)})
    return with_spec(loaded, spec.model_copy(update={"engine": engine, "workload": workload}))


async def http_probe(loaded, work, plan: ProbePlan) -> ProbeRecord:
    """One probe of ``plan`` through a freshly started simulator, over HTTP."""
    spec = loaded.spec
    with launch(settings_from_spec(loaded)) as sim:
        async with LoadGenerator(spec.engine, work, base_url=sim.base_url, workers=1) as gen:
            return await gen.probe(plan, index=0, slo=spec.slo)


async def test_a_reasoning_simulator_over_http_and_in_virtual_time(repo):
    loaded = reasoning_spec(repo)
    spec = loaded.spec
    work = build_workload(spec, context_tokens=4096)
    plan = ProbePlan(phase="search", rate_rps=4.0, warmup_s=0.5, window_s=2.0)
    real = await http_probe(loaded, work, plan)
    server = VirtualServer(engine_config(loaded), work, request_timeout_s=60)
    virtual = server.probe(plan, index=0, slo=spec.slo).record
    for record in (real, virtual):
        assert record.failed == 0, record.failure_examples
        table = record.requests
        assert table is not None
        assert table.reasoning_tokens is not None
        assert set(table.reasoning_tokens) == {3}, record.index
        assert set(table.output_tokens) == {OUTPUT}  # reasoning tokens are output tokens
        assert table.ttfat_ms is not None
        for ttft, ttfat in zip(table.ttft_ms, table.ttfat_ms, strict=True):
            assert ttft is not None
            assert ttfat is not None
            assert ttfat > ttft  # three reasoning tokens came first
        assert record.reasoning_tokens == 3 * record.window_requests
        assert record.approximate_reasoning_tokens == 0  # the server's own count, not chunks
    assert real.window_requests == virtual.window_requests


async def test_no_reasoning_by_default(repo):
    loaded = reasoning_spec(repo, fraction=0.0)
    work = build_workload(loaded.spec, context_tokens=4096)
    plan = ProbePlan(phase="search", rate_rps=4.0, warmup_s=0.5, window_s=1.0)
    record = await http_probe(loaded, work, plan)
    assert record.failed == 0
    assert record.requests is not None
    assert record.requests.reasoning_tokens is None
    assert record.ttfat_ms is None
