"""Small valid objects to start tests from (each test changes what it is about)."""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokenwatt.schema.run import Environment, LatencyStats, ProbeRecord, RunFile, RunOutcome
from tokenwatt.schema.spec import Spec

SPEC: dict[str, Any] = {
    "name": "unit-spec",
    "hardware": {"adapter": "nvidia"},
    "engine": {"endpoint": "http://127.0.0.1:8000/v1", "model": "tiny"},
    "model": {"name": "tiny", "vocab_size": 32000},
    "slo": {"ttft_p99_ms": 2000.0, "tpot_p99_ms": 50.0},
    "power": {"source": "none"},
}


def spec_dict(**sections: Any) -> dict[str, Any]:
    """A valid spec as a dict; keyword arguments replace whole sections."""
    data = copy.deepcopy(SPEC)
    data.update(sections)
    return data


def spec(**sections: Any) -> Spec:
    return Spec.model_validate(spec_dict(**sections))


def stats(p99: float, count: int = 10) -> LatencyStats:
    return LatencyStats(count=count, mean=p99 / 2, p50=p99 / 2, p90=p99 * 0.9, p95=p99, p99=p99)


def probe(index: int = 0, *, rate: float = 1.0, passed: bool = True, **kw: Any) -> ProbeRecord:
    fields: dict[str, Any] = {
        "index": index,
        "phase": "search",
        "rate_rps": rate,
        "warmup_s": 1.0,
        "window_s": 10.0,
        "started_utc": dt.datetime(2026, 11, 29, tzinfo=dt.UTC),
        "window_start_ns": 1_000_000_000,
        "window_end_ns": 11_000_000_000,
        "end_ns": 12_000_000_000,
        "window_requests": 10,
        "ok": 10,
        "failed": 0,
        "output_tokens": 320,
        "goodput_tok_s": 32.0,
        "achieved_rate_rps": rate,
        "send_lag_p99_ms": 0.2,
        "client_bound": False,
        "ttft_ms": stats(100.0),
        "tpot_ms": stats(10.0),
        "itl_ms": stats(10.0),
        "e2e_ms": stats(400.0),
        "slo_pass": passed,
    }
    fields.update(kw)
    if "window_start_ns" not in kw:
        # Probes follow each other in time (a run's windows never overlap).
        start = (1 + index * 1000) * 1_000_000_000
        fields["window_start_ns"] = start
        fields["window_end_ns"] = start + round(fields["window_s"] * 1e9)
        fields["end_ns"] = fields["window_end_ns"] + 1_000_000_000
    return ProbeRecord.model_validate(fields)


def run(**kw: Any) -> RunFile:
    s = kw.pop("spec", None) or spec()
    fields: dict[str, Any] = {
        "label": "unit",
        "role": "baseline",
        "quick": False,
        "simulated": False,
        "complete": True,
        "command": "tokenwatt run --spec unit.spec.yaml --label unit --role baseline --out u.json",
        "spec_path": "unit.spec.yaml",
        "spec": s,
        "effective": s.measurement,
        "environment": Environment(
            tokenwatt_version="0.1.0",
            host="test",
            platform="linux",
            python="3.11",
            spec_sha256=hashlib.sha256(b"x").hexdigest(),
            started_utc=dt.datetime(2026, 11, 29, tzinfo=dt.UTC),
        ),
        "probes": [probe(0)],
        "outcome": RunOutcome(
            confirmed_rate_rps=1.0,
            confirm_probes=[0],
            slo_pass_count=1,
            goodput_tok_s=32.0,
            probe_seconds=12.0,
            search_probe_seconds=0.0,
        ),
    }
    fields.update(kw)
    return RunFile.model_validate(fields)


def seed_spec() -> Spec:
    """The published seed's spec."""
    import json
    from pathlib import Path

    seed = (
        Path(__file__).resolve().parents[1]
        / "results"
        / "h100-qwen3-30b-a3b-moe-kernel-tuning.json"
    )
    return Spec.model_validate(json.loads(seed.read_text(encoding="utf-8"))["spec"])


def seed_like_run(
    *,
    role: str,
    label: str,
    description: str,
    output_tokens: tuple[int, ...],
    ttft_p99_ms: tuple[float, ...],
    tpot_p99_ms: tuple[float, ...],
    mbu_pct: float,
    node_power_kw: float,
    sw_power_cap: int,
    score: float,
    window_s: float = 120.0,
    **overrides: Any,
) -> RunFile:
    """A run file carrying one of the seed's configs: two passing confirmation repeats at 20 rps.

    Goodput of each repeat = output_tokens / window_s, as the run-file model requires.
    """
    from tokenwatt.schema.run import (
        AccuracyEvidence,
        AccuracySeedScore,
        GpuInfo,
        MbuEvidence,
    )

    s = seed_spec()
    probes = [probe(0, rate=8.0, window_s=60.0, output_tokens=60 * 1000, goodput_tok_s=1000.0)]
    for n, (tokens, ttft, tpot) in enumerate(
        zip(output_tokens, ttft_p99_ms, tpot_p99_ms, strict=True)
    ):
        probes.append(
            probe(
                n + 1,
                rate=20.0,
                phase="confirm",
                repeat=n,
                window_s=window_s,
                output_tokens=tokens,
                goodput_tok_s=tokens / window_s,
                ttft_ms=stats(ttft),
                tpot_ms=stats(tpot),
            )
        )
    goodputs = [t / window_s for t in output_tokens]
    fields: dict[str, Any] = {
        "label": label,
        "description": description,
        "role": role,
        "spec": s,
        "effective": s.measurement,
        "quick": True,
        "command": (
            f"tokenwatt run --spec lambda-qwen3-30b-a3b-fp8-tp1-dp1.spec.yaml --label '{label}'"
            f" --role {role} --out runs/{label}.json"
        ),
        "spec_path": "lambda-qwen3-30b-a3b-fp8-tp1-dp1.spec.yaml",
        "model_shape": "MoE",
        "model_geometry_key": "qwen3_moe layers=48 hidden=2048 heads=32/4 experts=128/8",
        "environment": Environment(
            tokenwatt_version="0.1.0",
            host="lambda-1",
            platform="linux",
            python="3.11",
            engine_version="0.31.0",
            engine_version_source="GET /version",
            driver="580.105.08",
            gpus=[GpuInfo(index=0, name="NVIDIA H100 80GB HBM3")],
            spec_sha256=hashlib.sha256(b"seed").hexdigest(),
            started_utc=dt.datetime(2026, 10, 8, 12, tzinfo=dt.UTC),
        ),
        "probes": probes,
        "outcome": RunOutcome(
            confirmed_rate_rps=20.0,
            confirm_probes=list(range(1, len(probes))),
            slo_pass_count=len(output_tokens),
            goodput_tok_s=sum(goodputs) / len(goodputs),
            repeat_goodputs_tok_s=goodputs,
            probe_seconds=500.0,
            search_probe_seconds=100.0,
        ),
        "power": _board_power(probes[1:], node_power_kw=node_power_kw, capped=sw_power_cap),
        "mbu": MbuEvidence(
            mbu_pct=mbu_pct,
            bytes_per_step=1.0e9,
            weight_bytes_per_step=0.9e9,
            kv_bytes_per_step=0.1e9,
            batch_mean=60.0,
            batch_source="metrics",
            steps_per_s=75.0,
            output_tok_s=4500.0,
            rated_bw_tbs=3.35,
            rated_bw_source="spec",
        ),
        "accuracy": AccuracyEvidence(
            suite="suites/gsm8k-200.jsonl",
            name="gsm8k-5shot",
            scorer="numeric",
            limit=50,
            shots=5,
            score=score,
            spread_pts=0.0,
            per_seed=[
                AccuracySeedScore(
                    seed=0, score=score, correct=round(score / 2), answered=50, failed=0
                )
            ],
        ),
    }
    fields.update(overrides)
    return run(**fields)


def _board_power(confirm: list[ProbeRecord], *, node_power_kw: float, capped: int) -> Any:
    """1 Hz board readings at ``node_power_kw`` over the confirmation windows, the first
    ``capped`` of them at the power cap, with the figures computed from them (as measure does)."""
    from tokenwatt import energy
    from tokenwatt.schema.run import PowerEvidence, PowerSample

    samples: list[PowerSample] = []
    for p in confirm:
        for j in range(round(p.window_s)):
            samples.append(
                PowerSample(
                    t_ns=p.window_start_ns + j * 1_000_000_000 + 500_000_000,
                    watts=node_power_kw * 1000.0,
                    throttle_reasons=["sw_power_cap"] if len(samples) < capped else [],
                )
            )
    evidence = PowerEvidence(
        source="board",
        description="GPU board power sum (NVIDIA)",
        scope="board",
        sampling_hz=1,
        samples=samples,
    )
    windows, tokens = energy.confirmed_windows(confirm)
    return energy.apply_window_figures(evidence, windows, output_tokens=tokens)


def seed_runs() -> list[RunFile]:
    """Three run files that carry the seed's per-config figures (baseline, tuned, repeat)."""
    return [
        seed_like_run(
            role="baseline",
            label="moe-default",
            description="default kernels",
            output_tokens=(539910, 543690),  # 4499.25 and 4530.75 tok/s: spread 0.70%
            ttft_p99_ms=(338.0, 331.0),
            tpot_p99_ms=(44.2, 43.1),
            mbu_pct=56.3,
            node_power_kw=0.623,
            sw_power_cap=180,
            score=96.0,
        ),
        seed_like_run(
            role="tuned",
            label="moe-tuned",
            description="tuned kernels",
            output_tokens=(542436, 543036),  # 4520.3 and 4525.3 tok/s, mean 4522.8
            ttft_p99_ms=(333.0, 329.0),
            tpot_p99_ms=(42.3, 41.0),
            mbu_pct=57.9,
            node_power_kw=0.641,
            sw_power_cap=186,
            score=96.0,
        ),
        seed_like_run(
            role="other",
            label="moe-default-2",
            description="default kernels (repeat)",
            output_tokens=(541908, 542028),  # 4515.9 and 4516.9 tok/s, mean 4516.4
            ttft_p99_ms=(333.0, 330.0),
            tpot_p99_ms=(43.0, 42.0),
            mbu_pct=57.0,
            node_power_kw=0.631,
            sw_power_cap=183,
            score=96.0,
        ),
    ]


def recomputed(run: RunFile) -> RunFile:
    """The run with its outcome's summary recomputed from its probes (after a test edits them)."""
    from tokenwatt import energy
    from tokenwatt.figures import outcome_figures

    outcome = run.outcome
    assert outcome is not None
    fig = outcome_figures(run.probes, outcome.confirm_probes, outcome.confirmed_rate_rps)
    power = run.power
    if power is not None:
        accepted = [run.probes[i] for i in outcome.confirm_probes]
        windows, tokens = energy.confirmed_windows(
            accepted if outcome.confirmed_rate_rps is not None else []
        )
        power = energy.apply_window_figures(power, windows, output_tokens=tokens)
    return run.model_copy(
        update={
            "power": power,
            "outcome": outcome.model_copy(
                update={
                    "goodput_tok_s": fig.goodput_tok_s,
                    "repeat_goodputs_tok_s": fig.repeat_goodputs_tok_s,
                    "slo_pass_count": fig.slo_pass_count,
                }
            ),
        }
    )


def request_table(
    tpot_ms: Sequence[float | None],
    *,
    status: list[str] | None = None,
    ttft_ms: float = 100.0,
    send_lag_ms: float = 0.0,
    output_tokens: int = 10,
    window_s: float = 10.0,
) -> Any:
    """A probe's window requests: one per TPOT value, spread evenly over the window."""
    from tokenwatt.schema.run import RequestTable

    n = len(tpot_ms)
    status = status or ["ok"] * n
    return RequestTable(
        t_sched_s=[i * window_s / max(n, 1) for i in range(n)],
        send_lag_ms=[send_lag_ms] * n,
        ttft_ms=[ttft_ms if s == "ok" else None for s in status],
        tpot_ms=[v if s == "ok" else None for v, s in zip(tpot_ms, status, strict=True)],
        e2e_ms=[1000.0 if s == "ok" else None for s in status],
        input_tokens=[10] * n,
        output_tokens=[output_tokens] * n,
        status=status,
    )


def probe_with_requests(index: int, rate: float, table: Any, **kw: Any) -> ProbeRecord:
    """A probe whose summary fields are computed from its request table (as measure does)."""
    import numpy as np

    from tokenwatt.metrics import nearest_rank, table_latency_stats

    n = len(table.status)
    ok = sum(1 for s in table.status if s == "ok")
    tokens = sum(t for t, s in zip(table.output_tokens, table.status, strict=True) if s == "ok")
    window_s = kw.pop("window_s", 10.0)
    fields: dict[str, Any] = {
        "window_s": window_s,
        "window_requests": n,
        "ok": ok,
        "failed": n - ok,
        "output_tokens": tokens,
        "goodput_tok_s": tokens / window_s,
        "requests": table,
        "ttft_ms": table_latency_stats(table, "ttft_ms"),
        "tpot_ms": table_latency_stats(table, "tpot_ms"),
        "send_lag_p99_ms": nearest_rank(np.sort(np.asarray(table.send_lag_ms)), 99.0) if n else 0.0,
    }
    fields.update(kw)
    return probe(index, rate=rate, **fields)


def virtual_run(
    spec_path: Any,
    *,
    label: str,
    role: str,
    bandwidth_efficiency: float | None = None,
    quick: bool = True,
) -> RunFile:
    """A quick run of a simulator spec in virtual time (``tokenwatt plan``'s engine): real
    simulator probes, with their window requests, in about a second of CPU."""
    from tokenwatt.figures import outcome_figures
    from tokenwatt.plan import engine_config, run_trial, with_spec
    from tokenwatt.store import filled, load_spec

    loaded = load_spec(spec_path)
    spec = loaded.spec
    if bandwidth_efficiency is not None:
        assert spec.engine.sim is not None
        sim = spec.engine.sim.model_copy(update={"bandwidth_efficiency": bandwidth_efficiency})
        spec = spec.model_copy(update={"engine": spec.engine.model_copy(update={"sim": sim})})
        loaded = with_spec(loaded, spec)
    trial = run_trial(loaded, engine_config(loaded), seed=spec.workload.seed, quick=quick)
    result = trial.result
    fig = outcome_figures(trial.probes, result.confirm_probes, result.confirmed_rate_rps)
    from tokenwatt.measure import effective_settings

    effective = effective_settings(spec, quick=quick)[0]
    return run(
        label=label,
        role=role,
        quick=quick,
        simulated=True,
        spec=filled(spec),
        effective=effective,
        probes=trial.probes,
        outcome=RunOutcome(
            confirmed_rate_rps=fig.confirmed_rate_rps,
            confirm_probes=list(result.confirm_probes),
            slo_pass_count=fig.slo_pass_count,
            goodput_tok_s=fig.goodput_tok_s,
            repeat_goodputs_tok_s=fig.repeat_goodputs_tok_s,
            ttft_p99_ms=fig.ttft_p99_ms,
            tpot_p99_ms=fig.tpot_p99_ms,
            probe_seconds=trial.total_seconds,
            search_probe_seconds=trial.search_seconds,
        ),
    )


def mooncake_in_miniature(shared: Path, out: Path, *, pairs: int = 8, blocks: int = 6) -> Path:
    """Rows of the real Mooncake trace whose prompts share 3+ leading blocks, each after the
    earlier row it shares them with, cut to ``blocks`` blocks of 128 tokens (vLLM CPU's block;
    the trace's are 512) so that they fit the tiny model; 8 output tokens each."""
    source = shared / "data/traces/mooncake_fast25/conversation_trace.jsonl"
    rows = [json.loads(line) for line in source.read_text().splitlines()]
    first_with: dict[tuple[int, ...], int] = {}
    chosen: list[int] = []
    for j, row in enumerate(rows):
        ids = row["hash_ids"]
        depth = 0
        while depth < len(ids) and tuple(ids[: depth + 1]) in first_with:
            depth += 1
        if depth >= 3 and len(chosen) < 2 * pairs:
            chosen += [first_with[tuple(ids[:depth])], j]
        for c in range(1, len(ids) + 1):
            first_with.setdefault(tuple(ids[:c]), j)
    lines = []
    for i in chosen:
        ids = rows[i]["hash_ids"][:blocks]
        lines.append({"input_length": 128 * len(ids) - 37, "output_length": 8, "hash_ids": ids})
    out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return out
