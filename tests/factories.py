"""Small valid objects to start tests from (each test changes what it is about)."""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
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
