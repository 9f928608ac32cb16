"""Result files to build pages from: the seed, and a full-mode result that passes the policy.

``full_mode_result(seed)`` fills every optional addition the page draws (probe history, power
trace, repeat goodputs, tokens per joule, energy, verdict, fleet projection) with numbers that
agree with each other, and measurement settings that meet the publishing policy. It stands in for
a result made by the real pipeline (``tokenwatt measure`` + ``report``) until one is committed.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

from tokenwatt.schema.result import ResultFile


def seed_data(seed_path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(seed_path.read_text(encoding="utf-8"))
    return data


def _probes(
    goodput: float, ttft_p99_ms: float, tpot_p99_ms: float, rate: float
) -> list[dict[str, Any]]:
    """A sweep: growth from 8 req/s, bisection, three confirmation repeats at ``rate``."""
    probes: list[dict[str, Any]] = []
    search = [8.0, 10.0, 12.5, 15.625, 19.53, 24.41]
    for r in search:
        load = r / rate
        ttft99 = round(ttft_p99_ms * load**3, 1) if load < 1.3 else None
        tpot99 = round(tpot_p99_ms * load**1.5, 1)
        probes.append(
            {
                "phase": "search",
                "rate_rps": r,
                "window_s": 60.0,
                "ttft_p50_ms": round(0.4 * (ttft99 or ttft_p99_ms * load**3), 1),
                "ttft_p99_ms": ttft99,
                "tpot_p50_ms": round(0.6 * tpot99, 1),
                "tpot_p99_ms": tpot99,
                "goodput_tok_s": round(goodput * min(load, 1.0), 1),
                "failed": 0 if ttft99 is not None else 12,
                "slo_pass": ttft99 is not None and ttft99 <= 2000 and tpot99 <= 50,
                "send_lag_p99_ms": 0.4,
            }
        )
        if ttft99 is None:  # the failing search probe was stopped early (sweep.early_stop)
            probes[-1].update(stopped_early=True, cut_requests=12)
    for _ in range(3):
        probes.append(
            {
                "phase": "confirm",
                "rate_rps": rate,
                "window_s": 300.0,
                "ttft_p50_ms": round(ttft_p99_ms * 0.4, 1),
                "ttft_p99_ms": ttft_p99_ms,
                "tpot_p50_ms": round(tpot_p99_ms * 0.6, 1),
                "tpot_p99_ms": tpot_p99_ms,
                "goodput_tok_s": goodput,
                "slo_pass": True,
                "send_lag_p99_ms": 0.3,
            }
        )
    return probes


def _trace(mean_w: float, *, seconds: int = 240, step_s: int = 4) -> dict[str, Any]:
    points = [
        {"t_s": float(t), "watts": round(mean_w + 12.0 * math.sin(t / 17.0), 1)}
        for t in range(0, seconds + 1, step_s)
    ]
    watts = [p["watts"] for p in points]
    return {
        "samples": len(points),
        "min_w": min(watts),
        "mean_w": mean_w,
        "max_w": max(watts),
        "gaps": 0,
        "max_gap_fraction": 0.0,
        "points": points,
    }


def full_mode_data(
    seed_path: Path, *, result_id: str = "h100-qwen3-30b-a3b-moe-full"
) -> dict[str, Any]:
    """The seed measured as a publishable result: 300 s windows, 3 repeats, 200 questions."""
    data = copy.deepcopy(seed_data(seed_path))
    data["id"] = result_id
    data["title"] = (
        "Full mode: tuned vs default fused-MoE kernels, Qwen3-30B-A3B FP8 on 1× H100 SXM"
    )
    data["summary"] = (
        "Lambda Cloud 1× H100 SXM: vLLM 0.31.0 with default fused-MoE Triton configs, then with"
        " tuned configs, then default again to bound drift, with full-length windows."
    )
    data["runs"] = 3
    data["spec"]["measurement"].update({"warmup_s": 60, "window_s": 300, "repeats": 3})
    data["spec"]["accuracy"]["limit"] = 200
    data["spec"]["not_covered"] = data["not_covered"] = [
        "Whole-node power (no BMC access on this host)",
        "Context lengths beyond the chat-mix-v1 trace",
    ]
    data["power"]["window"] = "300 s steady state, 3 windows per config"
    data["variance_band_pct"] = 0.9
    repeats = {
        "baseline": [4498.0, 4515.0, 4532.0],
        "tuned": [4880.0, 4890.0, 4900.0],
        "other": [4505.0, 4516.4, 4527.8],
    }
    rates = {"baseline": 17.2, "tuned": 19.6, "other": 17.2}
    base_goodput = sum(repeats["baseline"]) / 3
    for config in data["configs"]:
        key = config["key"]
        goodputs = repeats[key]
        goodput = round(sum(goodputs) / len(goodputs), 1)
        watts = config["node_power_kw"] * 1000
        config.update(
            {
                "goodput_tok_s": goodput,
                "slo_pass_count": 3,
                "repeats": 3,
                "confirmed_rate_rps": rates[key],
                "repeat_goodputs_tok_s": goodputs,
                "goodput_delta_pct": round((goodput - base_goodput) / base_goodput * 100, 2),
                "tokens_per_joule": round(goodput / watts, 3),
                "energy_j": round(watts * 300 * 3, 1),
                "energy_method": "counter",
                "power_trace": _trace(watts),
                "probes": _probes(
                    goodput, config["ttft_p99_ms"], config["tpot_p99_ms"], rates[key]
                ),
                "probe_seconds": 2100.0,
                "measurement": {
                    "warmup_s": 60,
                    "window_s": 300,
                    "repeats": 3,
                    "accuracy_questions": 200,
                },
            }
        )
        config["accuracy"].update(
            {"questions": 200, "answered": 200, "failed": 0, "gate_pass": True, "meaningful": True}
        )
        config["mbu_assumptions"] = [
            "B: the engine's running-request gauge (vllm:num_requests_running, or SGLang's or"
            " llama.cpp's equivalent) averaged over the window (includes sequences still in"
            " prefill)",
            "steps/s = output tok/s / B (every running sequence emits one token a step)",
            "Rated bandwidth: GPU-name table (NVIDIA H100 SXM5 80GB datasheet)",
        ]
    spec_files = {
        "baseline": ("specs/h100-default.spec.yaml", "a1" * 32),
        "tuned": ("specs/h100-tuned.spec.yaml", "b2" * 32),
        "other": ("specs/h100-default.spec.yaml", "a1" * 32),
    }
    for config in data["configs"]:
        own = copy.deepcopy(data["spec"])
        launch = "vllm serve Qwen/Qwen3-30B-A3B-FP8 --max-model-len 40960 --api-key $VLLM_API_KEY"
        if config["key"] == "tuned":
            own["engine"]["kernels"] = "vllm/vllm-openai:latest + tuned fused-MoE configs"
            launch = (
                "VLLM_TUNED_CONFIG_FOLDER=/configs/moe vllm serve Qwen/Qwen3-30B-A3B-FP8"
                " --max-model-len 40960 --gpu-memory-utilization 0.95 --api-key $VLLM_API_KEY"
            )
        own["engine"]["launch"] = launch
        config["spec_path"], config["spec_sha256"] = spec_files[config["key"]]
        config["spec"] = own
        config["engine_version"] = "0.31.0"
        cache_info = {
            "block_size": "16",
            "cache_dtype": "auto",
            "enable_prefix_caching": "True",
            "engine": "0",
            "gpu_memory_utilization": "0.95" if config["key"] == "tuned" else "0.9",
        }
        config["engine_config"] = {
            "max_model_len": 40960,
            "info": [{"name": "vllm:cache_config_info", "labels": cache_info}],
            "metrics_source": "GET /metrics",
        }
    tuned = next(c for c in data["configs"] if c["key"] == "tuned")
    base = next(c for c in data["configs"] if c["key"] == "baseline")
    data["verdict"] = {
        "outcome": "better",
        "change_pct": tuned["goodput_delta_pct"],
        "band_pct": 0.9,
        "text": "Tuned kernels raised SLO goodput by 8.3 %, beyond the 0.9 % variance band.",
        "ci_low_pct": 7.6,
        "ci_high_pct": 9.0,
        "ci_method": "Welch t interval, 95 %",
    }
    cards = 64
    data["fleet"] = {
        "cards": cards,
        "goodput_delta_tok_s": round((tuned["goodput_tok_s"] - base["goodput_tok_s"]) * cards, 1),
        "power_delta_kw": round((tuned["node_power_kw"] - base["node_power_kw"]) * cards, 3),
        "energy_delta_kwh_per_year": round(
            (tuned["node_power_kw"] - base["node_power_kw"]) * cards * 8760, 1
        ),
    }
    data["simulated"] = False
    data["tokenwatt_version"] = "0.1.0"
    return data


def full_mode_result(seed_path: Path, **changes: Any) -> ResultFile:
    """:func:`full_mode_data` as a model; keyword arguments replace top-level fields."""
    data = full_mode_data(seed_path)
    data.update(changes)
    return ResultFile.model_validate(data)


def hostile_data(seed_path: Path) -> dict[str, Any]:
    """The seed with markup and Markdown in every free-text field a page shows."""
    data = copy.deepcopy(seed_data(seed_path))
    data["id"] = "hostile-labels"
    data["title"] = "Hostile </title><script>alert('title')</script> *title*"
    data["summary"] = "Summary with <b>bold</b> and [a link](javascript:alert(1)) {: onclick=x}"
    data["configs"][0]["label"] = "<script>alert('label')</script>"
    data["configs"][1]["label"] = "tuned | pipe `code` _under_"
    # A goodput that sorts first as a number but last as text ("999.5" > "4,516.4").
    data["configs"][1]["goodput_tok_s"] = 999.5
    data["configs"][2]["engine"] = "<img src=x onerror=alert(1)>"
    data["configs"][0]["mbu_assumptions"] = ["<script>alert('mbu')</script> *B* | x"]
    data["configs"][1]["approximate_output_requests"] = 7
    data["hardware"]["host"] = "# not a heading\n\n- not a list"
    data["not_covered"] = ["<script>alert('caveat')</script>", "![img](http://example.com/x.png)"]
    data["reproduce"] = "echo '<script>alert(1)</script>' && echo done\n```\n</code></pre><b>x</b>"
    return data


def capacity_mode_data(seed_path: Path) -> dict[str, Any]:
    """:func:`full_mode_data` as ``report`` now writes it: SLO capacity with its interval and
    fits per config, each probe's share of requests over the bounds, a verdict on capacity."""
    data = full_mode_data(seed_path, result_id="h100-qwen3-30b-a3b-moe-capacity")
    data["title"] = "Capacity: tuned vs default fused-MoE kernels, Qwen3-30B-A3B FP8 on 1× H100"
    capacities = {
        "baseline": (17.6, 16.9, 18.2),
        "tuned": (19.9, 19.2, 20.5),
        "other": (17.5, 16.8, 18.1),
    }
    for config in data["configs"]:
        cap, low, high = capacities[config["key"]]
        slope = 11.0
        intercept = math.log(0.01 / 0.99) - slope * math.log(cap)
        config.update(
            {
                "slo_capacity_rps": cap,
                "slo_capacity_ci_rps": [low, high],
                "binding_slo": "tpot",
                "capacity_bracket_rps": [
                    config["confirmed_rate_rps"],
                    24.41 if config["key"] == "tuned" else 19.53,
                ],
                "sweep_strategy": "adaptive",
                "capacity_fits": [
                    {"slo": "ttft", "method": "above_all", "lower_bound_rps": 19.53},
                    {
                        "slo": "tpot",
                        "method": "logistic",
                        "capacity_rps": cap,
                        "ci_rps": [low, high],
                        "intercept": intercept,
                        "slope": slope,
                        "dispersion": 14.2,
                        "dof": 5,
                        "probes_used": 7,
                        "lower_bound_rps": config["confirmed_rate_rps"],
                        "upper_bound_rps": 19.53,
                    },
                ],
            }
        )
        for probe in config["probes"]:
            q = 1.0 / (1.0 + math.exp(-(intercept + slope * math.log(probe["rate_rps"]))))
            probe["tpot_over_pct"] = round(q * 100, 4)
            probe["ttft_over_pct"] = 0.0
    data["verdict"] = {
        "outcome": "better",
        "change_pct": 13.1,
        "text": "'tuned kernels' against 'default kernels': 13.1% higher SLO capacity (SLO"
        " capacity 19.90 vs 17.60 req/s); 95% CI +6.2% to +20.4%, widened by the baseline's"
        " drift against its repeat (-0.6%); minimum detectable effect ±5.9%.",
        "ci_low_pct": 6.2,
        "ci_high_pct": 20.4,
        "ci_method": "joint fit of ln p99 against ln rate with a common slope (Fieller"
        " interval, Student's t with 14 df), widened by the drift",
        "basis": "slo_capacity",
        "mde_pct": 5.9,
        "drift_pct": -0.6,
    }
    return data


def _engine(data: dict[str, Any], version: str) -> None:
    data["software"]["engine_version"] = version
    for config in data["configs"]:
        config["engine"] = f"vLLM {version} \u00b7 KV BF16"
        config["engine_version"] = version


def over_time_data(seed_path: Path, *, mismatch: bool = True) -> dict[str, dict[str, Any]]:
    """One scenario over three months, for ``tokenwatt compare`` and its pages: the seed
    (October, no SLO capacity), a full-mode result (November, vLLM 0.32.0) and a capacity
    result (December, vLLM 0.33.0), with a looser TPOT bound in December (the one mismatch)
    unless ``mismatch`` is false. Keyed by month, in that order."""
    november = full_mode_data(seed_path, result_id="h100-november")
    november["published"] = "2026-11-02"
    _engine(november, "0.32.0")
    december = capacity_mode_data(seed_path)
    december["id"] = "h100-december"
    december["published"] = "2026-12-01"
    _engine(december, "0.33.0")
    if mismatch:
        december["slo"]["tpot_p99_ms"] = december["spec"]["slo"]["tpot_p99_ms"] = 60.0
    return {"seed": seed_data(seed_path), "november": november, "december": december}
