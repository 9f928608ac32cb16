"""The page shows the engine's telemetry, the audits and the power readings' validity."""

from __future__ import annotations

from pathlib import Path

from tests.result_factories import full_mode_data
from tokenwatt.pages import charts
from tokenwatt.pages.render import make_environment, render_result, result_view
from tokenwatt.schema.result import ResultFile

REPO = Path(__file__).resolve().parents[2]


def _page(data):
    result = ResultFile.model_validate(data)
    view = result_view(result, source="results/x.json")
    return result, render_result(
        view, env=make_environment(REPO / "templates"), draw=lambda chart, prefix: "<svg></svg>"
    )


def test_telemetry_audits_and_power_validity_on_the_page(seed_path):
    data = full_mode_data(seed_path)
    for config in data["configs"]:
        config["engine_telemetry"] = {
            "dialect": "vllm",
            "running_mean": 41.5,
            "waiting_mean": 3.25,
            "kv_cache_usage_mean_pct": 62.5,
            "kv_cache_usage_max_pct": 91.0,
            "preemptions": 0,
            "prefix_cache_hit_rate_pct": 12.5,
        }
        config["audits"] = {"probes": 9, "littles_law_worst_pct": -4.5, "littles_law_agrees": True}
        config["power_validity"] = {"coverage_pct": 97.5, "max_gap_s": 4.0, "gpus_seen": [1]}
        for i, probe in enumerate(config["probes"]):
            probe.update(running_mean=10.0 + i, waiting_mean=0.5 * i, kv_cache_usage_mean_pct=5.0)
    tuned = data["configs"][1]
    tuned["engine_telemetry"].update(preemptions=17, queue_growing=True)
    tuned["audits"].update(
        usage_mismatches=5, usage_below_chunks=2, token_examples=["request 7: usage says 9"]
    )
    result, text = _page(data)
    assert "| Engine at the confirmed rate: running / waiting | 41.5 / 3.2 requests" in text
    assert "(queue growing)" in text
    assert "62.5 % / 91.0 % |" in text
    assert "| Engine: preemptions | 0 | 17 | 0 |" in text
    assert "| Engine: prefix-cache hit rate | 12.5 % |" in text
    assert "| Engine: speculative-decoding acceptance | not measured |" in text
    assert "2 usage below chunks" in text
    assert "(5 with usage ≠ chunks, recorded only)" in text
    assert "request 7: usage says 9" in text
    assert "97.5 % / 4.0 s / 1 |" in text
    # The policy names the reasons: the mismatches and the 4 s gap.
    assert "token&#95;mismatches" in text or "token_mismatches" in text
    assert "power&#95;max&#95;gap&#95;s" in text or "power_max_gap_s" in text
    engine = [c for c in charts.charts_for(result, validate=True) if c.key == "engine"]
    assert len(engine) == 1


def test_no_engine_chart_without_gauges(seed_path):
    result, _ = _page(full_mode_data(seed_path))
    assert "engine" not in [c.key for c in charts.charts_for(result)]
