"""Comparing configurations: the verdict on SLO capacity, variance band, fleet projection.

**Verdict on SLO capacity** (:func:`capacity_verdict`; every result whose runs keep their window
requests). The change of the candidate (role ``tuned``) against the baseline is the ratio of
their SLO capacities from one joint fit of both runs' probes
(:func:`tokenwatt.capacity.relative_capacity`), with its 95 % interval. Both configurations see
the same arrival schedules and request lengths at the same rate (each probe of a run sends a
workload stream chosen by its place in the sweep, the same for every run of the comparison:
common random numbers), so what differs between them is the configuration, not the luck of the
draw. When the runs' workload sections are the same (seed included), the fit pairs them stream
by stream, so what a stream's requests do to every configuration alike cancels from the ratio:
where the runs sent streams at two rates (the adaptive sweep's stream pairs) it holds each
stream's own effect fixed, reading the latency curve's slope from one stream's two rates and the
difference between the configurations from the streams they share; otherwise (bisection sends
each stream once) it takes two configurations' probes of a stream as correlated and weighs their
difference more than their sum (``benchmarks/README.md``, "The verdict against the truth",
measures both). When the comparison holds a repeat of the baseline (role ``other``), its
capacity change against the baseline is the *drift*, and the interval is widened by its size on
both sides: a change the baseline shows against itself is no evidence. Outcomes, from the
widened interval:

- ``gate_failed``: the candidate's accuracy dropped by more than ``max_drop_pts``;
- ``better`` / ``worse``: the interval lies wholly above / below 0;
- ``no_difference``: it lies within ± the minimum detectable effect, and that effect is at most
  :data:`NO_DIFFERENCE_MAX_MDE_PCT` (a comparison that cannot resolve a change of that size
  cannot say there is none);
- ``inconclusive``: none of these (or the probes do not bound the interval): the data cannot
  say.

With several candidates (an N-way report), each gets its own verdict against the baseline from
one joint fit of every configuration, with a multiple-comparison correction
(:mod:`tokenwatt.multiplicity`, "Several candidates").

The **minimum detectable effect** (MDE) is the smallest true change the comparison would call
better or worse four times in five: (t(0.975) + t(0.80)) x the standard error of the log ratio,
widened by the drift, as a percentage. Every verdict states its interval and MDE.

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

from tokenwatt import multiplicity
from tokenwatt.capacity import RelativeCapacity, SloName, pct_of_log_ratio, relative_capacity
from tokenwatt.schema.result import Fleet, MultipleComparison, Verdict, VerdictOutcome
from tokenwatt.schema.run import ProbeRecord
from tokenwatt.schema.spec import SloSpec

__all__ = [
    "FLEET_CARDS",
    "HOURS_PER_YEAR",
    "NO_DIFFERENCE_MAX_MDE_PCT",
    "POWER",
    "CapacityFigures",
    "ConfigFigures",
    "capacity_verdict",
    "change_pct",
    "confidence_interval",
    "fleet_projection",
    "repeat_spread_pct",
    "variance_band_pct",
    "verdict",
    "verdict_from_probes",
    "verdicts_from_probes",
]

HOURS_PER_YEAR = 8760.0
CONFIDENCE = 0.95
POWER = 0.80
"""The MDE is the true change detected with this probability."""
MIN_REPEATS_FOR_CI = 3
NO_DIFFERENCE_MAX_MDE_PCT = 10.0
"""The coarsest resolution at which a comparison may conclude "no measurable difference"."""
FLEET_CARDS = 64
"""Cards the fleet projection assumes unless told otherwise."""


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
    from scipy import stats as scipy_stats  # slow to import: on first use

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


@dataclass(frozen=True)
class CapacityFigures:
    """One configuration's SLO capacity, as the verdict reads it."""

    key: str
    label: str
    capacity_rps: float | None
    binding_slo: SloName | None = None
    accuracy_delta_pts: float | None = None
    accuracy_meaningful: bool = True


def verdict_from_probes(
    configs: Sequence[tuple[CapacityFigures, Sequence[ProbeRecord]]],
    slo: SloSpec,
    *,
    max_drop_pts: float | None,
    paired: bool = False,
) -> Verdict:
    """The verdict on SLO capacity from every configuration's probes, the baseline first.

    One joint fit (:func:`tokenwatt.capacity.relative_capacity`) on the bound that binds the
    baseline, then :func:`capacity_verdict`. ``paired``: the configurations ran the same
    workload with the same seed (common random numbers), so the fit pairs them stream by stream.
    """
    base = configs[0][0]
    relative = relative_capacity(
        [probes for _, probes in configs],
        slo,
        binding=base.binding_slo or "tpot",
        centres_rps=[figures.capacity_rps for figures, _ in configs],
        paired=paired,
    )
    return capacity_verdict(
        [figures for figures, _ in configs],
        relative,
        order=[figures.key for figures, _ in configs],
        max_drop_pts=max_drop_pts,
    )


def verdicts_from_probes(
    configs: Sequence[tuple[CapacityFigures, Sequence[ProbeRecord]]],
    slo: SloSpec,
    *,
    max_drop_pts: float | None,
    paired: bool = False,
    method: multiplicity.Correction = "holm",
    alpha: float = multiplicity.FAMILY_ALPHA,
) -> tuple[list[Verdict], MultipleComparison]:
    """One verdict per candidate (key ``tuned``), with a multiple-comparison correction.

    The configurations are fitted jointly (the baseline first, every candidate, the repeat), as
    :func:`verdict_from_probes` does for one candidate; each candidate's p-value and step level
    come from :mod:`tokenwatt.multiplicity`, its interval is refitted at that level, and it is
    called better or worse only where the correction rejects it too.
    """
    order = [figures.key for figures, _ in configs]
    candidates = [k for k, key in enumerate(order) if key == "tuned"]
    base = configs[0][0]

    def fit(confidence: float) -> RelativeCapacity | None:
        return relative_capacity(
            [probes for _, probes in configs],
            slo,
            binding=base.binding_slo or "tpot",
            centres_rps=[figures.capacity_rps for figures, _ in configs],
            paired=paired,
            confidence=confidence,
        )

    relative = fit(CONFIDENCE)
    drift_log = 0.0
    if relative is not None and "other" in order:
        drift_log = abs(relative.log_ratio[order.index("other")])
    p_values = [
        multiplicity.change_p_value(
            relative.log_ratio[k], relative.log_se[k], drift_log=drift_log, dof=relative.dof
        )
        if relative is not None
        else 1.0
        for k in candidates
    ]
    adjusted = multiplicity.adjusted_p_values(p_values, method)
    levels = multiplicity.step_levels(p_values, method, alpha=alpha)
    fits: dict[float, RelativeCapacity | None] = {}
    verdicts: list[Verdict] = []
    figures_only = [figures for figures, _ in configs]
    name = "Holm" if method == "holm" else "Bonferroni"
    for k, p, p_adj, level in zip(candidates, p_values, adjusted, levels, strict=True):
        confidence = 1.0 - level
        if confidence not in fits:
            fits[confidence] = fit(confidence)
        v = capacity_verdict(
            figures_only,
            fits[confidence],
            order=order,
            max_drop_pts=max_drop_pts,
            candidate=k,
            confidence=confidence,
        )
        if v.outcome in ("better", "worse") and p_adj > alpha:
            v = v.model_copy(
                update={
                    "outcome": "inconclusive",
                    "text": f"{v.text} Not called {v.outcome}: {name}'s correction over"
                    f" {len(candidates)} candidates does not reject it (adjusted p ="
                    f" {p_adj:.3g} > {alpha:g}).",
                }
            )
        verdicts.append(
            v.model_copy(
                update={
                    "candidate": configs[k][0].label,
                    "confidence_pct": confidence * 100.0,
                    "p_value": p,
                    "p_value_adjusted": p_adj,
                    "test": f"Student's t on the log capacity ratio less the drift; {name}"
                    f" correction over {len(candidates)} candidates, family-wise level {alpha:g}",
                }
            )
        )
    correction = MultipleComparison(method=method, family_alpha=alpha, candidates=len(candidates))
    return verdicts, correction


def _pairing_text(relative: RelativeCapacity) -> str:
    """How the joint fit paired the configurations, for the verdict's method."""
    if relative.stream_effects:
        return (
            f", each of {relative.stream_effects} workload streams' own effect held fixed"
            f" ({relative.paired_streams} shared by the configurations, {relative.slope_streams}"
            " sent at two rates)"
        )
    if relative.stream_correlation is not None:
        return (
            f", paired on {relative.paired_streams} shared workload streams (generalised"
            f" least squares, stream correlation {relative.stream_correlation:.2f})"
        )
    return ""


def _gate_failed(candidate: CapacityFigures, max_drop_pts: float | None) -> bool:
    return (
        max_drop_pts is not None
        and candidate.accuracy_meaningful
        and candidate.accuracy_delta_pts is not None
        and candidate.accuracy_delta_pts < -max_drop_pts
    )


def capacity_verdict(
    configs: Sequence[CapacityFigures],
    relative: RelativeCapacity | None,
    *,
    order: Sequence[str],
    max_drop_pts: float | None,
    candidate: int | None = None,
    confidence: float = CONFIDENCE,
) -> Verdict:
    """The comparison's conclusion on SLO capacity (see the module docstring).

    Args:
        configs: every configuration.
        relative: the joint fit of the configurations in ``order`` (None: it was not possible).
        order: the keys of the configurations in the order ``relative`` holds them; the first
            is the baseline.
        max_drop_pts: the accuracy gate (None: no gate).
        candidate: the position in ``order`` (and ``configs``, then in the same order) of the
            candidate judged; default: the one with key ``tuned``.
        confidence: the level of the interval (``relative`` must be fitted at it) and the MDE.
    """
    from scipy import stats as scipy_stats  # slow to import: on first use

    by_key = {c.key: c for c in configs}
    baseline, tuned = by_key.get("baseline"), by_key.get("tuned")
    if candidate is not None:
        tuned = configs[candidate]
    if baseline is None or tuned is None:
        missing = "baseline" if baseline is None else "tuned"
        return Verdict(
            outcome="not_compared",
            text=f"No comparison: there is no {missing} configuration.",
            basis="slo_capacity",
        )
    who = f"'{tuned.label}' against '{baseline.label}'"
    if relative is None or (candidate is None and "tuned" not in order):
        return Verdict(
            outcome="gate_failed" if _gate_failed(tuned, max_drop_pts) else "inconclusive",
            text=f"{who}: the probes do not support a capacity comparison (too few usable probes"
            " near either boundary); measure longer or with more probes.",
            basis="slo_capacity",
        )
    k = candidate if candidate is not None else list(order).index("tuned")
    change = relative.change_pct(k)
    log_ci = relative.ci[k]
    se = relative.log_se[k]
    drift_log = 0.0
    drift_pct: float | None = None
    if "other" in order:
        drift_log = abs(relative.log_ratio[list(order).index("other")])
        drift_pct = relative.change_pct(list(order).index("other"))
    dof = relative.dof
    z = float(scipy_stats.t.ppf(0.5 + confidence / 2.0, dof) + scipy_stats.t.ppf(POWER, dof))
    mde = pct_of_log_ratio(z * se + drift_log) if se is not None else None
    caps = ""
    if baseline.capacity_rps is not None and tuned.capacity_rps is not None:
        # The change is the joint fit's (paired where the runs share streams); each run's own
        # estimate stands beside it, and their ratio need not match it.
        caps = (
            f" (fitted on both runs' probes together; each run's own SLO capacity estimate"
            f" alone: {tuned.capacity_rps:.2f} vs {baseline.capacity_rps:.2f} req/s)"
        )
    drift_text = (
        f", widened by the baseline's drift against its repeat ({drift_pct:+.1f}%)"
        if drift_pct is not None
        else ""
    )
    low = high = None
    if log_ci is not None:
        low, high = pct_of_log_ratio(log_ci[0] - drift_log), pct_of_log_ratio(log_ci[1] + drift_log)
    level = f"{confidence * 100:.3g}%"
    interval = (
        f"{level} CI {low:+.1f}% to {high:+.1f}%{drift_text}"
        if low is not None and high is not None
        else f"{level} interval unbounded: the probes do not pin the change down"
    )
    mde_text = f"; minimum detectable effect ±{mde:.1f}%" if mde is not None else ""
    outcome: VerdictOutcome
    if _gate_failed(tuned, max_drop_pts):
        assert tuned.accuracy_delta_pts is not None
        outcome = "gate_failed"
        text = (
            f"{who}: fails the accuracy gate (accuracy {tuned.accuracy_delta_pts:+.1f} points,"
            f" more than the {max_drop_pts:g}-point limit), so it is not an improvement"
            f" whatever its SLO capacity ({change:+.1f}%, {interval}){caps}."
        )
    elif low is not None and high is not None and low > 0:
        outcome = "better"
        text = f"{who}: {change:.1f}% higher SLO capacity{caps}; {interval}{mde_text}."
    elif low is not None and high is not None and high < 0:
        outcome = "worse"
        text = f"{who}: {-change:.1f}% lower SLO capacity{caps}; {interval}{mde_text}."
    elif (
        low is not None
        and high is not None
        and mde is not None
        and mde <= NO_DIFFERENCE_MAX_MDE_PCT
        and -mde <= low
        and high <= mde
    ):
        outcome = "no_difference"
        text = (
            f"{who}: no measurable difference in SLO capacity ({change:+.1f}%{caps}); {interval},"
            f" within ± the minimum detectable effect ({mde:.1f}%)."
        )
    else:
        outcome = "inconclusive"
        text = (
            f"{who}: inconclusive: SLO capacity {change:+.1f}%{caps}, but {interval}{mde_text};"
            " the probes cannot tell better from worse. A longer sweep narrows it"
            " (tokenwatt plan estimates how long)."
        )
    return Verdict(
        outcome=outcome,
        change_pct=change,
        band_pct=None,
        text=text,
        ci_low_pct=low,
        ci_high_pct=high,
        ci_method=(
            "joint fit of ln p99 against ln rate with a common slope"
            + _pairing_text(relative)
            + f" (Fieller interval, Student's t with {dof} df)"
            + (", widened by the drift" if drift_pct is not None else "")
        ),
        test=None,
        basis="slo_capacity",
        mde_pct=mde,
        drift_pct=drift_pct,
    )
