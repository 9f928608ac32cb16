"""The MBU estimate and its inputs, against hand-worked values."""

from __future__ import annotations

import pytest

from tests import factories
from tokenwatt.geometry import geometry_from_config
from tokenwatt.mbu import (
    RatedBandwidth,
    estimate_mbu,
    estimate_mbu_for_probes,
    impossible_because,
    step_weighted_context,
)
from tokenwatt.schema.run import EngineTelemetry, MbuEvidence, RequestTable

TINY = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 1000,
    "torch_dtype": "bfloat16",
}


def test_mbu_hand_worked_dense():
    g = geometry_from_config(TINY)
    # Per layer: q,o 64x64 each, k,v 64x32 each, MLP 3x64x128, two norms of 64.
    per_layer = 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64
    assert per_layer == 36992
    assert g.total_params == 2 * per_layer + 64 + 2 * 1000 * 64 == 202048
    assert g.kv_bytes_per_token == 2 * 2 * 2 * 16 * 2 == 256
    ev = estimate_mbu(
        geometry=g,
        output_tok_s=2000.0,
        batch_mean=4.0,
        batch_source="metrics",
        mean_context_tokens=100.0,
        bandwidth=RatedBandwidth(0.001, 1, "test"),
    )
    # Weights: everything but the embedding table (bf16), plus 4 gathered rows of 64.
    weights = 2 * (202048 - 64000) + 4 * 64 * 2
    kv = 4 * 100 * 256
    assert ev.weight_bytes_per_step == weights == 276608
    assert ev.kv_bytes_per_step == kv == 102400
    assert ev.bytes_per_step == 379008
    assert ev.steps_per_s == 500.0
    # 379,008 B x 500 /s = 189.504 MB/s of 1 GB/s
    assert ev.mbu_pct == pytest.approx(18.9504)
    assert ev.batch_source == "metrics"
    assert ev.rated_bw_source == "test"
    assert ev.experts_touched_per_layer is None
    assert any("Little" not in a and "vllm:num_requests_running" in a for a in ev.assumptions)


def test_mbu_moe_uses_distinct_experts():
    cfg = {**TINY, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
    g = geometry_from_config(cfg)
    ev = estimate_mbu(
        geometry=g,
        output_tok_s=100.0,
        batch_mean=2.0,
        batch_source="littles_law",
        mean_context_tokens=0.0,
        bandwidth=RatedBandwidth(1.0, 1, "test"),
    )
    # E (1 - (1 - k/E)^B) = 4 (1 - 0.5^2) = 3 experts per layer, each 3 x 64 x 32 bf16 weights.
    assert ev.experts_touched_per_layer == pytest.approx(3.0)
    expert_bytes = 3 * 64 * 32 * 2
    router = 64 * 4 * 2
    dense = 2 * (2 * 64 * 64 + 2 * 64 * 32) * 2 + 2 * router + 2 * (2 * 2 * 64) + 64 * 2
    dense += 1000 * 64 * 2 + 2 * 64 * 2  # output head, two gathered embedding rows
    assert ev.weight_bytes_per_step == pytest.approx(dense + 2 * 3 * expert_bytes)
    assert any("E(1-(1-k/E)^B) = 3.0 of 4 experts" in a for a in ev.assumptions)


def test_mbu_replicas_and_tensor_parallel():
    g = geometry_from_config(TINY)
    one = estimate_mbu(
        geometry=g,
        output_tok_s=1000.0,
        batch_mean=4.0,
        batch_source="metrics",
        mean_context_tokens=50.0,
        bandwidth=RatedBandwidth(0.001, 1, "t"),
    )
    two = estimate_mbu(
        geometry=g,
        output_tok_s=2000.0,
        batch_mean=8.0,
        batch_source="metrics",
        mean_context_tokens=50.0,
        bandwidth=RatedBandwidth(0.001, 2, "t"),
        replicas=2,
    )
    # Twice the work on twice the GPUs: same utilisation.
    assert two.mbu_pct == pytest.approx(one.mbu_pct)
    tp4 = estimate_mbu(
        geometry=g,
        output_tok_s=1000.0,
        batch_mean=4.0,
        batch_source="metrics",
        mean_context_tokens=50.0,
        bandwidth=RatedBandwidth(0.001, 4, "t"),
        tensor_parallel=4,
    )
    # 2 KV heads on 4 GPUs: each KV head is held (and read) twice.
    assert tp4.kv_bytes_per_step == pytest.approx(2 * one.kv_bytes_per_step)


def test_step_weighted_context_hand_values():
    # in=10,out=3: decode steps attend 11, 12 -> (2*10 + 2*3/2) = 23 over 2 steps
    # in=100,out=1: no decode step
    assert step_weighted_context([10, 100], [3, 1]) == pytest.approx(23 / 2)
    # Equal lengths: in + out/2
    assert step_weighted_context([1024] * 3, [256] * 3) == pytest.approx(1024 + 128)
    assert step_weighted_context([], []) == 0.0


def _probe_with_requests(index: int, *, batch: float | None, source: str | None = "metrics"):
    n = 4
    table = RequestTable(
        t_sched_s=[0.0] * n,
        send_lag_ms=[0.1] * n,
        ttft_ms=[100.0] * n,
        tpot_ms=[10.0] * n,
        e2e_ms=[2600.0] * n,
        input_tokens=[1000] * n,
        output_tokens=[251] * n,
        status=["ok"] * n,
    )
    return factories.probe(
        index,
        window_s=10.0,
        window_requests=n,
        ok=n,
        output_tokens=1004,
        requests=table,
        running_batch_mean=batch,
        batch_source=source if batch is not None else None,
    )


def test_estimate_for_probes_uses_the_probes_running_batch():
    g = geometry_from_config(TINY)
    bw = RatedBandwidth(0.001, 1, "t")
    with_metrics = estimate_mbu_for_probes(
        [_probe_with_requests(0, batch=3.0), _probe_with_requests(1, batch=5.0)],
        geometry=g,
        bandwidth=bw,
    )
    assert with_metrics is not None
    assert with_metrics.batch_source == "metrics"
    assert with_metrics.batch_mean == 4.0
    assert with_metrics.output_tok_s == pytest.approx(2008 / 20)
    assert with_metrics.mean_context_tokens == pytest.approx(1000 + 251 / 2)
    assert not any("scrapes" in a for a in with_metrics.assumptions)  # no telemetry recorded
    scraped = estimate_mbu_for_probes(
        [
            _probe_with_requests(i, batch=b).model_copy(
                update={"engine": EngineTelemetry(samples=n, running_mean=b)}
            )
            for i, (b, n) in enumerate([(3.0, 40), (5.0, 38)])
        ],
        geometry=g,
        bandwidth=bw,
    )
    assert scraped is not None
    assert "B: from 78 scrapes of the gauge in 20 s of windows" in "\n".join(scraped.assumptions)
    # Little's law as the probe computed it (tokenwatt.metrics.littles_law_batch), pooled.
    by_law = estimate_mbu_for_probes(
        [
            _probe_with_requests(0, batch=1.0, source="littles_law"),
            _probe_with_requests(1, batch=2.0, source="littles_law"),
        ],
        geometry=g,
        bandwidth=bw,
    )
    assert by_law is not None
    assert by_law.batch_source == "littles_law"
    assert by_law.batch_mean == pytest.approx(1.5)
    assert any("Little's law" in a for a in by_law.assumptions)
    # One probe's metrics scrapes failed: the pooled figure is not labelled as metrics.
    mixed = estimate_mbu_for_probes(
        [
            _probe_with_requests(0, batch=3.0),
            _probe_with_requests(1, batch=1.0, source="littles_law"),
        ],
        geometry=g,
        bandwidth=bw,
    )
    assert mixed is not None
    assert mixed.batch_source == "littles_law"
    assert mixed.batch_mean == pytest.approx(2.0)
    assert any("1 of them from the engine's metrics" in a for a in mixed.assumptions)
    # No request table, or no running batch: nothing to estimate from.
    assert estimate_mbu_for_probes([factories.probe(0)], geometry=g, bandwidth=bw) is None
    assert (
        estimate_mbu_for_probes([_probe_with_requests(0, batch=None)], geometry=g, bandwidth=bw)
        is None
    )


def test_estimate_for_probes_prefers_tokens_that_arrived_inside_the_window():
    g = geometry_from_config(TINY)
    bw = RatedBandwidth(0.001, 1, "t")
    a = _probe_with_requests(0, batch=3.0).model_copy(update={"window_emitted_tokens": 900.0})
    b = _probe_with_requests(1, batch=5.0).model_copy(update={"window_emitted_tokens": 700.5})
    est = estimate_mbu_for_probes([a, b], geometry=g, bandwidth=bw)
    assert est is not None
    # (900 + 700.5) tokens over 2 x 10 s, not the window requests' 2 x 1004.
    assert est.output_tok_s == pytest.approx(1600.5 / 20)
    assert est.steps_per_s == pytest.approx(1600.5 / 20 / 4.0)
    assert any("arrived inside the windows" in line for line in est.assumptions)
    # One probe without the figure (an older run file): both fall back to window requests.
    old = estimate_mbu_for_probes([a, _probe_with_requests(1, batch=5.0)], geometry=g, bandwidth=bw)
    assert old is not None
    assert old.output_tok_s == pytest.approx(2008 / 20)
    assert any("biased when the window is short" in line for line in old.assumptions)


def test_an_estimate_above_the_rated_bandwidth_is_named_impossible_with_its_inputs():
    g = geometry_from_config(TINY)

    def at(output_tok_s: float) -> MbuEvidence:
        return estimate_mbu(
            geometry=g,
            output_tok_s=output_tok_s,
            batch_mean=4.0,
            batch_source="metrics",
            mean_context_tokens=100.0,
            bandwidth=RatedBandwidth(0.001, 1, "test"),
        )

    # Hand-worked above: 379,008 B a step at B = 4. 2,000 tok/s is 500 steps/s, 18.95 %;
    # 11,000 tok/s is 2,750 steps/s, 104.2 %.
    possible = at(2000.0)
    assert impossible_because(possible) is None
    over = at(11000.0)
    assert over.mbu_pct == pytest.approx(379008 * 2750 / 1e9 * 100)  # of 1 GB/s
    why = impossible_because(over)
    assert why is not None
    assert "104.2 %" in why
    assert "0.001 TB/s" in why
    assert "B = 4.00 sequences from the engine's running-request gauge" in why
    assert "2,750 decode steps/s" in why
    # All of the rated bandwidth is still possible.
    exactly = over.model_copy(update={"mbu_pct": 100.0})
    assert impossible_because(exactly) is None
