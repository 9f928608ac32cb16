"""What the simulator's ``/metrics`` says: vLLM's series, dcgm-exporter's, and ground truth.

- vLLM 0.32's names, types and labels (``engine``, ``model_name``) for the series tokenwatt and
  vLLM dashboards read (checked against a real vLLM by the tests);
- dcgm-exporter's field names, units and labels (``gpu``, ``UUID``, ``device``, ``modelName``,
  ``Hostname``) for power, energy, the power limit and clock-event reasons, one series per GPU;
- ``tokenwatt_sim_*``: the simulator's exact counters (bytes read, steps, batch integral,
  energy, time at the power cap, scheduling lag), so tests can compare estimates with truth.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tokenwatt import __version__
from tokenwatt.schema.base import SIM_ENGINE
from tokenwatt.sim.engine import EngineCore
from tokenwatt.sim.metrics import MetricsWriter

__all__ = ["SIM_VERSION", "render_metrics"]

SIM_VERSION = f"{SIM_ENGINE} {__version__}"
"""What ``/version`` and ``tokenwatt_sim_info`` report: never a real engine's version."""


def render_metrics(
    core: EngineCore,
    *,
    served_model_name: str,
    gpu_labels: Sequence[Mapping[str, str]],
    now_s: float,
) -> str:
    """The whole exposition of the simulator at monotonic time ``now_s``."""
    cfg = core.config
    st = core.stats
    g = cfg.geometry
    w = MetricsWriter()
    labels = {"engine": "0", "model_name": served_model_name}

    # -- vLLM (names, types and labels as vLLM 0.32 writes them) --
    w.simple(
        "vllm:num_requests_running",
        "gauge",
        "Number of requests in model execution batches.",
        len(core.running),
        labels,
    )
    w.simple(
        "vllm:num_requests_waiting",
        "gauge",
        "Number of requests waiting to be processed.",
        len(core.waiting),
        labels,
    )
    w.simple(
        "vllm:kv_cache_usage_perc",
        "gauge",
        "KV-cache usage. 1 means 100 percent usage.",
        core.kv_usage,
        labels,
    )
    w.simple(
        "vllm:num_preemptions_total",
        "counter",
        "Cumulative number of preemption from the engine.",
        st.preemptions,
        labels,
    )
    # Counted when a request is admitted (tokenwatt.sim.prefix_cache); both stay 0 with prefix
    # caching off, as vLLM's do.
    w.simple(
        "vllm:prefix_cache_queries_total",
        "counter",
        "Prefix cache queries, in terms of number of queried tokens.",
        st.prefix_queried_tokens,
        labels,
    )
    w.simple(
        "vllm:prefix_cache_hits_total",
        "counter",
        "Prefix cache hits, in terms of number of cached tokens.",
        st.prefix_hit_tokens,
        labels,
    )
    w.simple(
        "vllm:prompt_tokens_total",
        "counter",
        "Number of prefill tokens processed.",
        st.prompt_tokens,
        labels,
    )
    w.simple(
        "vllm:generation_tokens_total",
        "counter",
        "Number of generation tokens processed.",
        st.generation_tokens,
        labels,
    )
    w.labelled(
        "vllm:request_success_total",
        "counter",
        "Count of successfully processed requests.",
        (
            ({**labels, "finished_reason": reason}, float(st.finished.get(reason, 0)))
            for reason in ("stop", "length", "abort", "error")
        ),
    )
    tok = 1.0 / cfg.tensor_parallel
    w.simple(
        "vllm:estimated_flops_per_gpu_total",
        "counter",
        "Estimated number of floating point operations per GPU (for Model Flops Utilization"
        " calculations).",
        st.flops * tok,
        labels,
    )
    w.simple(
        "vllm:estimated_read_bytes_per_gpu_total",
        "counter",
        "Estimated number of bytes read from memory per GPU (for Model Flops Utilization"
        " calculations).",
        st.read_bytes * tok,
        labels,
    )
    w.simple(
        "vllm:estimated_write_bytes_per_gpu_total",
        "counter",
        "Estimated number of bytes written to memory per GPU (for Model Flops Utilization"
        " calculations).",
        st.kv_write_bytes * tok,
        labels,
    )
    w.histogram(
        "vllm:iteration_tokens_total",
        "Histogram of number of tokens per engine_step.",
        st.iteration_tokens,
        labels,
    )
    w.histogram(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        st.ttft,
        labels,
    )
    w.histogram(
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        st.itl,
        labels,
    )
    w.histogram(
        "vllm:request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
        st.tpot,
        labels,
    )
    w.histogram(
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        st.e2e,
        labels,
    )
    w.histogram(
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        st.queue,
        labels,
    )
    w.simple(
        "vllm:cache_config_info",
        "gauge",
        "Information of the LLMEngine CacheConfig",
        1.0,
        {
            "block_size": str(cfg.block_size),
            "cache_dtype": g.kv_dtype,
            "enable_prefix_caching": str(cfg.enable_prefix_caching),
            "engine": "0",
            "gpu_memory_utilization": str(cfg.gpu_memory_utilization),
            "kv_cache_memory_bytes": str(int(cfg.kv_capacity_bytes)),
            "kv_cache_size_tokens": str(cfg.kv_capacity_tokens),
            "num_gpu_blocks": str(cfg.num_blocks),
        },
    )

    # -- dcgm-exporter (field names, units and label names as dcgm-exporter writes them) --
    meter = core.meter
    power_w = meter.mean_power_w(now_s)
    energy_mj = meter.energy_j(now_s) * 1000.0
    reasons = meter.reasons(now_s)
    w.labelled(
        "DCGM_FI_DEV_POWER_USAGE",
        "gauge",
        "Power draw (in W).",
        ((lab, power_w) for lab in gpu_labels),
    )
    w.labelled(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        ((lab, energy_mj) for lab in gpu_labels),
    )
    w.labelled(
        "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        "gauge",
        "Power management limit (in W).",
        ((lab, cfg.power.limit_w) for lab in gpu_labels),
    )
    w.labelled(
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "gauge",
        "Current clock event reasons (bitmask of NVML clocks event reasons).",
        ((lab, float(reasons)) for lab in gpu_labels),
    )

    # -- ground truth of the simulator --
    gpus = float(cfg.tensor_parallel)
    w.simple(
        "tokenwatt_sim_info",
        "gauge",
        "The simulated engine (always 1).",
        1.0,
        {
            "version": SIM_VERSION,
            "gpu": cfg.gpu.key,
            "gpus": str(cfg.tensor_parallel),
            "model": g.name,
            "weight_dtype": g.weight_dtype,
            "kv_dtype": g.kv_dtype,
        },
    )
    truth = (
        ("tokenwatt_sim_steps_total", "Engine steps run.", st.steps),
        ("tokenwatt_sim_busy_seconds_total", "Time spent in steps, s.", st.busy_s),
        ("tokenwatt_sim_read_bytes_total", "Bytes read by all steps, all GPUs.", st.read_bytes),
        (
            "tokenwatt_sim_weight_read_bytes_total",
            "Weight bytes read (dense + touched experts), all GPUs.",
            st.weight_read_bytes,
        ),
        ("tokenwatt_sim_kv_read_bytes_total", "KV-cache bytes read.", st.kv_read_bytes),
        ("tokenwatt_sim_kv_write_bytes_total", "KV-cache bytes written.", st.kv_write_bytes),
        ("tokenwatt_sim_flops_total", "Floating-point operations, all GPUs.", st.flops),
        (
            "tokenwatt_sim_running_seconds_total",
            "Integral of the running-request count over time (mean batch = delta / seconds).",
            st.running_seq_s,
        ),
        (
            "tokenwatt_sim_decode_seconds_total",
            "Integral of the count of sequences emitting a token each step, over time.",
            st.decode_seq_s,
        ),
        ("tokenwatt_sim_decode_tokens_total", "Tokens from decode steps.", st.decode_tokens),
        (
            "tokenwatt_sim_energy_joules_total",
            "Energy drawn by all simulated GPUs, J.",
            meter.energy_j(now_s) * gpus,
        ),
        (
            "tokenwatt_sim_throttled_seconds_total",
            "Step time spent at the power cap, s.",
            st.throttled_s,
        ),
    )
    for name, help_text, value in truth:
        w.simple(name, "counter", help_text, float(value))
    w.histogram(
        "tokenwatt_sim_scheduling_lag_seconds",
        "How late the engine loop woke after each step's end, s.",
        st.lag,
        {},
    )
    w.simple(
        "tokenwatt_sim_lost_seconds_total",
        "counter",
        "Time the engine timeline skipped because the process fell behind real time, s.",
        st.lost_s,
    )
    w.simple(
        "tokenwatt_sim_scheduling_lag_max_seconds",
        "gauge",
        "Largest scheduling lag since start, s.",
        st.lag_max_s,
    )
    w.histogram(
        "tokenwatt_sim_stream_lag_seconds",
        "Delay from a token's production to its write on the stream, s.",
        st.stream_lag,
        {},
    )
    w.simple(
        "tokenwatt_sim_kv_capacity_tokens",
        "gauge",
        "Tokens the simulated KV cache holds.",
        float(cfg.kv_capacity_tokens),
    )
    w.simple(
        "tokenwatt_sim_rated_bandwidth_bytes_per_second",
        "gauge",
        "Datasheet memory bandwidth of all simulated GPUs.",
        cfg.rated_bandwidth,
    )
    return w.text()
