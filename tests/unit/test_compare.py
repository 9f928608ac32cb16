"""Variance band, verdict, confidence interval and fleet projection against hand-worked values."""

from __future__ import annotations

import math

import pytest

from tokenwatt.capacity import RelativeCapacity
from tokenwatt.compare import (
    CapacityFigures,
    ConfigFigures,
    capacity_verdict,
    change_pct,
    confidence_interval,
    fleet_projection,
    repeat_spread_pct,
    variance_band_pct,
    verdict,
)


def fig(key, goodput, repeats=(), power=None, delta=None, label=None, meaningful=True):
    return ConfigFigures(
        key=key,
        label=label or key,
        goodput_tok_s=goodput,
        repeat_goodputs_tok_s=tuple(repeats) or (goodput,),
        node_power_kw=power,
        accuracy_delta_pts=delta,
        accuracy_meaningful=meaningful,
    )


def test_repeat_spread_by_hand():
    # (102 - 100) / 101 = 1.980198...%
    assert repeat_spread_pct([100.0, 102.0]) == pytest.approx(1.9801980198)
    assert repeat_spread_pct([5.0]) == 0.0
    assert repeat_spread_pct([]) == 0.0


def test_band_is_the_larger_of_spread_and_drift():
    seed_like = [
        fig("baseline", 4515.0),
        fig("tuned", 4522.8),
        fig("other", 4516.4),
    ]
    # drift |4516.4 - 4515| / 4515 = 0.0310077...%
    assert variance_band_pct(seed_like) == pytest.approx(0.03100775193798)
    spread = [fig("baseline", 101.0, repeats=(100.0, 102.0)), fig("other", 101.5)]
    # spread 1.98% beats drift 0.495%
    assert variance_band_pct(spread) == pytest.approx(1.9801980198)


def test_seed_verdict_is_no_measurable_difference():
    configs = [
        fig("baseline", 4515.0, label="default kernels"),
        fig("tuned", 4522.8, label="tuned kernels"),
        fig("other", 4516.4),
    ]
    v = verdict(configs, band_pct=0.7, max_drop_pts=1.0)
    assert v.outcome == "no_difference"
    assert v.change_pct == pytest.approx(7.8 / 4515 * 100)  # 0.1727...%
    assert "no measurable difference" in v.text
    assert "+0.2%" in v.text
    assert "±0.7%" in v.text
    assert v.ci_low_pct is None  # two repeats: no interval claimed


def test_beyond_the_band_is_better_or_worse():
    better = verdict([fig("baseline", 100.0), fig("tuned", 110.0)], band_pct=2.0, max_drop_pts=1)
    assert better.outcome == "better"
    assert "10.0% higher" in better.text
    worse = verdict([fig("baseline", 100.0), fig("tuned", 95.0)], band_pct=2.0, max_drop_pts=1)
    assert worse.outcome == "worse"
    assert "5.0% lower" in worse.text


def test_accuracy_gate_beats_goodput():
    configs = [fig("baseline", 100.0, delta=0.0), fig("tuned", 150.0, delta=-2.0)]
    v = verdict(configs, band_pct=1.0, max_drop_pts=1.0)
    assert v.outcome == "gate_failed"
    assert "not an improvement" in v.text
    assert "better" not in v.text
    # exactly at the limit passes
    ok = verdict(
        [fig("baseline", 100.0), fig("tuned", 150.0, delta=-1.0)], band_pct=1.0, max_drop_pts=1.0
    )
    assert ok.outcome == "better"


def test_gate_ignores_accuracy_that_is_not_meaningful():
    configs = [fig("baseline", 100.0), fig("tuned", 150.0, delta=-30.0, meaningful=False)]
    assert verdict(configs, band_pct=1.0, max_drop_pts=1.0).outcome == "better"


def test_welch_interval_by_hand():
    # means 11 and 9, sample variances 1 and 1, n = 3: se = sqrt(2/3) = 0.8164966,
    # Welch df = (2/3)^2 / ((1/3)^2/2 * 2) = 4, t(0.975, 4) = 2.7764451
    # CI = 2 +- 2.2669579 -> (-0.2669579, 4.2669579) / 9 * 100
    interval = confidence_interval([10.0, 11.0, 12.0], [8.0, 9.0, 10.0])
    assert interval is not None
    low, high, p = interval
    assert low == pytest.approx(-0.2669579 / 9 * 100, abs=1e-4)
    assert high == pytest.approx(4.2669579 / 9 * 100, abs=1e-4)
    # t = 2 / 0.8164966 = 2.4494897 with 4 df: two-sided p = 0.0704
    assert p == pytest.approx(0.07048, abs=1e-4)
    assert confidence_interval([1.0, 2.0], [1.0, 2.0, 3.0]) is None


def test_verdict_states_the_interval_with_three_repeats():
    configs = [
        fig("baseline", 9.0, repeats=(8.0, 9.0, 10.0)),
        fig("tuned", 11.0, repeats=(10.0, 11.0, 12.0)),
    ]
    v = verdict(configs, band_pct=variance_band_pct(configs), max_drop_pts=None)
    assert v.test is not None
    assert "Welch" in v.text
    assert v.ci_low_pct is not None
    assert v.p_value is not None


def test_missing_tuned_is_not_compared():
    v = verdict([fig("baseline", 1.0), fig("other", 1.0)], band_pct=0.0, max_drop_pts=None)
    assert v.outcome == "not_compared"


def test_fleet_projection_by_hand():
    configs = [fig("baseline", 4515.0, power=0.623), fig("tuned", 4522.8, power=0.641)]
    fleet = fleet_projection(configs, cards=64)
    assert fleet.goodput_delta_tok_s == pytest.approx(7.8 * 64)  # 499.2 tok/s
    assert fleet.power_delta_kw == pytest.approx(0.018 * 64)  # 1.152 kW
    assert fleet.energy_delta_kwh_per_year == pytest.approx(1.152 * 8760)  # 10,091.52 kWh
    per_node = fleet_projection(configs, cards=64, gpus_per_config=8)
    assert per_node.goodput_delta_tok_s == pytest.approx(7.8 * 8)


def test_change_of_zero_reference():
    assert change_pct(0.0, 0.0) == 0.0
    assert math.isinf(change_pct(1.0, 0.0))


def test_a_change_smaller_than_the_sweep_resolution_says_so():
    configs = [fig("baseline", 100.0), fig("tuned", 110.0)]
    v = verdict(configs, band_pct=2.0, max_drop_pts=None, resolution_pct=12.5)
    assert v.outcome == "better"
    assert "smaller than the sweep's resolution (12.5%" in v.text
    coarse_ok = verdict(configs, band_pct=2.0, max_drop_pts=None, resolution_pct=5.0)
    assert "resolution" not in coarse_ok.text


# -- the verdict on SLO capacity ---------------------------------------------------------------


def rel(log_ratio: float, half_width: float, *, se: float, other: float | None = None, dof=10):
    ratios = [0.0, log_ratio] + ([other] if other is not None else [])
    cis: list[tuple[float, float] | None] = [
        (0.0, 0.0),
        (log_ratio - half_width, log_ratio + half_width),
    ]
    ses: list[float | None] = [0.0, se]
    if other is not None:
        cis.append((other - half_width, other + half_width))
        ses.append(se)
    return RelativeCapacity(
        slo="tpot", log_ratio=ratios, ci=cis, log_se=ses, dof=dof, slope=0.3,
        probes_used=[5] * len(ratios), residual_sd=0.02,
    )  # fmt: skip


def caps(delta: float | None = None):
    return [
        CapacityFigures("baseline", "base", 10.0, "tpot"),
        CapacityFigures("tuned", "new", 11.0, "tpot", accuracy_delta_pts=delta),
    ]


ORDER = ["baseline", "tuned"]


def test_capacity_verdict_better_worse_by_the_interval():
    v = capacity_verdict(caps(), rel(0.10, 0.05, se=0.02), order=ORDER, max_drop_pts=None)
    assert v.outcome == "better"
    assert v.basis == "slo_capacity"
    assert v.change_pct == pytest.approx((math.exp(0.10) - 1) * 100)
    assert v.ci_low_pct == pytest.approx((math.exp(0.05) - 1) * 100)
    assert v.ci_high_pct == pytest.approx((math.exp(0.15) - 1) * 100)
    # MDE = (t(0.975, 10) + t(0.80, 10)) x se = (2.228139 + 0.879058) x 0.02 in ln
    assert v.mde_pct == pytest.approx((math.exp(3.107197 * 0.02) - 1) * 100, rel=1e-5)
    assert "higher SLO capacity" in v.text
    # the per-run estimates (11.0 / 10.0: +10 %) stand beside the jointly fitted +10.5 %, said
    # to be another figure, so their ratio is not read as the change
    assert (
        "(fitted on both runs' probes together; each run's own SLO capacity estimate alone:"
        " 11.00 vs 10.00 req/s)"
    ) in v.text
    v = capacity_verdict(caps(), rel(-0.10, 0.05, se=0.02), order=ORDER, max_drop_pts=None)
    assert v.outcome == "worse"
    assert "lower SLO capacity" in v.text


def test_capacity_verdict_no_difference_needs_a_narrow_interval_and_a_fine_resolution():
    v = capacity_verdict(caps(), rel(0.005, 0.02, se=0.009), order=ORDER, max_drop_pts=None)
    assert v.mde_pct is not None
    assert v.mde_pct < 10
    assert v.outcome == "no_difference"
    # The same shape with a coarse resolution (MDE over 10 %) is only inconclusive.
    v = capacity_verdict(caps(), rel(0.005, 0.08, se=0.036), order=ORDER, max_drop_pts=None)
    assert v.mde_pct is not None
    assert v.mde_pct > 10
    assert v.outcome == "inconclusive"


def test_capacity_verdict_is_inconclusive_when_the_interval_is_wide_or_unbounded():
    v = capacity_verdict(caps(), rel(0.05, 0.09, se=0.04), order=ORDER, max_drop_pts=None)
    assert v.outcome == "inconclusive"
    assert "cannot tell" in v.text
    unbounded = rel(0.05, 0.09, se=0.04)
    unbounded = RelativeCapacity(**{**unbounded.__dict__, "ci": [(0.0, 0.0), None]})
    v = capacity_verdict(caps(), unbounded, order=ORDER, max_drop_pts=None)
    assert v.outcome == "inconclusive"
    assert v.ci_low_pct is None
    assert "unbounded" in v.text
    v = capacity_verdict(caps(), None, order=ORDER, max_drop_pts=None)
    assert v.outcome == "inconclusive"


def test_capacity_verdict_widens_the_interval_by_the_drift():
    three = [*caps(), CapacityFigures("other", "base again", 10.3, "tpot")]
    # Change +0.10 +- 0.05 is better alone; a 0.06 drift of the repeat widens it below 0.
    v = capacity_verdict(
        three, rel(0.10, 0.05, se=0.02, other=0.06), order=[*ORDER, "other"], max_drop_pts=None
    )
    assert v.drift_pct == pytest.approx((math.exp(0.06) - 1) * 100)
    assert v.ci_low_pct == pytest.approx((math.exp(0.10 - 0.05 - 0.06) - 1) * 100)
    assert v.outcome == "inconclusive"
    assert "drift" in v.text


def test_capacity_verdict_gate_and_missing_configs():
    v = capacity_verdict(caps(delta=-3.0), rel(0.10, 0.05, se=0.02), order=ORDER, max_drop_pts=1.0)
    assert v.outcome == "gate_failed"
    assert "not an improvement" in v.text
    v = capacity_verdict(caps()[:1], None, order=["baseline"], max_drop_pts=None)
    assert v.outcome == "not_compared"
