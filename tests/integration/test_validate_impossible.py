"""``tokenwatt validate`` refuses results that claim what no measurement can produce.

Each case starts from a result that validates (the full-mode factory with outputs of at most 256
tokens, so the goodput bound applies) and makes one claim impossible; the refusal names the field
and exits 2.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests import result_factories
from tokenwatt.cli import main
from tokenwatt.schema.limits import max_goodput_tok_s, max_output_tokens
from tokenwatt.schema.spec import WorkloadSpec

Data = dict[str, Any]


def possible(seed_path: Path) -> Data:
    data = result_factories.full_mode_data(seed_path)
    data["spec"]["workload"]["output_tokens"] = 256
    return data


def capacity(seed_path: Path) -> Data:
    data = result_factories.capacity_mode_data(seed_path)
    data["spec"]["workload"]["output_tokens"] = 256
    return data


def _confirm(data: Data, config: int = 0) -> Data:
    probes = data["configs"][config]["probes"]
    return next(p for p in probes if p["phase"] == "confirm")


def _change(base: Callable[[Path], Data], change: Callable[[Data], object]):
    def make(seed_path: Path) -> Data:
        data = base(seed_path)
        change(data)
        return data

    return make


def _seed(seed_path: Path) -> Data:
    return result_factories.seed_data(seed_path)


# (case, content maker, strings the message must contain)
IMPOSSIBLE = [
    (
        "no-accelerator",
        _change(possible, lambda d: d["hardware"].update(count=0)),
        ["hardware.count", "greater than or equal to 1"],
    ),
    (
        "mbu-over-100",
        _change(possible, lambda d: d["configs"][0].update(mbu_pct=150.0)),
        ["configs[0].mbu_pct", "less than or equal to 100"],
    ),
    (
        "mbu-zero",
        _change(possible, lambda d: d["configs"][1].update(mbu_pct=0.0)),
        ["configs[1].mbu_pct", "greater than 0"],
    ),
    (
        "negative-power",
        _change(possible, lambda d: d["configs"][2].update(node_power_kw=-0.2)),
        ["configs[2].node_power_kw", "greater than or equal to 0"],
    ),
    (
        "power-above-rated",
        _change(possible, lambda d: d["configs"][0].update(node_power_kw=2.5)),
        ["configs[0].node_power_kw", "2.5 kW", "1 x NVIDIA H100", "700 W rated"],
    ),
    (
        "ttft-p99-below-p50",
        _change(possible, lambda d: _confirm(d).update(ttft_p50_ms=400.0, ttft_p99_ms=300.0)),
        ["configs[0].probes[6]", "ttft_p99_ms (300) is below ttft_p50_ms (400)"],
    ),
    (
        "tpot-p99-below-p50",
        _change(possible, lambda d: _confirm(d, 1).update(tpot_p50_ms=40.0, tpot_p99_ms=20.0)),
        ["configs[1].probes[6]", "tpot_p99_ms (20) is below tpot_p50_ms (40)"],
    ),
    (
        "goodput-above-rate-times-longest-output",
        _change(possible, lambda d: d["configs"][0].update(goodput_tok_s=9000.0)),
        ["configs[0].goodput_tok_s", "9,000.0 tok/s", "17.2 req/s", "256 tokens"],
    ),
    (
        "repeat-goodput-impossible",
        _change(
            possible,
            lambda d: d["configs"][1].update(repeat_goodputs_tok_s=[4880.0, 8000.0, 4900.0]),
        ),
        ["configs[1].repeat_goodputs_tok_s[1]", "8,000.0 tok/s"],
    ),
    (
        "probe-goodput-impossible",
        _change(possible, lambda d: d["configs"][2]["probes"][0].update(goodput_tok_s=5000.0)),
        ["configs[2].probes[0].goodput_tok_s", "8 req/s"],
    ),
    (
        "slo-passes-above-repeats",
        _change(_seed, lambda d: d["configs"][0].update(slo_pass_count=3)),
        ["configs[0]", "slo_pass_count (3) exceeds repeats (2)"],
    ),
    (
        "more-repeat-goodputs-than-repeats",
        _change(
            possible, lambda d: d["configs"][0]["repeat_goodputs_tok_s"].extend([4500.0, 4501.0])
        ),
        ["configs[0]", "5 goodputs for 3 repeats"],
    ),
    (
        "accuracy-answers-above-questions",
        _change(possible, lambda d: d["configs"][0]["accuracy"].update(answered=250)),
        ["configs[0].accuracy", "exceeds questions (200)"],
    ),
    (
        "capacity-outside-its-interval",
        _change(capacity, lambda d: d["configs"][0].update(slo_capacity_rps=25.0)),
        ["configs[0]", "slo_capacity_ci_rps[1] (18.2) is below slo_capacity_rps (25)"],
    ),
    (
        "passing-probe-over-the-slo",
        _change(possible, lambda d: _confirm(d).update(ttft_p99_ms=2500.0)),
        ["configs[0].probes[6].slo_pass", "ttft_p99_ms is 2500 ms", "2000 ms"],
    ),
    (
        "passing-probe-unbounded",
        _change(possible, lambda d: _confirm(d, 2).update(tpot_p99_ms=None)),
        ["configs[2].probes[6].slo_pass", "tpot_p99_ms is unbounded"],
    ),
    (
        "power-trace-min-above-max",
        _change(possible, lambda d: d["configs"][0]["power_trace"].update(min_w=900.0)),
        ["configs[0].power_trace", "is below min_w (900)"],
    ),
]


def test_at_least_ten_impossible_results():
    assert len({case for case, _, _ in IMPOSSIBLE}) >= 10


@pytest.mark.parametrize("base", [possible, capacity, _seed], ids=["full", "capacity", "seed"])
def test_the_starting_points_validate(tmp_path, capsys, seed_path, base):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(base(seed_path)), encoding="utf-8")
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err


@pytest.mark.parametrize(("case", "make", "needles"), IMPOSSIBLE, ids=[c[0] for c in IMPOSSIBLE])
def test_impossible_result_is_refused_naming_the_field(
    tmp_path, capsys, seed_path, case, make, needles
):
    path = tmp_path / f"{case}.json"
    path.write_text(json.dumps(make(seed_path)), encoding="utf-8")
    rc = main(["validate", str(path)])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 2, err
    assert str(path) in err
    assert "(top level)" not in err
    for needle in needles:
        assert needle in err, f"{needle!r} not in {err!r}"


def test_goodput_bound_by_hand():
    # 10 req/s x 100 s = 1,000 expected; + 8 sqrt(1,000) + 8 = 1,260.98 requests x 256 / 100 s.
    assert max_goodput_tok_s(rate_rps=10, window_s=100, max_output=256) == pytest.approx(
        (1000 + 8 * 1000**0.5 + 8) * 256 / 100
    )
    assert max_goodput_tok_s(rate_rps=10, window_s=100, max_output=256) == pytest.approx(
        3228.1, abs=0.05
    )
    # gamma arrivals of shape 0.25: the variance is 4x the Poisson one, the spread 2x.
    assert max_goodput_tok_s(
        rate_rps=10, window_s=100, max_output=1, burstiness=0.25
    ) == pytest.approx((1000 + 16 * 1000**0.5 + 8) / 100)


def test_longest_output_of_a_workload():
    assert max_output_tokens(WorkloadSpec(output_tokens=128)) == 128
    assert (
        max_output_tokens(
            WorkloadSpec.model_validate({"output_tokens": {"dist": "uniform", "min": 4, "max": 9}})
        )
        == 9
    )
    assert (
        max_output_tokens(
            WorkloadSpec.model_validate(
                {"output_tokens": {"dist": "lognormal", "median": 4, "p90": 9}}
            )
        )
        is None
    )
    assert max_output_tokens(WorkloadSpec()) is None  # chat-mix-v1: unbounded log-normal


def test_run_file_with_p99_below_p50_is_refused(tmp_path, capsys):
    from tests import factories
    from tokenwatt.store import dump_run

    data = dump_run(factories.run())
    data["probes"][0]["ttft_ms"].update(p50=500.0, p90=510.0, p95=520.0, p99=100.0)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert main(["validate", str(path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "probes[0].ttft_ms: p99 (100) is below p95 (520)" in err, err
