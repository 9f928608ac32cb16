"""``sweep.ramp`` against the simulator over HTTP: a probe starts on the requests the last one
left running, and the server sees them finish instead of being aborted.

The simulator counts the requests its clients aborted (``vllm:request_success_total`` with
``finished_reason="abort"``, as vLLM does), so the test reads from the server, not from the load
generator, whether the requests in flight at a probe's end were cancelled or left running.
Answers of 150 tokens take about 4 s on this simulated engine, so at 8 req/s some 30 requests
are in flight when a probe's last window request finishes.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tokenwatt import promtext
from tokenwatt.load.probe import LoadGenerator
from tokenwatt.load.workload import build_workload
from tokenwatt.schema.run import ProbeRecord
from tokenwatt.sim.launch import launch, settings_from_spec
from tokenwatt.store import load_spec
from tokenwatt.sweep import ProbePlan

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SPEC = Path("tests/data/capacity-sim.spec.yaml")
RATE_RPS = 8.0


@pytest.fixture(scope="module")
def long_answers(repo: Path):
    loaded = load_spec(repo / SPEC)
    spec = loaded.spec
    assert spec.engine.sim is not None
    sim = spec.engine.sim.model_copy(update={"max_num_seqs": 128})
    spec = spec.model_copy(
        update={
            "engine": spec.engine.model_copy(update={"sim": sim}),
            "workload": spec.workload.model_copy(update={"output_tokens": 150}),
        }
    )
    loaded = loaded.model_copy(update={"spec": spec})
    with launch(settings_from_spec(loaded)) as server:
        yield spec, server


def _aborted(metrics_url: str) -> float:
    samples = promtext.parse(httpx.get(metrics_url, timeout=10).text)
    return sum(
        s.value
        for s in samples
        if s.name == "vllm:request_success_total" and s.labels.get("finished_reason") == "abort"
    )


def _aborted_by_now(metrics_url: str, at_least: float, *, timeout_s: float = 10.0) -> float:
    """The abort count once it reaches ``at_least`` (the server notices a closed stream late)."""
    deadline = time.monotonic() + timeout_s
    while (count := _aborted(metrics_url)) < at_least and time.monotonic() < deadline:
        time.sleep(0.2)
    return count


def _plan(*, ramp: bool = False, ramp_warmup_s: float | None = None) -> ProbePlan:
    return ProbePlan(
        phase="search",
        rate_rps=RATE_RPS,
        warmup_s=1.0,
        window_s=3.0,
        ramp=ramp,
        ramp_warmup_s=ramp_warmup_s,
    )


@pytest.mark.parametrize("in_process", [False, True], ids=["worker", "in-process"])
async def test_a_ramped_probe_takes_over_the_requests_left_running(long_answers, in_process):
    spec, sim = long_answers
    work = build_workload(spec, context_tokens=4096)
    async with LoadGenerator(
        spec.engine,
        work,
        base_url=sim.base_url,
        workers=1,
        in_process=in_process,
        ramp=True,
    ) as gen:
        before = _aborted(sim.metrics_url)
        first = await gen.probe(_plan(), index=0, slo=spec.slo)
        assert first.ramp is None
        second = await gen.probe(_plan(ramp=True, ramp_warmup_s=0.5), index=1, slo=spec.slo)
        # nothing was cut between the two: the server finished what the first left running
        assert _aborted(sim.metrics_url) == before
        assert second.ramp is not None
        assert second.ramp.from_probe == 0
        assert second.ramp.carried_requests > 20
        # it started on carried requests, so it warmed up for its ramp warm-up (sweep.ramp_warmup_s)
        assert second.warmup_s == 0.5
        # the carried requests are load, never measured: the window is this probe's schedule
        assert second.window_requests == gen.window_requests(RATE_RPS, 0.5, 3.0, stream=1)
        assert second.failed == 0
        audit = second.audits.steady_state  # type: ignore[union-attr]
        assert audit is not None
        assert audit.carried_load_pct is not None
        assert 50 < audit.carried_load_pct < 150
        first_audit = first.audits.steady_state  # type: ignore[union-attr]
        assert first_audit is not None
        assert abs(audit.shortfall_pct) < first_audit.shortfall_pct / 2
        ProbeRecord.model_validate(second.model_dump())  # the record round-trips
        # a probe that does not ramp cancels what the last one left, then starts from idle
        third = await gen.probe(_plan(), index=2, slo=spec.slo)
        assert third.ramp is None
        cut = _aborted_by_now(sim.metrics_url, before + 20) - before
        assert cut >= 20
        assert third.failed == 0


async def test_without_the_ramp_a_probe_ends_by_cancelling_what_is_left(long_answers):
    spec, sim = long_answers
    work = build_workload(spec, context_tokens=4096)
    async with LoadGenerator(spec.engine, work, base_url=sim.base_url, workers=1) as gen:
        before = _aborted(sim.metrics_url)
        record = await gen.probe(_plan(ramp=True, ramp_warmup_s=0.5), index=0, slo=spec.slo)
        assert record.ramp is None  # nothing left running to start on
        assert record.warmup_s == 1.0  # so the full warm-up, as from idle
        cut = _aborted_by_now(sim.metrics_url, before + 20) - before
        assert cut >= 20  # the requests sent while the window drained
