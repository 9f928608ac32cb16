"""Where one run's SLO-capacity estimate loses precision: the adaptive sweep against fixed designs.

Two modes, each over ``--trials`` virtual-time runs of ``--spec`` (workload seeds 100, 101, ...),
errors against ``--truth`` (req/s; for the demo, ``benchmarks/capacity_curve.py``'s pooled
crossing):

``adaptive``  the spec's own sweep (``tokenwatt.plan.run_trial``), with the knobs below changed
              for the experiment only: ``--budget``, ``--precision`` (``sweep.precision_pct``),
              ``--max-refine`` (``adaptive.MAX_REFINE``: until 2026-12-04, 24, it capped a
              large budget; now 40, and only a sweep with none), ``--max-step-ln``
              (``adaptive._MAX_STEP_LN``: the widest step of a refinement pair), ``--no-pairs``,
              ``--no-ramp``, ``--neighbourhood`` (``capacity.NEIGHBOURHOOD_LN``: how far from the
              crossing the fit takes probes).
``fixed``     no search: ``--per-rate`` full windows (30 s warm-up, ``--window`` s, each its own
              stream, from idle) at each rate of ``--rates``, and the capacity fitted to them by
              ``tokenwatt.capacity.fit_constraint`` on the binding bound (TPOT on the demo): what
              the estimator does with a design placed in advance (by an oracle, when centred on
              the truth). Also the fit of every trial's probes pooled.

Prints one line per experiment: median |error|, mean and median error, sd, bounded intervals and
how many hold the truth, median probe-seconds (adaptive); for ``fixed``, the same for the trials
whose estimate came from the logistic fit (the others fall back to the bracket's middle, which a
design centred on the truth makes look good).

    .venv/bin/python benchmarks/capacity_designs.py adaptive --budget 2400 --max-refine 200
    .venv/bin/python benchmarks/capacity_designs.py fixed --rates 10.4,11.6 --per-rate 20
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import tokenwatt.adaptive as adaptive  # noqa: E402
import tokenwatt.capacity as capacity  # noqa: E402
from tokenwatt.plan import _server, engine_config, run_trial, with_seed, with_sweep  # noqa: E402
from tokenwatt.schema.spec import LoadedSpec  # noqa: E402
from tokenwatt.store import load_spec  # noqa: E402
from tokenwatt.sweep import ProbePlan  # noqa: E402

Outcome = tuple[float | None, tuple[float, float] | None, str, float, list[capacity.ProbeCounts]]


def _loaded(args: argparse.Namespace) -> LoadedSpec:
    loaded = load_spec(Path(args.spec))
    sweep: dict[str, object] = {}
    if args.budget is not None:
        sweep["budget_s"] = args.budget
    if args.precision is not None:
        sweep["precision_pct"] = args.precision
    if args.no_pairs:
        sweep["stream_pairs"] = False
    if args.no_ramp:
        sweep["ramp"] = False
    return with_sweep(loaded, **sweep)


def _patch(args: argparse.Namespace) -> None:
    """The experiment's constants, in this (worker) process only."""
    if args.max_refine is not None:
        adaptive.MAX_REFINE = args.max_refine
    if args.max_step_ln is not None:
        adaptive._MAX_STEP_LN = args.max_step_ln
    if args.neighbourhood is not None:
        capacity.NEIGHBOURHOOD_LN = args.neighbourhood


def adaptive_trial(job: tuple[argparse.Namespace, int]) -> Outcome:
    args, seed = job
    _patch(args)
    loaded = _loaded(args)
    trial = run_trial(loaded, engine_config(loaded), seed=seed)
    est = trial.estimate
    return est.capacity_rps, est.ci_rps, est.method, trial.total_seconds, []


def fixed_trial(job: tuple[argparse.Namespace, int]) -> Outcome:
    args, seed = job
    _patch(args)
    loaded = load_spec(Path(args.spec))
    spec = loaded.spec
    server = _server(
        with_seed(loaded, seed), engine_config(loaded), float(spec.measurement.request_timeout_s)
    )
    rates = [float(r) for r in args.rates.split(",")]
    records = []
    seconds = 0.0
    for i in range(args.per_rate * len(rates)):
        plan = ProbePlan(
            phase="refine",
            rate_rps=rates[i % len(rates)],
            warmup_s=30.0,
            window_s=args.window,
            stream=1000 + i,
        )
        probe = server.probe(plan, index=i, slo=spec.slo)
        records.append(probe.record)
        seconds += probe.seconds
    counts = capacity.probe_counts(records, spec.slo)[args.bound]
    fit = capacity.fit_constraint(args.bound, counts)
    return (
        fit.capacity_rps,
        fit.ci_rps,
        fit.method,
        seconds,
        list(counts),
    )


def _line(label: str, outcomes: list[Outcome], truth: float) -> str:
    errors = np.array([(o[0] / truth - 1) * 100 for o in outcomes if o[0] is not None])
    bounded = [o for o in outcomes if o[1] is not None]
    hold = sum(1 for o in bounded if o[1] is not None and o[1][0] <= truth <= o[1][1])
    if errors.size == 0:
        return f"{label}: no estimate in {len(outcomes)} trials"
    return (
        f"{label}: {errors.size} of {len(outcomes)} with an estimate; median |error|"
        f" {np.median(np.abs(errors)):.2f} %, mean {errors.mean():+.2f} %, median"
        f" {np.median(errors):+.2f} %, sd {errors.std(ddof=1) if errors.size > 1 else 0:.2f} %;"
        f" {len(bounded)} bounded, {hold} holding the truth; median probe-s"
        f" {statistics.median(o[3] for o in outcomes):.0f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["adaptive", "fixed"])
    ap.add_argument("--spec", default="specs/demo-sim.spec.yaml")
    ap.add_argument(
        "--truth", type=float, default=11.036, help="req/s (the demo's, pooled over 60 seeds)"
    )
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--budget", type=float, help="adaptive: sweep.budget_s")
    ap.add_argument("--precision", type=float, help="adaptive: sweep.precision_pct")
    ap.add_argument("--max-refine", type=int, help="adaptive: MAX_REFINE")
    ap.add_argument("--max-step-ln", type=float, help="adaptive: the widest refinement step")
    ap.add_argument("--no-pairs", action="store_true", help="adaptive: sweep.stream_pairs off")
    ap.add_argument("--no-ramp", action="store_true", help="adaptive: sweep.ramp off")
    ap.add_argument("--neighbourhood", type=float, help="capacity.NEIGHBOURHOOD_LN")
    ap.add_argument("--rates", default="10.4,11.6", help="fixed: req/s, comma-separated")
    ap.add_argument("--per-rate", type=int, default=5, help="fixed: windows per rate")
    ap.add_argument("--window", type=float, default=30.0, help="fixed: window, s")
    ap.add_argument("--bound", choices=["ttft", "tpot"], default="tpot", help="fixed: the bound")
    args = ap.parse_args()
    jobs = [(args, 100 + t) for t in range(args.trials)]
    worker = adaptive_trial if args.mode == "adaptive" else fixed_trial
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        outcomes = list(pool.map(worker, jobs))
    knobs = {
        k: v
        for k, v in vars(args).items()
        if k not in ("mode", "spec", "truth", "trials", "jobs") and v not in (None, False)
    }
    if args.mode == "adaptive":
        knobs = {
            k: v for k, v in knobs.items() if k not in ("rates", "per_rate", "window", "bound")
        }
    print(_line(f"{args.mode} {knobs}", outcomes, args.truth))
    if args.mode == "fixed":
        methods = Counter(o[2] for o in outcomes)
        print(f"  methods: {dict(methods)}")
        fitted = [o for o in outcomes if o[2] == "logistic"]
        print(_line("  logistic fits only", fitted, args.truth))
        pooled = [
            dataclasses.replace(c, index=i) for i, c in enumerate(c for o in outcomes for c in o[4])
        ]
        fit = capacity.fit_constraint(args.bound, pooled)
        print(f"  every trial's probes pooled: {fit.capacity_rps} req/s, 95 % {fit.ci_rps}")


if __name__ == "__main__":
    main()
