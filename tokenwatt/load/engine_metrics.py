"""What tokenwatt reads from an engine's Prometheus ``/metrics`` (vLLM's names).

vLLM, and the embedded simulator that copies its names, serve one series per engine (label
``engine``); a figure is summed over them. The page is read by :func:`tokenwatt.promtext.parse`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenwatt.promtext import parse, series_sum

__all__ = ["RUNNING_GAUGE", "EngineMetrics", "parse_engine_metrics"]

RUNNING_GAUGE = "vllm:num_requests_running"
"""The engine's running-batch gauge (requests in model execution batches)."""

_KV_USAGE_GAUGES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")


@dataclass(frozen=True)
class EngineMetrics:
    """The engine's figures on one page, summed over engines (None: not on the page)."""

    running: float | None
    waiting: float | None
    kv_cache_usage: float | None
    """Fraction of the KV cache in use (0..1), averaged over engines."""
    kv_cache_memory_bytes: float | None
    """Bytes of KV cache the engines allocated (``vllm:cache_config_info``)."""
    prompt_tokens_total: float | None
    generation_tokens_total: float | None


def parse_engine_metrics(text: str) -> EngineMetrics:
    """Read the running/waiting gauges, KV usage and token counters from a vLLM-named page.

    Raises:
        ValueError: the page is not in the Prometheus text format (naming the line).
    """
    samples = parse(text)
    kv_usage = [s.value for s in samples if s.name in _KV_USAGE_GAUGES]
    kv_mem: float | None = None
    for s in samples:
        raw = s.labels.get("kv_cache_memory_bytes") if s.name == "vllm:cache_config_info" else None
        if raw is not None and raw.replace(".", "", 1).isdigit():
            kv_mem = (kv_mem or 0.0) + float(raw)
    return EngineMetrics(
        running=series_sum(samples, RUNNING_GAUGE),
        waiting=series_sum(samples, "vllm:num_requests_waiting"),
        kv_cache_usage=sum(kv_usage) / len(kv_usage) if kv_usage else None,
        kv_cache_memory_bytes=kv_mem,
        prompt_tokens_total=series_sum(samples, "vllm:prompt_tokens_total"),
        generation_tokens_total=series_sum(samples, "vllm:generation_tokens_total"),
    )
