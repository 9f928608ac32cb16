"""Memory-bandwidth utilisation (MBU): bytes a decode step reads ÷ step time ÷ rated bandwidth.

For ``B`` running sequences (the mean running batch)::

    bytes/step = dense weights + E·(1−(1−k/E)^B) routed experts per MoE layer + B × KV(context)
    steps/s    = output tok/s ÷ B
    MBU        = bytes/step × steps/s ÷ rated bandwidth

``B`` is the probes' mean running batch as :mod:`tokenwatt.metrics` defines it (the engine's
running-request gauge over the window, else Little's law), averaged over the
confirmation repeats; the evidence says which. The KV term uses the mean context a running
sequence holds, weighted by decode steps, computed from the requests' input and output token
counts. Geometry (weights, experts, KV per token) comes from :mod:`tokenwatt.geometry`, the
module the simulator uses for its own ground truth.

Rated bandwidth: as :func:`tokenwatt.gpus.rated_bandwidth` resolves it (the spec's value, else
the GPU-name table, else NVML clocks); the evidence records which.

An estimate above :data:`MAX_PCT` is impossible (no GPU reads faster than its rated bandwidth),
so one of its inputs is wrong: typically ``B`` read low from a running gauge sampled every
0.25 s in a window whose requests run for less than that. The run file keeps it as evidence;
results and pages never state it (:func:`impossible_because`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence

from tokenwatt.geometry import ModelGeometry, expected_unique_experts
from tokenwatt.gpus import RatedBandwidth
from tokenwatt.schema.run import MbuEvidence, ProbeRecord

__all__ = [
    "MAX_PCT",
    "RatedBandwidth",
    "estimate_mbu",
    "estimate_mbu_for_probes",
    "impossible_because",
    "step_weighted_context",
]

logger = logging.getLogger(__name__)

MAX_PCT = 100.0
"""The most an MBU estimate can be: all of the rated bandwidth."""


# --------------------------------------------------------------------------------------------
# Context from the requests


def step_weighted_context(input_tokens: Iterable[int], output_tokens: Iterable[int]) -> float:
    """Mean context a sequence attends over in a decode step, weighted by decode steps.

    The first output token comes from the prefill; decode step ``j = 1 … out−1`` attends over
    ``in + j`` tokens. Summed over requests:
    ``Σ [(out−1)·in + (out−1)·out/2] ÷ Σ (out−1)``.
    """
    num = 0.0
    den = 0
    for n_in, n_out in zip(input_tokens, output_tokens, strict=True):
        steps = n_out - 1
        if steps <= 0:
            continue
        num += steps * n_in + steps * n_out / 2.0
        den += steps
    return num / den if den else 0.0


# --------------------------------------------------------------------------------------------
# The estimate


def estimate_mbu(
    *,
    geometry: ModelGeometry,
    output_tok_s: float,
    batch_mean: float,
    batch_source: str,
    mean_context_tokens: float,
    bandwidth: RatedBandwidth,
    replicas: int = 1,
    tensor_parallel: int = 1,
    extra_assumptions: Sequence[str] = (),
) -> MbuEvidence:
    """MBU from the mean running batch, output throughput and mean context.

    Args:
        geometry: The served model.
        output_tok_s: Output tokens per second over all replicas.
        batch_mean: Mean running batch over all replicas.
        batch_source: ``"metrics"`` or ``"littles_law"``.
        mean_context_tokens: Mean context of a running sequence (:func:`step_weighted_context`).
        bandwidth: Rated bandwidth of all GPUs in use.
        replicas: Data-parallel replicas (each reads its own copy of the weights).
        tensor_parallel: GPUs per replica (KV heads fewer than this are replicated).
        extra_assumptions: More lines for the evidence's assumptions.
    """
    if batch_source not in ("metrics", "littles_law"):
        raise ValueError(f"batch_source must be 'metrics' or 'littles_law', not {batch_source!r}")
    per_replica_batch = batch_mean / replicas if replicas else 0.0
    step = geometry.decode_step_bytes(
        batch=per_replica_batch, mean_context_tokens=mean_context_tokens
    )
    kv_factor = 1.0
    if tensor_parallel > 1:
        heads = 1 if geometry.is_mla else geometry.num_kv_heads
        kv_factor = max(1.0, tensor_parallel / heads)
    kv_bytes = step.kv_bytes * kv_factor
    weight_bytes = step.weight_bytes
    bytes_per_step = weight_bytes + kv_bytes
    steps_per_s = output_tok_s / batch_mean if batch_mean > 0 else 0.0
    bytes_per_s = bytes_per_step * steps_per_s * replicas
    mbu_pct = 100.0 * bytes_per_s / (bandwidth.total_tbs * 1e12)

    experts: float | None = None
    assumptions: list[str] = []
    if batch_source == "metrics":
        assumptions.append(
            "B: the engine's running-request gauge (vllm:num_requests_running, or SGLang's or"
            " llama.cpp's equivalent) averaged over the window (includes sequences still in"
            " prefill)"
        )
    else:
        assumptions.append(
            "B: Little's law, the time-average number of requests between their first and"
            " last token inside the window"
        )
    assumptions.append("steps/s = output tok/s / B (every running sequence emits one token a step)")
    assumptions.append(
        "Bytes per step: a pure decode step; prefill chunks sharing a step read more"
        " (their KV), not counted"
    )
    if geometry.is_moe:
        experts = expected_unique_experts(
            geometry.num_experts, geometry.experts_per_token, per_replica_batch
        )
        assumptions.append(
            f"MoE: routing uniform and independent across tokens, so B = {per_replica_batch:.1f}"
            f" sequences touch E(1-(1-k/E)^B) = {experts:.1f} of {geometry.num_experts} experts"
            f" per layer (k = {geometry.experts_per_token})"
        )
    assumptions.append(
        f"KV: B x KV bytes of a {mean_context_tokens:.0f}-token context"
        f" ({geometry.kv_bytes_per_token / 1024:.1f} KiB/token, {geometry.kv_dtype});"
        " context = step-weighted mean over the window's requests"
    )
    if geometry.sliding_windows:
        assumptions.append(
            "Sliding-window layers: KV capped at the window, applied to the mean context"
        )
    if kv_factor > 1:
        assumptions.append(f"KV heads replicated across tensor-parallel GPUs (x{kv_factor:.0f})")
    assumptions.append(
        "Weights: every non-expert weight once a step; the input embedding reads only B rows;"
        f" {geometry.weight_dtype} where quantized, {geometry.base_dtype} elsewhere"
    )
    if replicas > 1:
        assumptions.append(f"{replicas} replicas, each reading its own weights at B/{replicas}")
    assumptions.append(f"Rated bandwidth: {bandwidth.source}")
    assumptions.extend(geometry.notes)
    assumptions.extend(extra_assumptions)
    return MbuEvidence(
        mbu_pct=mbu_pct,
        bytes_per_step=bytes_per_step,
        weight_bytes_per_step=weight_bytes,
        kv_bytes_per_step=kv_bytes,
        batch_mean=batch_mean,
        batch_source="metrics" if batch_source == "metrics" else "littles_law",
        steps_per_s=steps_per_s,
        output_tok_s=output_tok_s,
        rated_bw_tbs=bandwidth.total_tbs,
        rated_bw_source=bandwidth.source,
        assumptions=assumptions,
        mean_context_tokens=mean_context_tokens,
        experts_touched_per_layer=experts,
        gpus=bandwidth.gpus,
        geometry=geometry.describe(),
    )


def estimate_mbu_for_probes(
    probes: Sequence[ProbeRecord],
    *,
    geometry: ModelGeometry,
    bandwidth: RatedBandwidth,
    replicas: int = 1,
    tensor_parallel: int = 1,
) -> MbuEvidence | None:
    """MBU over some probes (the confirmation repeats), pooling their windows.

    Output tok/s = tokens that arrived inside their windows from any request
    (``window_emitted_tokens``, the interval ``B`` is measured over) ÷ their window time; for
    run files without that figure, their window requests' output tokens instead. ``B`` is the
    mean of the probes' own ``running_batch_mean``: from the engine's metrics when every probe
    has it from there, else ``littles_law`` (a probe whose scrapes all failed fell back to it;
    the assumptions then say how many did). Returns None when a probe carries no request table
    (nothing to compute the context from) or no running batch, or the probes produced no
    tokens.
    """
    if not probes or any(p.requests is None for p in probes):
        return None
    window_s = math.fsum(p.window_s for p in probes)
    emitted = [p.window_emitted_tokens for p in probes]
    extra: list[str] = []
    tokens: float
    if all(t is not None for t in emitted):
        tokens = math.fsum(t for t in emitted if t is not None)
        extra.append(
            "Output tok/s: tokens that arrived inside the windows from any request, the same"
            " interval as B"
        )
    else:
        tokens = float(sum(p.output_tokens for p in probes))
        extra.append(
            "Output tok/s: output tokens of the window requests / window (the run file has no"
            " per-window token arrivals); biased when the window is short against E2E latency"
        )
    if window_s <= 0 or tokens <= 0:
        return None
    n_in: list[int] = []
    n_out: list[int] = []
    batches: list[float] = []
    for p in probes:
        assert p.requests is not None
        if p.running_batch_mean is None or p.batch_source is None:
            return None
        batches.append(p.running_batch_mean)
        for i, status in enumerate(p.requests.status):
            if status == "ok":
                n_in.append(p.requests.input_tokens[i])
                n_out.append(p.requests.output_tokens[i])
    batch = math.fsum(batches) / len(batches)
    if batch <= 0:
        return None
    from_metrics = sum(1 for p in probes if p.batch_source == "metrics")
    engines = [p.engine for p in probes if p.engine is not None]
    if from_metrics == len(engines) == len(probes):
        scrapes = sum(e.samples for e in engines)
        extra.append(
            f"B: from {scrapes} scrapes of the gauge in {window_s:g} s of windows; a window whose"
            " requests run for less than the time between scrapes can read it far off"
        )
    if 0 < from_metrics < len(probes):
        extra.append(
            f"B: mean over {len(probes)} probes, {from_metrics} of them from the engine's"
            " metrics, the others by Little's law (no metrics sample in their window)"
        )
    return estimate_mbu(
        geometry=geometry,
        output_tok_s=tokens / window_s,
        batch_mean=batch,
        batch_source="metrics" if from_metrics == len(probes) else "littles_law",
        mean_context_tokens=step_weighted_context(n_in, n_out),
        bandwidth=bandwidth,
        replicas=replicas,
        tensor_parallel=tensor_parallel,
        extra_assumptions=extra,
    )


def impossible_because(evidence: MbuEvidence) -> str | None:
    """Why an estimate cannot be stated (above :data:`MAX_PCT`), or None when it can.

    Names the estimate and the inputs a reviewer checks first: ``B`` and where it came from,
    and the step rate it implies.
    """
    if evidence.mbu_pct <= MAX_PCT:
        return None
    source = (
        "the engine's running-request gauge"
        if evidence.batch_source == "metrics"
        else "Little's law over the window"
    )
    return (
        f"the estimate is {evidence.mbu_pct:.1f} % of the rated"
        f" {evidence.rated_bw_tbs:g} TB/s, more than a GPU can read, so an input is wrong"
        f" (B = {evidence.batch_mean:.2f} sequences from {source}, implying"
        f" {evidence.steps_per_s:,.0f} decode steps/s)"
    )
