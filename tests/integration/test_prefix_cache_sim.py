"""The simulator's prefix cache against the workload's construction, in real and virtual time.

``tests/data/prefix-sim.spec.yaml``: four shared prefixes of 450 tokens, then 64 tokens of each
request's own. Once a group is cached a request reuses 28 whole 16-token blocks (448 tokens) of
its 514 (``tokenwatt.load.prefix.expected_hit_rate``); the probe's hit rate, read from the
simulator's vLLM-named counters through the same telemetry as a real engine's, must come within
2 points of it, over HTTP and in virtual time. And more sharing buys capacity: the engine's
SLO capacity (the truth's bisection) rises with the shared fraction of a fixed prompt length.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from tests import factories
from tokenwatt.load.prefix import expected_hit_rate, trace_hit_rate
from tokenwatt.load.probe import LoadGenerator
from tokenwatt.load.workload import build_workload
from tokenwatt.plan import engine_config, true_capacity, with_spec
from tokenwatt.schema.spec import LoadedSpec, PrefixSpec, UniformTokens
from tokenwatt.sim.launch import launch, settings_from_spec
from tokenwatt.sim.virtual import VirtualServer
from tokenwatt.store import load_spec
from tokenwatt.sweep import ProbePlan

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SPEC = Path("tests/data/prefix-sim.spec.yaml")
RATE = 10.0


def expected_pct(loaded: LoadedSpec, *, own_mean: float, warmup_s: float, window_s: float) -> float:
    prefix = loaded.spec.workload.prefix
    assert prefix is not None
    return 100.0 * expected_hit_rate(
        groups=prefix.groups,
        shared_tokens=prefix.shared_tokens,
        own_tokens_mean=own_mean,
        block_tokens=16,
        warmup_requests=RATE * warmup_s,
        window_requests=RATE * window_s,
    )


async def test_hit_rate_over_http_matches_the_construction(repo: Path):
    loaded = load_spec(repo / SPEC)
    spec = loaded.spec
    m = spec.measurement
    work = build_workload(spec, trace_file=loaded.trace_file, context_tokens=4096)
    with launch(settings_from_spec(loaded)) as sim:
        async with LoadGenerator(
            spec.engine, work, base_url=sim.base_url, metrics_url=sim.metrics_url, workers=1
        ) as gen:
            plan = ProbePlan(
                phase="search", rate_rps=RATE, warmup_s=m.warmup_s, window_s=m.window_s
            )
            record = await gen.probe(plan, index=0, slo=spec.slo)
    assert record.failed == 0, record.failure_examples
    assert record.engine is not None
    measured = record.engine.prefix_cache_hit_rate_pct
    expected = expected_pct(loaded, own_mean=64, warmup_s=m.warmup_s, window_s=m.window_s)
    assert expected == pytest.approx(100 * 448 / 514, abs=0.05)  # every group seen in warm-up
    assert measured == pytest.approx(expected, abs=2.0)


async def test_a_stream_sent_again_as_another_variant_finds_nothing_cached(repo: Path):
    """The adaptive sweep's stream pairs send a stream twice in one run: the second time as
    content variant 1 (the same arrivals and lengths, other tokens). Over HTTP, the simulator's
    cache then serves only the variant's own shared prefixes (the construction's 87.2 %, as the
    first sending), where the same variant sent again is served whole from the cache."""
    loaded = load_spec(repo / SPEC)
    spec = loaded.spec
    work = build_workload(spec, trace_file=loaded.trace_file, context_tokens=4096)

    def plan(variant: int) -> ProbePlan:
        return ProbePlan(
            phase="refine", rate_rps=RATE, warmup_s=2, window_s=4, stream=1000, variant=variant
        )

    with launch(settings_from_spec(loaded)) as sim:
        async with LoadGenerator(
            spec.engine, work, base_url=sim.base_url, metrics_url=sim.metrics_url, workers=1
        ) as gen:
            first = await gen.probe(plan(0), index=0, slo=spec.slo)
            variant = await gen.probe(plan(1), index=1, slo=spec.slo)
            again = await gen.probe(plan(0), index=2, slo=spec.slo)
    rates: list[float] = []
    for record in (first, variant, again):
        assert record.failed == 0, record.failure_examples
        assert record.engine is not None
        assert record.stream == 1000
        assert record.engine.prefix_cache_hit_rate_pct is not None
        rates.append(record.engine.prefix_cache_hit_rate_pct)
    assert [r.variant for r in (first, variant, again)] == [0, 1, 0]
    # Same arrivals: the same window requests at the same rate.
    assert first.window_requests == variant.window_requests == again.window_requests
    expected = expected_pct(loaded, own_mean=64, warmup_s=2, window_s=4)
    assert rates[0] == pytest.approx(expected, abs=2.0)
    assert rates[1] == pytest.approx(expected, abs=2.0)
    assert rates[2] > 99.0  # 32 whole blocks of 514 tokens: 512 cached


def test_hit_rate_in_virtual_time_matches_the_construction(repo: Path):
    base = load_spec(repo / SPEC)
    own = UniformTokens(min=16, max=112)  # mean 64
    loaded = with_spec(
        base,
        base.spec.model_copy(
            update={"workload": base.spec.workload.model_copy(update={"input_tokens": own})}
        ),
    )
    config = engine_config(loaded)
    work = build_workload(loaded.spec, context_tokens=config.max_model_len)
    server = VirtualServer(config, work, request_timeout_s=30)
    plan = ProbePlan(phase="search", rate_rps=RATE, warmup_s=5, window_s=120)
    record = server.probe(plan, index=3, slo=loaded.spec.slo).record
    assert record.engine is not None
    assert record.engine.prefix_cache_hit_rate_pct == pytest.approx(
        expected_pct(loaded, own_mean=64, warmup_s=5, window_s=120), abs=2.0
    )
    # caching off: the counters stay at zero, and the probe has no hit rate to report
    off = config.__class__(**{**config.__dict__, "enable_prefix_caching": False})
    unmeasured = VirtualServer(off, work, request_timeout_s=30).probe(
        plan, index=3, slo=loaded.spec.slo
    )
    assert unmeasured.record.engine is None


def test_mooncake_shaped_prompts_hit_what_the_trace_reuse_says_in_virtual_time(
    repo: Path, shared: Path, tmp_path: Path
):
    """Rows of the real Mooncake trace (hash ids as 128-token blocks) against the simulator's
    16-token-block cache: the window's hit rate is the trace's own reuse
    (``trace_hit_rate`` over the requests the probe sent, the warm-up's uncounted)."""
    trace = factories.mooncake_in_miniature(shared, tmp_path / "mooncake-mini.jsonl", pairs=12)
    base = load_spec(repo / SPEC)
    w = base.spec.workload.model_copy(
        update={
            "trace": str(trace),
            "trace_block_tokens": 128,
            "input_tokens": None,
            "output_tokens": None,
            "prefix": None,
        }
    )
    loaded = with_spec(base, base.spec.model_copy(update={"workload": w}))
    config = engine_config(loaded)
    work = build_workload(loaded.spec, trace_file=trace, context_tokens=config.max_model_len)
    assert work.shares_prefixes
    plan = ProbePlan(phase="search", rate_rps=RATE, warmup_s=1, window_s=4)
    offsets = list(
        itertools.takewhile(
            lambda t: t < plan.warmup_s + plan.window_s, work.arrivals(RATE, stream=0)
        )
    )
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    sent = [rows[i % len(rows)] for i in range(len(offsets))]
    expected = trace_hit_rate(
        [r["hash_ids"] for r in sent],
        [r["input_length"] for r in sent],
        trace_block_tokens=128,
        cache_block_tokens=16,
        counted_from=sum(t < plan.warmup_s for t in offsets),
    )
    assert expected > 0.3  # deep reuse, not just the trace's common first block
    record = VirtualServer(config, work, request_timeout_s=30).probe(
        plan, index=0, slo=loaded.spec.slo
    )
    assert record.record.engine is not None
    assert record.record.engine.prefix_cache_hit_rate_pct == pytest.approx(100 * expected, abs=2.0)
    # the run file's expected figure: one pass over the trace in its order, at the sim's blocks
    assert work.expected_hit_rate(16) == pytest.approx(
        trace_hit_rate(
            [r["hash_ids"] for r in rows],
            [r["input_length"] for r in rows],
            trace_block_tokens=128,
            cache_block_tokens=16,
        )
    )


def shared_fraction(loaded: LoadedSpec, share: float) -> LoadedSpec:
    total = 2048
    shared = round(share * total)
    w = loaded.spec.workload.model_copy(
        update={
            "input_tokens": total - shared,
            "output_tokens": 64,
            "prefix": PrefixSpec(groups=8, shared_tokens=shared) if shared else None,
        }
    )
    return with_spec(loaded, loaded.spec.model_copy(update={"workload": w}))


def test_capacity_rises_with_the_shared_fraction(repo: Path):
    # The demo's engine (Qwen3-8B on an L40S, p99 TPOT <= 36 ms): 2,048-token prompts make
    # prefill the cost; the cache removes most of it.
    base = load_spec(repo / "specs/demo-sim.spec.yaml")
    capacities = []
    for share in (0.0, 0.5, 0.9):
        loaded = shared_fraction(base, share)
        truth = true_capacity(
            loaded,
            engine_config(loaded),
            bracket_rps=(0.5, 1.0),
            window_s=60,
            warmup_s=10,
            seeds=1,
            tolerance=0.03,
            cache=False,
        )
        capacities.append(truth.true_capacity_rps)
    unique, half, most = capacities
    assert half > 1.3 * unique  # measured: 0.53, 0.98, 4.2 req/s
    assert most > 2.0 * half


def test_a_run_records_the_expected_reuse_and_the_page_sets_it_beside_each_probes(
    repo: Path, tmp_path: Path
):
    """``tokenwatt run`` on the shared prefixes (the simulator over HTTP) records the workload's
    expected hit rate at the block size the engine's /metrics states; ``tokenwatt report`` and
    the page show it beside the hit rate measured in each probe."""
    from tests.measure_cli import load_valid_run, measure_argv, report_cli, run_measure
    from tokenwatt.pages.render import make_environment, render_result, result_view
    from tokenwatt.store import load_result

    out = tmp_path / "run.json"
    done = run_measure(measure_argv(repo / SPEC, out, "--no-accuracy"), cwd=repo)
    assert done.returncode == 0, done.stderr[-3000:]
    run = load_valid_run(out, cwd=repo)
    assert run.prefix_reuse is not None
    assert run.prefix_reuse.block_tokens == 16
    assert "cache_config_info" in run.prefix_reuse.block_source
    assert run.prefix_reuse.expected_hit_rate_pct == pytest.approx(100 * 448 / 514, abs=0.01)
    measured = [p.engine.prefix_cache_hit_rate_pct for p in run.probes if p.engine is not None]
    assert measured
    assert all(m is not None and abs(m - 87.16) < 4.0 for m in measured), measured
    result_path = tmp_path / "result.json"
    report = report_cli([out], result_path, title="Prefixes", cwd=repo)
    assert report.returncode == 0, report.stderr[-3000:]
    result = load_result(result_path)
    (config,) = result.configs
    assert config.prefix_expected_hit_rate_pct == run.prefix_reuse.expected_hit_rate_pct
    assert result.workload.prefix is not None
    assert "expected prefix-cache hit rate 87.2 % (16-token blocks" in result.workload.prefix
    text = render_result(
        result_view(result, source="results/prefixes.json"),
        env=make_environment(repo / "templates"),
        draw=lambda chart, prefix: "<svg></svg>",
    )
    assert "Prefix-cache hits |" in text
    assert "(the workload's construction: 87.2 %)" in text
