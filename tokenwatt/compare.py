"""Comparing configurations: variance band, verdict, confidence interval, fleet projection.

**Variance band.** ``variance_band_pct`` is the larger of two spreads, in percent:

- the repeat spread within any configuration: ``(max - min) / mean`` of its repeat goodputs;
- the drift between the baseline and each repeat of it (role ``other``):
  ``|other - baseline| / baseline`` of their mean goodputs.

**Verdict.** The change of the tuned configuration is ``(tuned - baseline) / baseline`` of mean
SLO goodput. Within ``±band`` it is "no measurable difference"; beyond it, better or worse by that
much. A configuration whose accuracy dropped by more than ``max_drop_pts`` points against the
baseline fails the accuracy gate and is never reported as better, whatever its goodput. The
sentence is written here, from the numbers, never by hand.

**Resolution.** A sweep knows the SLO boundary only between the confirmed rate and the lowest
failing rate above it; when a change is smaller than that gap the verdict says so.

**Confidence interval.** With at least three repeats in both configurations the verdict also
gives Welch's two-sample t-test (unequal variances; ``scipy.stats.ttest_ind(equal_var=False)``)
and its 95% confidence interval for the difference of mean goodputs, as a percentage of the
baseline mean. With fewer repeats no interval is claimed.

**Fleet.** ``fleet.cards`` multiplies the per-card difference (tuned - baseline) of goodput and
power: tok/s and kW across the fleet, and kWh per year at that power (x 8,760 h).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats as scipy_stats

from tokenwatt.schema.result import Fleet, Verdict

__all__ = [
    "HOURS_PER_YEAR",
    "ConfigFigures",
    "change_pct",
    "confidence_interval",
    "fleet_projection",
    "repeat_spread_pct",
    "variance_band_pct",
    "verdict",
]

HOURS_PER_YEAR = 8760.0
CONFIDENCE = 0.95
MIN_REPEATS_FOR_CI = 3


@dataclass(frozen=True)
class ConfigFigures:
    """The figures of one configuration that a comparison needs."""

    key: str
    label: str
    goodput_tok_s: float
    repeat_goodputs_tok_s: tuple[float, ...]
    node_power_kw: float | None = None
    accuracy_delta_pts: float | None = None
    accuracy_meaningful: bool = True


def repeat_spread_pct(goodputs: Sequence[float]) -> float:
    """``(max - min) / mean`` of repeat goodputs, in percent; 0 for fewer than two repeats."""
    if len(goodputs) < 2:
        return 0.0
    mean = sum(goodputs) / len(goodputs)
    if mean <= 0:
        return 0.0 if max(goodputs) == min(goodputs) else math.inf
    return (max(goodputs) - min(goodputs)) / mean * 100.0


def change_pct(value: float, reference: float) -> float:
    """``(value - reference) / reference`` in percent (inf when the reference is 0)."""
    if reference == 0:
        return 0.0 if value == 0 else math.inf
    return (value - reference) / reference * 100.0


def variance_band_pct(configs: Sequence[ConfigFigures]) -> float:
    """The variance band: the larger of the repeat spreads and the baseline drift, in percent."""
    band = max((repeat_spread_pct(c.repeat_goodputs_tok_s) for c in configs), default=0.0)
    baseline = next((c for c in configs if c.key == "baseline"), None)
    if baseline is not None:
        for other in configs:
            if other.key == "other":
                band = max(band, abs(change_pct(other.goodput_tok_s, baseline.goodput_tok_s)))
    return band


def confidence_interval(
    tuned: Sequence[float], baseline: Sequence[float]
) -> tuple[float, float, float] | None:
    """Welch's t-test of tuned vs baseline repeat goodputs.

    Returns:
        ``(low_pct, high_pct, p_value)``: the 95% interval of the difference of means as a
        percentage of the baseline mean, and the two-sided p-value; ``None`` with fewer than
        three repeats on either side or a zero baseline.
    """
    if len(tuned) < MIN_REPEATS_FOR_CI or len(baseline) < MIN_REPEATS_FOR_CI:
        return None
    base_mean = sum(baseline) / len(baseline)
    if base_mean <= 0:
        return None
    if len(set(tuned)) == 1 and len(set(baseline)) == 1:
        # Zero variance on both sides: the t statistic is undefined; the difference is exact.
        diff = (tuned[0] - baseline[0]) / base_mean * 100.0
        return diff, diff, 1.0 if diff == 0 else 0.0
    result = scipy_stats.ttest_ind(tuned, baseline, equal_var=False)
    ci = result.confidence_interval(confidence_level=CONFIDENCE)
    return (
        float(ci.low) / base_mean * 100.0,
        float(ci.high) / base_mean * 100.0,
        float(result.pvalue),
    )


def _fmt_tok_s(value: float) -> str:
    return f"{value:,.1f} tok/s"


def verdict(
    configs: Sequence[ConfigFigures],
    *,
    band_pct: float,
    max_drop_pts: float | None,
    resolution_pct: float | None = None,
) -> Verdict:
    """The comparison's conclusion, from the numbers.

    Args:
        configs: every configuration; the one with key ``baseline`` is the reference and the
            one with key ``tuned`` the candidate.
        band_pct: the variance band (:func:`variance_band_pct`).
        max_drop_pts: the accuracy gate (``None``: no accuracy gate).
        resolution_pct: the sweep's resolution (the largest gap between a confirmed rate and
            the lowest failing rate above it); a change smaller than it is said to be so.
    """
    baseline = next((c for c in configs if c.key == "baseline"), None)
    tuned = next((c for c in configs if c.key == "tuned"), None)
    if baseline is None or tuned is None:
        missing = "baseline" if baseline is None else "tuned"
        return Verdict(
            outcome="not_compared",
            band_pct=band_pct,
            text=f"No comparison: there is no {missing} configuration.",
        )
    change = change_pct(tuned.goodput_tok_s, baseline.goodput_tok_s)
    figures = f"{_fmt_tok_s(tuned.goodput_tok_s)} vs {_fmt_tok_s(baseline.goodput_tok_s)}"
    gate_failed = (
        max_drop_pts is not None
        and tuned.accuracy_meaningful
        and tuned.accuracy_delta_pts is not None
        and tuned.accuracy_delta_pts < -max_drop_pts
    )
    ci = confidence_interval(tuned.repeat_goodputs_tok_s, baseline.repeat_goodputs_tok_s)
    who = f"'{tuned.label}' against '{baseline.label}'"
    if gate_failed:
        assert tuned.accuracy_delta_pts is not None  # for the type checker
        outcome = "gate_failed"
        text = (
            f"{who}: fails the accuracy gate (accuracy {tuned.accuracy_delta_pts:+.1f} points,"
            f" more than the {max_drop_pts:g}-point limit), so it is not an improvement"
            f" whatever its SLO goodput ({change:+.1f}%, {figures})."
        )
    elif abs(change) <= band_pct:
        outcome = "no_difference"
        text = (
            f"{who}: no measurable difference in SLO goodput ({change:+.1f}%, {figures}),"
            f" within the ±{band_pct:.1f}% variance band."
        )
    else:
        outcome = "better" if change > 0 else "worse"
        text = (
            f"{who}: {abs(change):.1f}% {'higher' if change > 0 else 'lower'} SLO goodput"
            f" ({figures}), beyond the ±{band_pct:.1f}% variance band."
        )
    if (
        outcome in ("better", "worse")
        and resolution_pct is not None
        and abs(change) < resolution_pct
    ):
        text += (
            f" The change is smaller than the sweep's resolution ({resolution_pct:.1f}% between a"
            " confirmed rate and the lowest failing rate above it): a finer sweep could change it."
        )
    if ci is not None:
        low, high, p_value = ci
        text += (
            f" Welch's t-test over the repeats: 95% CI of the change {low:+.1f}% to"
            f" {high:+.1f}%, p = {p_value:.3g}."
        )
    return Verdict(
        outcome=outcome,
        change_pct=change,
        band_pct=band_pct,
        text=text,
        ci_low_pct=ci[0] if ci else None,
        ci_high_pct=ci[1] if ci else None,
        ci_method="Welch two-sample t interval, 95%" if ci else None,
        p_value=ci[2] if ci else None,
        test="Welch's t-test (scipy.stats.ttest_ind, equal_var=False)" if ci else None,
    )


def fleet_projection(
    configs: Sequence[ConfigFigures], *, cards: int, gpus_per_config: int = 1
) -> Fleet:
    """Project the per-card tuned - baseline difference onto ``cards`` cards.

    A configuration's figures cover ``gpus_per_config`` cards; per card they are divided by it.
    """
    baseline = next((c for c in configs if c.key == "baseline"), None)
    tuned = next((c for c in configs if c.key == "tuned"), None)
    if baseline is None or tuned is None:
        return Fleet(cards=cards)
    per_card = cards / max(gpus_per_config, 1)
    goodput = (tuned.goodput_tok_s - baseline.goodput_tok_s) * per_card
    power_kw: float | None = None
    energy: float | None = None
    if tuned.node_power_kw is not None and baseline.node_power_kw is not None:
        power_kw = (tuned.node_power_kw - baseline.node_power_kw) * per_card
        energy = power_kw * HOURS_PER_YEAR
    return Fleet(
        cards=cards,
        goodput_delta_tok_s=goodput,
        power_delta_kw=power_kw,
        energy_delta_kwh_per_year=energy,
    )
