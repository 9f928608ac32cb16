"""The long-run exceedance curve of a simulated spec, by brute force: what the truth is.

The SLO capacity is where the *steady-state* p99 meets the bound (DESIGN.md: "the limit of long
windows"), that is where the long-run fraction q(r) of requests over the bound crosses 1 %.
``tokenwatt.plan.true_capacity`` approximates that limit by bisecting the p99 of five 1,200 s
windows' requests taken together (until its version 3, the median of their five p99s); the
estimator (``tokenwatt.capacity``) targets q(r) = 1 % directly, pooling counts. Are they the
same number, and how well is each known?

This script runs ``--seeds`` long windows (``--window`` s after ``--warmup`` s, workload seeds
``TRUTH_SEED_BASE`` + 0, 1, ..., so the first five are the truth's own windows) at each rate of
``--rates``, records per window the requests counted and those over each bound (failed ones as
over, as the estimator counts them) and the window's p99s, and from them:

- **pooled**: per rate, the fraction over the binding bound over all windows; the crossing of
  1 %, by Firth's logistic fit in ln r over every window (the estimator's own model and fit,
  ``tokenwatt.capacity._logistic_mle``), and its 95 % interval by the bootstrap over seeds (a
  seed's windows at every rate resampled together: they share the seed's requests);
- **pooled, 5 seeds**: the same fit of the first five seeds' windows only, as ``true_capacity``
  judges a rate, and the same over five seeds drawn from all ``--seeds``: how far the truth of
  ``tokenwatt plan`` moves with its seeds;
- **median of 5**: the crossing of the bound by the median p99 of the first five seeds'
  windows (log-linear between the grid's rates), ``true_capacity``'s definition until its
  version 3, and the same over five seeds drawn from all ``--seeds``.

With ``--oracle``, what a design placed by an oracle would read from a few of these windows:
``K`` windows at each of two grid rates (draws without replacement), fitted as the estimator
fits them, against the pooled crossing of all the windows. A sweep must also find where to put
them, so this bounds what any sweep of that many window-seconds can do on the scenario.

Windows are cached in ``--cache`` (JSON, keyed by rate and seed), so a wider grid or more seeds
only runs what is new.

    .venv/bin/python benchmarks/capacity_curve.py --spec specs/demo-sim.spec.yaml \\
        --rates 10.2,10.6,11.0,11.4,11.8 --seeds 20 --jobs 2
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tokenwatt.capacity import TARGET_FRACTION, _logistic_mle, slo_bounds  # noqa: E402
from tokenwatt.plan import (  # noqa: E402
    TRUTH_SEED_BASE,
    TRUTH_WARMUP_S,
    TRUTH_WINDOW_S,
    engine_config,
    truth_window,
)
from tokenwatt.schema.spec import SloSpec  # noqa: E402
from tokenwatt.store import load_spec  # noqa: E402

BOUNDS = ("ttft", "tpot")
"""The first-token bound (TTFT, or TTFAT when the SLO names it) and TPOT."""


def _bounds(slo: SloSpec) -> dict[str, tuple[str, float]]:
    """Per bound, the request-table column and the limit, ms, as the estimator counts them."""
    limits = slo_bounds(slo)
    first = next(limit for name, limit in limits.items() if name != "tpot")
    return {"ttft": (slo.first_token_column, first), "tpot": ("tpot_ms", limits["tpot"])}


def window(
    spec_path: str, rate: float, seed: int, window_s: float, warmup_s: float
) -> dict[str, object]:
    """One long window (``true_capacity``'s own): per bound, requests counted, those over, and
    the window's p99."""
    loaded = load_spec(Path(spec_path))
    w = truth_window(
        loaded,
        engine_config(loaded),
        rate_rps=rate,
        seed=seed,
        window_s=window_s,
        warmup_s=warmup_s,
    )
    return {
        "rate": rate,
        "seed": seed,
        "ttft": {"n": w.first_token[0], "k": w.first_token[1], "p99": w.first_token_p99_ms},
        "tpot": {"n": w.tpot[0], "k": w.tpot[1], "p99": w.tpot_p99_ms},
    }


def pooled_crossing(rates: np.ndarray, k: np.ndarray, n: np.ndarray) -> float | None:
    """ln r where Firth's logistic fit of every window crosses the target fraction."""
    x = np.log(rates)
    shift = float(x.mean())
    fit = _logistic_mle(x - shift, k.astype(float), n.astype(float))
    if fit is None:
        return None
    (a, b), _cov, _chi2 = fit
    if not b > 0:
        return None
    target = math.log(TARGET_FRACTION / (1 - TARGET_FRACTION))
    return math.exp(shift + (target - a) / b)


def median_crossing(grid: list[float], p99: np.ndarray, bound: float) -> float | None:
    """Where the median p99 over the chosen seeds crosses the bound (log-linear in the grid)."""
    medians = np.median(p99, axis=1)
    for i in range(len(grid) - 1):
        lo, hi = medians[i], medians[i + 1]
        if lo <= bound < hi:
            if not math.isfinite(hi):
                return grid[i]
            t = (math.log(bound) - math.log(lo)) / (math.log(hi) - math.log(lo))
            return math.exp(math.log(grid[i]) + t * (math.log(grid[i + 1]) - math.log(grid[i])))
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default="specs/demo-sim.spec.yaml")
    ap.add_argument("--rates", default="10.2,10.6,11.0,11.4,11.8", help="req/s, comma-separated")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--window", type=float, default=TRUTH_WINDOW_S, help="s")
    ap.add_argument("--warmup", type=float, default=TRUTH_WARMUP_S, help="s")
    ap.add_argument("--bound", choices=sorted(BOUNDS), default="tpot", help="the binding bound")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--boot", type=int, default=2000, help="bootstrap resamples")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/capacity_curve.json"))
    ap.add_argument(
        "--oracle", action="store_true", help="also: what a few windows placed by an oracle read"
    )
    args = ap.parse_args()
    grid = sorted(float(r) for r in args.rates.split(","))
    seeds = [TRUTH_SEED_BASE + s for s in range(args.seeds)]
    tag = f"{args.spec}|{args.window:g}|{args.warmup:g}"
    cache: dict[str, Any] = json.loads(args.cache.read_text()) if args.cache.is_file() else {}
    todo = [(r, s) for r in grid for s in seeds if f"{tag}|{r:g}|{s}" not in cache]
    print(f"{len(todo)} windows to run ({len(grid) * len(seeds) - len(todo)} cached)", flush=True)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {
            (r, s): pool.submit(window, args.spec, r, s, args.window, args.warmup) for r, s in todo
        }
        for done, ((r, s), fut) in enumerate(futures.items(), 1):
            cache[f"{tag}|{r:g}|{s}"] = fut.result()
            args.cache.write_text(json.dumps(cache))
            if done % 10 == 0:
                print(f"  {done}/{len(todo)}", flush=True)
    rows = [[cache[f"{tag}|{r:g}|{s}"][args.bound] for s in seeds] for r in grid]
    k = np.array([[w["k"] for w in row] for row in rows], dtype=float)  # rate x seed
    n = np.array([[w["n"] for w in row] for row in rows], dtype=float)
    p99 = np.array([[w["p99"] for w in row] for row in rows], dtype=float)
    loaded = load_spec(Path(args.spec))
    bound_ms = _bounds(loaded.spec.slo)[args.bound][1]
    print(f"\n{args.bound}: {args.seeds} windows of {args.window:g} s per rate")
    print("| req/s | over the bound, pooled | windows' share: median (min-max)", end="")
    print(" | median p99, 5 / all |")
    print("| ---: | ---: | ---: | ---: |")
    for i, r in enumerate(grid):
        share = k[i] / n[i] * 100
        print(
            f"| {r:g} | {k[i].sum():.0f} / {n[i].sum():.0f} = {k[i].sum() / n[i].sum() * 100:.3f} %"
            f" | {np.median(share):.3f} % ({share.min():.3f}-{share.max():.3f}) |"
            f" {np.median(p99[i, :5]):.2f} / {np.median(p99[i]):.2f} ms |"
        )
    # phi per rate: variance of the windows' counts over the binomial variance
    for i, r in enumerate(grid):
        q = k[i].sum() / n[i].sum()
        resid = (k[i] - n[i] * q) ** 2 / (n[i] * q * (1 - q))
        print(f"  {r:g} req/s: dispersion phi = {resid.sum() / (len(seeds) - 1):.1f}")
    rates = np.repeat(np.array(grid), len(seeds))
    pooled = pooled_crossing(rates, k.ravel(), n.ravel())
    five = median_crossing(grid, p99[:, :5], bound_ms)
    every = median_crossing(grid, p99, bound_ms)
    rng = np.random.default_rng(0)
    rates5 = np.repeat(np.array(grid), 5)
    pooled5 = pooled_crossing(rates5, k[:, :5].ravel(), n[:, :5].ravel())
    boot_pooled: list[float] = []
    boot_pooled5: list[float] = []
    boot_five: list[float] = []
    for _ in range(args.boot):
        pick = rng.integers(0, len(seeds), len(seeds))
        c = pooled_crossing(rates, k[:, pick].ravel(), n[:, pick].ravel())
        if c is not None:
            boot_pooled.append(c)
        five_seeds = rng.choice(len(seeds), 5, replace=False)
        c5 = pooled_crossing(rates5, k[:, five_seeds].ravel(), n[:, five_seeds].ravel())
        if c5 is not None:
            boot_pooled5.append(c5)
        m = median_crossing(grid, p99[:, pick[:5]], bound_ms)
        if m is not None:
            boot_five.append(m)

    def ci(values: list[float]) -> str:
        if len(values) < args.boot * 0.9:
            return f"({len(values)} of {args.boot} resamples cross inside the grid)"
        lo, hi = np.quantile(values, [0.025, 0.975])
        return f"95 % {lo:.3f}-{hi:.3f} (median {statistics.median(values):.3f})"

    print(f"\npooled crossing (Firth fit of every window): {pooled} req/s;", end="")
    print(f" bootstrap {ci(boot_pooled)}")
    print(f"pooled over the first 5 seeds: {pooled5} req/s (true_capacity's definition)")
    print(f"pooled over 5 seeds drawn from {args.seeds}: {ci(boot_pooled5)}")
    print(f"median p99 of the first 5 seeds crosses at {five} req/s (the definition until v3)")
    print(f"median p99 of all {args.seeds} seeds crosses at {every} req/s")
    print(f"median of 5 seeds drawn from {args.seeds}: {ci(boot_five)}")
    if args.oracle and pooled is not None:
        oracle(grid, k, n, pooled, rng)


def oracle(grid: list[float], k: np.ndarray, n: np.ndarray, truth: float, rng: Any) -> None:
    """What a few windows placed by an oracle read (module docstring, ``--oracle``)."""
    draws = 1000
    print(f"\noracle designs ({draws} draws each, error against {truth:.3f} req/s):")
    for count in (1, 2, 4):
        for i in range(len(grid) - 1):
            for j in (i + 1, i + 2):
                if j >= len(grid):
                    continue
                errors, none = [], 0
                for _ in range(draws):
                    a = rng.choice(k.shape[1], count, replace=False)
                    b = rng.choice(k.shape[1], count, replace=False)
                    c = pooled_crossing(
                        np.repeat([grid[i], grid[j]], count),
                        np.concatenate([k[i, a], k[j, b]]),
                        np.concatenate([n[i, a], n[j, b]]),
                    )
                    if c is None or not math.isfinite(c):
                        none += 1
                    else:
                        errors.append(100 * (c / truth - 1))
                line = f"  {count} x {grid[i]:g} + {count} x {grid[j]:g} req/s:"
                if errors:
                    q25, q75 = np.quantile(errors, [0.25, 0.75])
                    line += (
                        f" median |error| {statistics.median(abs(e) for e in errors):.2f} %,"
                        f" median {statistics.median(errors):+.2f} %, quartiles {q25:+.1f} /"
                        f" {q75:+.1f} %,"
                    )
                print(f"{line} no fit in {none} of {draws}")


if __name__ == "__main__":
    main()
