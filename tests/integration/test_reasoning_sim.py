"""The simulator as a reasoning model (``engine.sim.reasoning_fraction``), over HTTP and in
virtual time: the first tokens of a chat answer stream as ``reasoning_content``, so the time to
first answer token comes later than the first token, and the reasoning tokens are the server's
count (``usage.completion_tokens_details``). (Real streams of that shape from a scripted server:
tests/integration/test_client_reasoning.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenwatt.load.probe import LoadGenerator
from tokenwatt.load.workload import build_workload
from tokenwatt.plan import engine_config, with_spec
from tokenwatt.schema.run import ProbeRecord
from tokenwatt.schema.spec import FixedTokens, SloSpec
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


def test_an_slo_on_ttfat_judges_the_first_answer_token_in_virtual_time(repo):
    """With half of each answer reasoning, the first answer token comes six decode steps after
    the first token: a bound between the two p99s passes on TTFT and fails on TTFAT, and the
    early stop proves the TTFAT fail from the answer tokens."""
    loaded = reasoning_spec(repo, fraction=0.5)
    spec = loaded.spec
    work = build_workload(spec, context_tokens=4096)
    config = engine_config(loaded)
    plan = ProbePlan(phase="search", rate_rps=4.0, warmup_s=0.5, window_s=4.0)

    def probe(slo: SloSpec, *, early_stop: bool = False) -> ProbeRecord:
        server = VirtualServer(config, work, request_timeout_s=60)
        stopping = ProbePlan(
            phase="search", rate_rps=4.0, warmup_s=0.5, window_s=4.0, early_stop=early_stop
        )
        return server.probe(stopping if early_stop else plan, index=0, slo=slo).record

    loose = probe(spec.slo)
    assert loose.ttfat_ms is not None
    ttft, ttfat = loose.ttft_ms.p99, loose.ttfat_ms.p99
    assert ttft is not None
    assert ttfat is not None
    assert ttfat > ttft
    assert loose.tpot_ms.p99 is not None
    assert loose.tpot_ms.p99 <= spec.slo.tpot_p99_ms
    bound = (ttft + ttfat) / 2
    on_ttft = SloSpec(ttft_p99_ms=bound, tpot_p99_ms=spec.slo.tpot_p99_ms)
    on_ttfat = SloSpec(ttfat_p99_ms=bound, tpot_p99_ms=spec.slo.tpot_p99_ms)
    assert probe(on_ttft).slo_pass
    assert not probe(on_ttfat).slo_pass
    stopped = probe(on_ttfat, early_stop=True)
    assert stopped.early_stop is not None
    assert stopped.early_stop.outcome == "fail"
    assert stopped.early_stop.ttft_exceeding >= stopped.early_stop.exceeding_needed
    assert probe(on_ttft, early_stop=True).early_stop is None  # it passes: never stopped


def test_a_run_on_ttfat_through_report_and_page(repo, tmp_path):
    """``slo.ttfat_p99_ms`` through ``tokenwatt run`` (real time, the reasoning simulator over
    HTTP), ``tokenwatt report`` (which recomputes every probe's verdict on TTFAT) and the page."""
    from tests.measure_cli import (
        load_valid_run,
        measure_argv,
        report_cli,
        run_measure,
        tiny_sim_spec_data,
        write_spec,
    )
    from tokenwatt.pages.render import make_environment, render_result, result_view
    from tokenwatt.store import load_result

    data = tiny_sim_spec_data(repo)
    data["engine"].update(api="chat", ignore_eos=True)
    data["engine"]["sim"]["reasoning_fraction"] = 0.5
    data["workload"]["output_tokens"] = {"dist": "fixed", "value": OUTPUT}
    data["slo"] = {"ttfat_p99_ms": 5000.0, "tpot_p99_ms": 100.0}
    data["sweep"] = {"rates": [2]}
    spec_path = write_spec(tmp_path / "ttfat.spec.yaml", data)
    out = tmp_path / "run.json"
    done = run_measure(measure_argv(spec_path, out, "--quick", "--no-accuracy"), cwd=repo)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "p99 TTFAT" in done.stderr  # the progress names the bound it judges
    run = load_valid_run(out, cwd=repo)  # the probes' verdicts recomputed on TTFAT agree
    assert run.spec.slo.first_token == "ttfat"
    assert all(p.ttfat_ms is not None for p in run.probes)
    assert any(p.slo_pass for p in run.probes)
    result_path = tmp_path / "result.json"
    report = report_cli([out], result_path, title="TTFAT", cwd=repo)
    assert report.returncode == 0, report.stderr[-3000:]
    raw = json.loads(result_path.read_text(encoding="utf-8"))
    assert raw["slo"] == {"ttfat_p99_ms": 5000.0, "tpot_p99_ms": 100.0}
    result = load_result(result_path)
    (config,) = result.configs
    assert config.ttfat_p99_ms is not None
    assert config.probes
    assert all(p.ttfat_p99_ms is not None and p.ttft_over_pct is None for p in config.probes)
    text = render_result(
        result_view(result, source="results/ttfat.json"),
        env=make_environment(repo / "templates"),
        draw=lambda chart, prefix: "<svg></svg>",
    )
    assert "p99 time to first answer token (TTFAT, after reasoning) ≤ 5,000 ms" in text
    assert "judged: the SLO's first-token bound" in text
