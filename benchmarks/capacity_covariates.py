"""How much of a probe's count over the TPOT bound its own workload explains (issue 15's lead).

**Probes at one rate.** Runs ``--probes`` virtual-time probes of one spec at one rate, each on
its own workload stream (30 s warm-up, ``--window`` s window), and relates each probe's share of
window requests over the TPOT bound (failed ones count as over) to covariates of the requests it
sent: the window's totals (requests, prompt and output tokens); per bin of 2, 5 and 10 s of
scheduled send times, the largest bin and the sum of squared bins (bursts); and the *load
covariate* z below. Prints each covariate's correlation with the share and the R^2 of least
squares on the totals and on the four best covariates.

**The load covariate.** For each window request j, L_j = the prompt tokens of the *other*
requests scheduled in the ``--span`` s after it (cut at the window's end). Under Poisson
arrivals with independent lengths, L_j is compound Poisson whatever happened before, so its
moments are known from the rate, the span and the run's prompt lengths: E[L^p] from the
cumulants r t E[X^p]. z = the mean over the window of L_j^p / E[L_j^p] - 1 has expectation 0 at
every rate and window length: a control variate.

**Whether it helps the capacity estimate** (``--trials N``): N adaptive sweeps of the spec
(``tokenwatt.plan.run_trial``, seeds 100, 101, ...) and, per trial, the capacity from

- the shipped estimator (``tokenwatt.capacity.estimate_capacity``, as the trial reports it);
- the logistic fit with its slope fixed at the value fitted to every trial's probes pooled (an
  oracle: no run knows it), which isolates what the slope's noise costs;
- the same plus the covariate, c z in the logit with c fixed at its value over the fixed-rate
  probes (an oracle too), the fraction over the bound averaged over the trial's own centred z
  (the truth is the long-run fraction, an average over loads, not the fraction at the average
  load).

Errors are against ``--truth`` (req/s; the demo baseline's is 10.917, benchmarks/README.md).

    .venv/bin/python benchmarks/capacity_covariates.py --spec specs/demo-sim.spec.yaml --rate 11
    .venv/bin/python benchmarks/capacity_covariates.py --spec specs/demo-sim.spec.yaml --rate 11 \\
        --window 30 --trials 40 --truth 10.917
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from scipy.optimize import brentq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tokenwatt.capacity import (  # noqa: E402
    NEIGHBOURHOOD_LN,
    TARGET_FRACTION,
    ProbeCounts,
    _logistic_mle,
    probe_counts,
)
from tokenwatt.plan import _server, engine_config, run_trial  # noqa: E402
from tokenwatt.schema.run import ProbeRecord  # noqa: E402
from tokenwatt.store import load_spec  # noqa: E402
from tokenwatt.sweep import ProbePlan  # noqa: E402

BINS_S = (2.0, 5.0, 10.0)
POWERS = (1, 4)


def prompt_moments(probes: Sequence[ProbeRecord]) -> list[float]:
    """E[X^p] of the prompt lengths, p = 0..4, over every window request of the probes."""
    lengths = np.concatenate(
        [np.asarray(p.requests.input_tokens, dtype=float) for p in probes if p.requests]
    )
    return [float(np.mean(lengths**p)) for p in range(5)]


def _compound_poisson_moment(expected_count: float, moments: Sequence[float], power: int) -> float:
    """E[S^power] of a Poisson(expected_count) sum of lengths with raw moments ``moments``."""
    k1, k2, k3, k4 = (expected_count * moments[i] for i in (1, 2, 3, 4))
    return {
        1: k1,
        2: k2 + k1**2,
        3: k3 + 3 * k2 * k1 + k1**3,
        4: k4 + 4 * k3 * k1 + 3 * k2**2 + 6 * k2 * k1**2 + k1**4,
    }[power]


def load_covariate(
    probe: ProbeRecord, moments: Sequence[float], *, span_s: float, power: int
) -> float:
    """z of the module docstring: mean relative load after each window request, less 1."""
    table = probe.requests
    assert table is not None
    sent = np.asarray(table.t_sched_s)
    order = np.argsort(sent, kind="stable")
    sent = sent[order]
    prompt = np.asarray(table.input_tokens, dtype=float)[order]
    cumulative = np.concatenate([[0.0], np.cumsum(prompt)])
    terms = []
    for j, t in enumerate(sent):
        end = min(t + span_s, probe.window_s)
        if end - t < span_s / 8:
            continue
        load = cumulative[np.searchsorted(sent, end, "right")] - cumulative[j + 1]
        expected = _compound_poisson_moment(probe.rate_rps * (end - t), moments, power)
        terms.append(load**power / expected - 1.0)
    return float(np.mean(terms)) if terms else 0.0


def _share(probe: ProbeRecord, bound_ms: float) -> tuple[int, int]:
    table = probe.requests
    assert table is not None
    values = [
        math.inf if status != "ok" else tpot
        for tpot, status in zip(table.tpot_ms, table.status, strict=True)
        if not (status == "ok" and tpot is None)
    ]
    return sum(v > bound_ms for v in values), len(values)


def _slope(x: np.ndarray, k: np.ndarray, n: np.ndarray) -> float:
    """b of logit q = a + b x, by the capacity estimator's own fit (Firth's, pooled here)."""
    fit = _logistic_mle(x - x.mean(), k, n)
    if fit is None:
        raise SystemExit("the pooled logistic fit failed")
    return float(fit[0][1])


def _solve(f: Callable[[float], float], lo: float, hi: float, target: float) -> float:
    """x in [lo, hi] with f(x) = target, f increasing."""
    return float(brentq(lambda x: f(x) - target, lo, hi, xtol=1e-12))


def fixed_slope_capacity(
    counts: Sequence[ProbeCounts], z: dict[int, float], *, slope: float, c: float, start: float
) -> float:
    """Capacity from the probes near the crossing, with logit q = a + slope ln r + c z.

    Only a is fitted (sum of counts = sum of fitted counts); the crossing is where the fitted
    fraction, averaged over the probes' own centred z (weights: requests), is 1 %.
    """
    centre = math.log(start)
    for _ in range(50):
        near = [q for q in counts if abs(math.log(q.rate_rps) - centre) <= NEIGHBOURHOOD_LN]
        x = np.log([q.rate_rps for q in near]) - centre
        k = np.array([q.exceeding for q in near], dtype=float)
        n = np.array([q.requests for q in near], dtype=float)
        zz = np.array([z[q.index] for q in near])
        zc = zz - np.average(zz, weights=n)

        def fitted(a: float, x=x, n=n, zz=zz) -> float:
            return float((n / (1.0 + np.exp(-(a + slope * x + c * zz)))).sum())

        a = _solve(fitted, -60.0, 60.0, float(k.sum()))

        def fraction(xr: float, a=a, n=n, zc=zc) -> float:
            return float(np.average(1.0 / (1.0 + np.exp(-(a + slope * xr + c * zc))), weights=n))

        new = centre + _solve(fraction, -2.0, 2.0, TARGET_FRACTION)
        if abs(new - centre) < 1e-9:
            break
        centre = new
    return math.exp(centre)


def _summary(name: str, estimates: Sequence[float], truth: float) -> None:
    errors = [e / truth - 1.0 for e in estimates]
    print(
        f"| {name} | {100 * statistics.median(abs(e) for e in errors):.1f} %"
        f" | {100 * statistics.mean(errors):+.1f} % | {100 * statistics.pstdev(errors):.1f} % |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=REPO / "specs" / "demo-sim.spec.yaml")
    parser.add_argument("--rate", type=float, default=11.0, help="req/s")
    parser.add_argument("--window", type=float, default=60.0, help="s")
    parser.add_argument("--probes", type=int, default=80)
    parser.add_argument("--span", type=float, default=2.0, help="load covariate's span, s")
    parser.add_argument("--trials", type=int, default=0, help="adaptive sweeps to estimate from")
    parser.add_argument("--truth", type=float, default=None, help="true capacity, req/s")
    args = parser.parse_args()
    loaded = load_spec(args.spec)
    config = engine_config(loaded)
    slo = loaded.spec.slo
    server = _server(loaded, config, float(loaded.spec.measurement.request_timeout_s))
    fixed: list[ProbeRecord] = []
    for stream in range(args.probes):
        plan = ProbePlan(phase="refine", rate_rps=args.rate, warmup_s=30.0, window_s=args.window)
        fixed.append(server.probe(plan, index=stream, slo=slo).record)
    tallies = [_share(p, slo.tpot_p99_ms) for p in fixed]
    q = np.array([k / n for k, n in tallies])
    rows: list[dict[str, float]] = []
    moments = prompt_moments(fixed)
    for probe in fixed:
        table = probe.requests
        assert table is not None
        sent = np.array(table.t_sched_s)
        prompt = np.array(table.input_tokens, dtype=float)
        output = np.array(table.output_tokens, dtype=float)
        row = {"requests": float(len(sent)), "prompt_tokens": prompt.sum(), "output": output.sum()}
        for width in BINS_S:
            bins = np.floor(sent / width).astype(int)
            for name, weight in (("n", np.ones_like(prompt)), ("in", prompt), ("out", output)):
                per_bin = np.bincount(bins, weights=weight)
                row[f"max_{name}_{width:g}s"] = float(per_bin.max())
                row[f"sq_{name}_{width:g}s"] = float((per_bin**2).sum())
        for power in POWERS:
            row[f"z^{power}"] = load_covariate(probe, moments, span_s=args.span, power=power)
        rows.append(row)
    binomial = q.mean() * (1 - q.mean()) / np.mean([r["requests"] for r in rows])
    print(
        f"share over the TPOT bound: mean {q.mean():.4f}, sd {q.std():.4f}, "
        f"{q.var() / binomial:.1f}x the binomial variance; {args.probes} probes"
    )
    columns = {name: np.array([r[name] for r in rows]) for name in rows[0]}
    corr = {name: float(np.corrcoef(x, q)[0, 1]) for name, x in columns.items() if x.std() > 0}
    for name, rho in corr.items():
        print(f"  {name:16s} correlation {rho:+.3f}")
    for power in POWERS:
        zs = columns[f"z^{power}"]
        print(
            f"  z^{power}: mean {zs.mean():+.4f} (expected 0; standard error"
            f" {zs.std() / math.sqrt(len(zs)):.4f})"
        )

    def r_squared(names: list[str]) -> float:
        design = np.column_stack([np.ones_like(q)] + [columns[n] for n in names])
        beta, *_ = np.linalg.lstsq(design, q, rcond=None)
        return float(1 - (q - design @ beta).var() / q.var())

    print(f"R^2, window totals: {r_squared(['requests', 'prompt_tokens', 'output']):.3f}")
    best = sorted(corr, key=lambda n: -abs(corr[n]))[:4]
    print(f"R^2, the four best {best}: {r_squared(best):.3f}")
    if args.trials:
        estimate_with(args, loaded, config, fixed, tallies)


def estimate_with(args, loaded, config, fixed, tallies) -> None:  # type: ignore[no-untyped-def]
    if args.truth is None:
        raise SystemExit("--trials needs --truth")
    slo = loaded.spec.slo
    k = np.array([t[0] for t in tallies], dtype=float)
    n = np.array([t[1] for t in tallies], dtype=float)
    moments = prompt_moments(fixed)
    c_of: dict[int, float] = {}
    for power in POWERS:
        z = np.array([load_covariate(p, moments, span_s=args.span, power=power) for p in fixed])
        c_of[power] = _slope(z, k, n)
    trials = [run_trial(loaded, config, seed=100 + i) for i in range(args.trials)]
    counts = [[c for c in probe_counts(t.probes, slo)["tpot"] if c.complete] for t in trials]
    pooled = [c for cs in counts for c in cs]
    x = np.log([c.rate_rps for c in pooled]) - math.log(args.truth)
    near = np.abs(x) <= NEIGHBOURHOOD_LN
    kk = np.array([c.exceeding for c in pooled], dtype=float)[near]
    nn = np.array([c.requests for c in pooled], dtype=float)[near]
    slope = _slope(x[near], kk, nn)
    print(
        f"\n{args.trials} adaptive trials; pooled slope {slope:.2f} over {int(near.sum())} probes;"
        + "".join(f" c(z^{p}) {c:.2f}" for p, c in c_of.items())
        + f"; truth {args.truth} req/s"
    )
    print("| estimator | median \\|error\\| | mean error | sd |")
    print("| --- | ---: | ---: | ---: |")
    shipped = [t.estimate.capacity_rps for t in trials]
    _summary("shipped (`estimate_capacity`)", [s for s in shipped if s], args.truth)
    starts = [s or args.rate for s in shipped]
    no_covariate = [
        fixed_slope_capacity(
            cs, dict.fromkeys((c.index for c in cs), 0.0), slope=slope, c=0.0, start=s
        )
        for cs, s in zip(counts, starts, strict=True)
    ]
    _summary("slope fixed at the pooled value", no_covariate, args.truth)
    for power, c in c_of.items():
        estimates = []
        for trial, cs, s in zip(trials, counts, starts, strict=True):
            m = prompt_moments(trial.probes)
            z = {
                p.index: load_covariate(p, m, span_s=args.span, power=power)
                for p in trial.probes
                if p.requests is not None and p.window_requests > 0
            }
            estimates.append(fixed_slope_capacity(cs, z, slope=slope, c=c, start=s))
        _summary(f"slope fixed, plus c z^{power} with c fixed", estimates, args.truth)


if __name__ == "__main__":
    main()
