"""The SLO-capacity estimator and the verdict, measured against the simulator's ground truth.

Every trial is a whole sweep of a spec run in virtual time (``tokenwatt.plan.run_trial``: the
engine, probe protocol, record, capacity and verdict code of a real measurement, with no clock),
each with its own workload seed. Three measurements, each printing a Markdown row for
benchmarks/README.md:

``accuracy``  N trials of ``--spec``: median |capacity - truth| / truth (over the trials with an
              estimate; ``no_estimate`` counts the others), the share of 95 % intervals holding
              the truth, unbounded intervals, median probe-seconds.
``compare``   N paired trials of ``--spec`` (baseline) and ``--spec-b`` (candidate) with the same
              seeds (common random numbers, as a real comparison has): how often the verdict
              says better / worse / no difference / inconclusive, how often its interval holds
              the true change, the median MDE.
``self``      N pairs of trials of ``--spec`` against itself with different seeds: how often it
              is called better or worse (false alarms).
``warmup``    the share of requests over the binding bound at one rate after each warm-up in
              ``--warmups``, pooled over ``--trials`` seeds: whether the spec's warm-up reaches
              steady state.
``ramp-warmup`` chains of ``--chain`` probes alternating between ``--rates``, each ramped from
              the last (``sweep.ramp``) with no warm-up, over ``--trials`` seeds: the share of
              requests over the binding bound in a window of the spec's length after each
              warm-up in ``--warmups``, for the first probe (from idle) and the ramped ones
              apart: how short a ramped probe's warm-up may be (``sweep.ramp_warmup_s``).
``seeds``     each of ``--trials`` truth seeds bisected alone (``true_capacity`` with one seed,
              to 0.5 %, from ``--bracket``; cached): how far apart the seeds' own boundaries
              lie, and the central 95 % of the medians of any 5 of them (how well the truth is
              known).

The truth (``tokenwatt.plan.true_capacity``: bisection, the p99 of five seeds' 1,200 s windows
pooled; until its version 3 the median of their p99s) is computed once per spec and cached;
``--truth`` gives one measured before (``benchmarks/capacity_curve.py``'s brute force).

    .venv/bin/python benchmarks/capacity_trials.py accuracy --spec specs/demo-sim.spec.yaml \\
        --trials 20 --strategy bisect
    .venv/bin/python benchmarks/capacity_trials.py compare --spec specs/demo-sim.spec.yaml \\
        --spec-b specs/demo-sim-tuned.spec.yaml --trials 20 --strategy adaptive --budget 600
    .venv/bin/python benchmarks/capacity_trials.py self --spec specs/demo-sim.spec.yaml --trials 20
    .venv/bin/python benchmarks/capacity_trials.py warmup --spec specs/demo-sim.spec.yaml \
        --rate 11 --warmups 10,30,60,120 --trials 40
    .venv/bin/python benchmarks/capacity_trials.py ramp-warmup --spec specs/demo-sim.spec.yaml \
        --rates 10.45,11.6 --warmups 0,5,10,30 --trials 800 --jobs 2
    # --sim-b 'bandwidth_efficiency=0.76': the candidate is the baseline spec with that change
    # --sweep-b 'start_rps=9,growth=1.4': the same engine swept another way (true change 0)
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import itertools
import json
import math
import multiprocessing
import pickle
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tokenwatt.metrics import TableColumn  # noqa: E402
from tokenwatt.plan import (  # noqa: E402
    TRUTH_SEED_BASE,
    TRUTH_SEEDS,
    PlanTrial,
    engine_config,
    run_trial,
    trial_verdict,
    true_capacity,
    with_seed,
    with_spec,
)
from tokenwatt.schema.spec import LoadedSpec, SimSpec  # noqa: E402
from tokenwatt.store import load_spec  # noqa: E402
from tokenwatt.sweep import ProbePlan  # noqa: E402


def _pairs(text: str) -> dict[str, float]:
    out = {}
    for item in text.split(","):
        key, value = item.split("=")
        out[key.strip()] = float(value)
    return out


def configured(
    path: str,
    args: argparse.Namespace,
    sim_over: str | None = None,
    sweep_over: str | None = None,
) -> LoadedSpec:
    loaded = load_spec(Path(path))
    spec = loaded.spec
    sweep: dict[str, object] = {}
    if args.strategy:
        sweep["strategy"] = args.strategy
    if args.budget is not None:
        sweep["budget_s"] = args.budget
    if args.precision is not None:
        sweep["precision_pct"] = args.precision
    if args.ramp or args.no_ramp:
        sweep["ramp"] = args.ramp
    if args.no_pairs:
        sweep["stream_pairs"] = False
    if args.ramp_warmup is not None:
        sweep["ramp_warmup_s"] = args.ramp_warmup
    if sweep_over:
        sweep.update(_pairs(sweep_over))
    if sweep:
        spec = spec.model_copy(update={"sweep": spec.sweep.model_copy(update=sweep)})
    durations = {
        name: value
        for name, value in (
            ("warmup_s", args.warmup),
            ("window_s", args.window),
            ("search_window_s", args.search_window),
        )
        if value is not None
    }
    if durations:
        measurement = spec.measurement.model_copy(update=durations)
        spec = spec.model_copy(update={"measurement": measurement})
    if sim_over:
        sim = (spec.engine.sim or SimSpec()).model_copy(update=_pairs(sim_over))
        spec = spec.model_copy(update={"engine": spec.engine.model_copy(update={"sim": sim})})
    return with_spec(loaded, spec)


def truth_of(loaded: LoadedSpec, trials: list[PlanTrial], given: float | None = None) -> float:
    if given is not None:
        print(f"truth {given:.4f} req/s (given with --truth, not bisected)", file=sys.stderr)
        return given
    estimates = [t.estimate.capacity_rps for t in trials if t.estimate.capacity_rps]
    centre = statistics.median(estimates) if estimates else loaded.spec.sweep.start_rps
    t0 = time.process_time()
    truth = true_capacity(loaded, engine_config(loaded), bracket_rps=(centre * 0.9, centre * 1.1))
    print(
        f"truth {truth.true_capacity_rps:.4f} req/s ({len(truth.steps)} bisection steps,"
        f" {time.process_time() - t0:.0f} s CPU or cached)",
        file=sys.stderr,
    )
    return truth.true_capacity_rps


def _one_trial(job: tuple[LoadedSpec, int, bool, Path | None]) -> PlanTrial:
    """One trial, from ``--cache`` when the same spec, seed and mode ran before."""
    loaded, seed, quick, cache = job
    path = None
    if cache is not None:
        key = hashlib.sha256(
            f"{loaded.spec.model_dump_json()}|{loaded.trace_file}|{seed}|{quick}".encode()
        ).hexdigest()[:20]
        path = cache / f"trial-{key}.pickle.gz"
        if path.exists():
            with gzip.open(path, "rb") as f:
                cached: PlanTrial = pickle.load(f)
            return cached
    t0 = time.process_time()
    trial = run_trial(loaded, engine_config(loaded), seed=seed, quick=quick)
    est = trial.estimate
    ci = tuple(round(v, 3) for v in est.ci_rps) if est.ci_rps else "unbounded"
    print(
        f"  seed {seed}: {est.capacity_rps and round(est.capacity_rps, 3)} {ci}"
        f" {len(trial.probes)} probes {trial.total_seconds:.0f} probe-s"
        f" ({time.process_time() - t0:.1f} s CPU)",
        file=sys.stderr,
        flush=True,
    )
    if path is not None:
        tmp = path.with_suffix(".tmp")
        with gzip.open(tmp, "wb") as f:
            pickle.dump(trial, f)
        tmp.replace(path)
    return trial


def trials_of(
    loaded: LoadedSpec,
    seeds: list[int],
    quick: bool,
    *,
    jobs: int = 1,
    cache: Path | None = None,
) -> list[PlanTrial]:
    """One trial per seed, in ``jobs`` processes, each kept in ``cache`` (a directory) if given."""
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
    work = [(loaded, seed, quick, cache) for seed in seeds]
    if jobs <= 1:
        return [_one_trial(job) for job in work]
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        return pool.map(_one_trial, work, chunksize=1)


def accuracy(args: argparse.Namespace) -> dict[str, object]:
    loaded = configured(args.spec, args)
    spec = loaded.spec
    seeds = list(range(args.seed, args.seed + args.trials))
    trials = trials_of(loaded, seeds, args.quick, jobs=args.jobs, cache=args.cache)
    truth = truth_of(loaded, trials, args.truth)
    errors = [
        abs(t.estimate.capacity_rps - truth) / truth * 100
        for t in trials
        if t.estimate.capacity_rps is not None
    ]
    signed = [
        (t.estimate.capacity_rps - truth) / truth * 100
        for t in trials
        if t.estimate.capacity_rps is not None
    ]
    bounded = [t for t in trials if t.estimate.ci_rps is not None]
    covered = sum(
        1 for t in bounded if (ci := t.estimate.ci_rps) is not None and ci[0] <= truth <= ci[1]
    )
    widths = [t.estimate.half_width_pct for t in bounded if t.estimate.half_width_pct is not None]
    return {
        "mode": "accuracy",
        "spec": args.spec,
        "strategy": spec.sweep.strategy,
        "budget_s": spec.sweep.budget_s,
        "quick": args.quick,
        "trials": len(trials),
        "truth_rps": truth,
        "no_estimate": sum(1 for t in trials if t.estimate.capacity_rps is None),
        "median_abs_error_pct": statistics.median(errors) if errors else None,
        "mean_error_pct": statistics.fmean(signed) if signed else None,
        "sd_error_pct": statistics.stdev(signed) if len(signed) > 1 else None,
        "ramped_probes": sum(1 for t in trials for p in t.probes if p.ramp is not None),
        "probes": sum(len(t.probes) for t in trials),
        "coverage_bounded": covered / len(bounded) if bounded else None,
        "coverage_all": (covered + len(trials) - len(bounded)) / len(trials),
        "unbounded": len(trials) - len(bounded),
        "median_half_width_pct": statistics.median(widths) if widths else None,
        "median_probe_seconds": statistics.median(t.total_seconds for t in trials),
        "median_probes": statistics.median(len(t.probes) for t in trials),
    }


def compare(args: argparse.Namespace) -> dict[str, object]:
    loaded_a = configured(args.spec, args)
    loaded_b = configured(args.spec_b or args.spec, args, args.sim_b, args.sweep_b)
    spec_a = loaded_a.spec
    seeds = list(range(args.seed, args.seed + args.trials))
    a = trials_of(loaded_a, seeds, args.quick, jobs=args.jobs, cache=args.cache)
    b = trials_of(loaded_b, seeds, args.quick, jobs=args.jobs, cache=args.cache)
    truth_a = truth_of(loaded_a, a, args.truth)
    truth_b = truth_of(loaded_b, b, args.truth_b)
    true_change = (truth_b / truth_a - 1) * 100
    outcomes: Counter[str] = Counter()
    covered = bounded = fixed = 0
    mdes: list[float] = []
    changes: list[float] = []
    # Trial i of each configuration has workload seed i: paired, as `tokenwatt report` pairs
    # runs whose workload sections are the same (unless --unpaired).
    paired = not args.unpaired and loaded_a.spec.workload == loaded_b.spec.workload
    for ta, tb in zip(a, b, strict=True):
        v = trial_verdict(ta, tb, spec_a.slo, paired=paired)
        outcomes[v.outcome] += 1
        fixed += "held fixed" in (v.ci_method or "")
        print(
            f"  seed {ta.seed}: {v.outcome} {v.change_pct and round(v.change_pct, 2)}"
            f" [{v.ci_low_pct and round(v.ci_low_pct, 1)},"
            f" {v.ci_high_pct and round(v.ci_high_pct, 1)}]"
            f" MDE {v.mde_pct and round(v.mde_pct, 1)}",
            file=sys.stderr,
        )
        if v.change_pct is not None:
            changes.append(v.change_pct)
        if v.mde_pct is not None:
            mdes.append(v.mde_pct)
        if v.ci_low_pct is not None and v.ci_high_pct is not None:
            bounded += 1
            covered += v.ci_low_pct <= true_change <= v.ci_high_pct
    return {
        "mode": "compare",
        "spec": args.spec,
        "spec_b": args.spec_b,
        "sim_b": args.sim_b,
        "sweep_b": args.sweep_b,
        "strategy": spec_a.sweep.strategy,
        "budget_s": spec_a.sweep.budget_s,
        "quick": args.quick,
        "trials": len(a),
        "truth_a_rps": truth_a,
        "truth_b_rps": truth_b,
        "true_change_pct": true_change,
        "paired": paired,
        "outcomes": dict(outcomes),
        "stream_effects": fixed,
        "median_change_pct": statistics.median(changes) if changes else None,
        "bounded": bounded,
        "bounded_missing_truth": bounded - covered,
        "coverage_bounded": covered / bounded if bounded else None,
        "coverage_all": (covered + len(a) - bounded) / len(a),
        "median_mde_pct": statistics.median(mdes) if mdes else None,
        "median_probe_seconds": statistics.median([t.total_seconds for t in a + b]),
    }


def self_compare(args: argparse.Namespace) -> dict[str, object]:
    loaded = configured(args.spec, args)
    spec = loaded.spec
    seeds = list(range(args.seed, args.seed + 2 * args.trials))
    trials = trials_of(loaded, seeds, args.quick, jobs=args.jobs, cache=args.cache)
    outcomes: Counter[str] = Counter()
    for ta, tb in zip(trials[0::2], trials[1::2], strict=True):
        # Other seeds: nothing to pair, as `tokenwatt report` does for such runs.
        outcomes[trial_verdict(ta, tb, spec.slo, paired=False).outcome] += 1
    called = outcomes["better"] + outcomes["worse"]
    return {
        "mode": "self",
        "spec": args.spec,
        "strategy": spec.sweep.strategy,
        "budget_s": spec.sweep.budget_s,
        "quick": args.quick,
        "pairs": args.trials,
        "outcomes": dict(outcomes),
        "called_different": called,
        "false_alarm_rate": called / args.trials,
    }


def warmup(args: argparse.Namespace) -> dict[str, object]:
    from tokenwatt.capacity import exceedance
    from tokenwatt.load.workload import build_workload
    from tokenwatt.sim.virtual import VirtualServer

    loaded = configured(args.spec, args)
    spec = loaded.spec
    config = engine_config(loaded)
    shares: dict[str, dict[str, float]] = {}
    bounds: dict[TableColumn, float] = {
        "ttft_ms": spec.slo.ttft_p99_ms,
        "tpot_ms": spec.slo.tpot_p99_ms,
    }
    for warm in (float(w) for w in args.warmups.split(",")):
        over = dict.fromkeys(bounds, 0)
        counted = dict.fromkeys(bounds, 0)
        for s in range(args.trials):
            seeded = with_seed(loaded, args.seed + s)
            workload = build_workload(
                seeded.spec, trace_file=seeded.trace_file, context_tokens=config.max_model_len
            )
            server = VirtualServer(
                config, workload, request_timeout_s=float(spec.measurement.request_timeout_s)
            )
            record = server.probe(
                ProbePlan(
                    phase="search",
                    rate_rps=args.rate,
                    warmup_s=warm,
                    window_s=float(spec.measurement.window_s),
                ),
                index=1,
                slo=spec.slo,
            ).record
            assert record.requests is not None
            for column, bound in bounds.items():
                n, k = exceedance(record.requests, column, bound)
                counted[column] += n
                over[column] += k
        shares[f"{warm:g}"] = {c: over[c] / counted[c] * 100 for c in bounds}
        print(
            f"  warm-up {warm:g} s: "
            + ", ".join(
                f"{over[c]} of {counted[c]} over the {c[:4].upper()} bound" for c in bounds
            ),
            file=sys.stderr,
        )
    return {
        "mode": "warmup",
        "spec": args.spec,
        "rate_rps": args.rate,
        "window_s": spec.measurement.window_s,
        "seeds": args.trials,
        "over_pct_by_warmup_s": shares,
    }


def _ramp_chain(job: tuple[argparse.Namespace, int]) -> dict[str, list[int]]:
    """One seed's chain of ramped probes: per (idle|ramped, rate, warm-up), [counted, over]."""
    from tokenwatt.capacity import exceedance
    from tokenwatt.load.workload import build_workload
    from tokenwatt.sim.virtual import VirtualServer
    from tokenwatt.sweep import may_ramp

    args, seed = job
    loaded = with_seed(configured(args.spec, args), seed)
    spec = loaded.spec
    config = engine_config(loaded)
    column: TableColumn = "tpot_ms" if args.bound == "tpot" else spec.slo.first_token_column
    bound = spec.slo.tpot_p99_ms if args.bound == "tpot" else spec.slo.first_token_p99_ms
    rates = [float(r) for r in args.rates.split(",")]
    warmups = [float(w) for w in args.warmups.split(",")]
    window = float(spec.measurement.window_s)
    workload = build_workload(
        spec, trace_file=loaded.trace_file, context_tokens=config.max_model_len
    )
    server = VirtualServer(
        config, workload, request_timeout_s=float(spec.measurement.request_timeout_s)
    )
    out: dict[str, list[int]] = {}
    previous = None
    for j in range(args.chain):
        rate = rates[(j + seed) % len(rates)]
        ramp = j > 0 and may_ramp(previous, spec.slo)
        plan = ProbePlan(
            phase="refine",
            rate_rps=rate,
            warmup_s=0.0,
            window_s=max(warmups) + window,
            ramp=ramp,
            stream=seed * args.chain + j,
        )
        previous = server.probe(plan, index=j, slo=spec.slo).record
        requests = previous.requests
        assert requests is not None
        start = "ramped" if ramp else "idle"
        for warm in warmups:
            inside = [i for i, t in enumerate(requests.t_sched_s) if warm <= t < warm + window]
            part = requests.model_copy(
                update={
                    name: [values[i] for i in inside]
                    for name, values in requests
                    if isinstance(values, list)
                }
            )
            n, k = exceedance(part, column, bound)
            key = f"{start}|{rate:g}|{warm:g}"
            counted = out.setdefault(key, [0, 0])
            counted[0] += n
            counted[1] += k
    return out


def ramp_warmup(args: argparse.Namespace) -> dict[str, object]:
    from concurrent.futures import ProcessPoolExecutor

    totals: dict[str, list[int]] = {}
    jobs = [(args, args.seed + s) for s in range(args.trials)]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for part in pool.map(_ramp_chain, jobs, chunksize=8):
            for key, (n, k) in part.items():
                total = totals.setdefault(key, [0, 0])
                total[0] += n
                total[1] += k
    shares = {
        key: {"counted": n, "over": k, "over_pct": 100 * k / max(1, n)}
        for key, (n, k) in sorted(totals.items())
    }
    for key, row in shares.items():
        print(
            f"  {key:<24} {row['over']:6d} of {row['counted']:8d} over: {row['over_pct']:.3f} %",
            file=sys.stderr,
        )
    return {
        "mode": "ramp-warmup",
        "spec": args.spec,
        "rates": args.rates,
        "chain": args.chain,
        "seeds": args.trials,
        "by_start_rate_warmup": shares,
    }


def seed_boundaries(args: argparse.Namespace) -> dict[str, object]:
    """Each truth seed's own boundary, and how far a median of TRUTH_SEEDS of them moves.

    The truth judges a rate by the median over its seeds of one window's p99s; where each seed's
    p99 rises with the rate (common random numbers), that is the median of the seeds' own
    boundaries, so their spread says how well the truth itself is known.
    """
    loaded = load_spec(Path(args.spec))
    config = engine_config(loaded)
    lo, hi = (float(v) for v in args.bracket.split(","))
    boundaries = []
    for s in range(args.trials):
        seed = TRUTH_SEED_BASE + s
        truth = true_capacity(
            loaded, config, bracket_rps=(lo, hi), seeds=1, first_seed=seed, tolerance=0.005
        )
        boundaries.append(truth.true_capacity_rps)
        print(f"  seed {seed}: {boundaries[-1]:.3f} req/s", file=sys.stderr, flush=True)
    # Every median of TRUTH_SEEDS distinct seeds among those measured (the truth's own recipe).
    medians = (
        sorted(statistics.median(c) for c in itertools.combinations(boundaries, TRUTH_SEEDS))
        if len(boundaries) >= TRUTH_SEEDS
        else []
    )
    return {
        "mode": "seeds",
        "spec": args.spec,
        "boundaries_rps": [round(b, 4) for b in boundaries],
        "median_rps": statistics.median(boundaries),
        "min_rps": min(boundaries),
        "max_rps": max(boundaries),
        "median_of_5_range_rps": [
            medians[len(medians) * 25 // 1000],
            medians[-1 - len(medians) * 25 // 1000],
        ]
        if medians
        else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "mode", choices=["accuracy", "compare", "self", "warmup", "ramp-warmup", "seeds"]
    )
    ap.add_argument("--spec", required=True)
    ap.add_argument("--spec-b", help="compare: the candidate's spec (default: --spec)")
    ap.add_argument("--sim-b", help="compare: engine.sim changes for the candidate, k=v,...")
    ap.add_argument(
        "--sweep-b",
        help="compare: sweep changes for the candidate, k=v,... (start_rps=9,growth=1.4 with no"
        " other change: the same engine swept another way, a true change of 0)",
    )
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=100, help="first workload seed")
    ap.add_argument("--strategy", choices=["bisect", "adaptive"])
    ap.add_argument("--budget", type=float, help="sweep.budget_s (adaptive)")
    ap.add_argument("--precision", type=float, help="sweep.precision_pct (adaptive)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--warmup", type=float, help="measurement.warmup_s instead of the spec's")
    ap.add_argument("--ramp", action="store_true", help="sweep.ramp: probes ramp from the last")
    ap.add_argument("--no-ramp", action="store_true", help="sweep.ramp off (the spec may ramp)")
    ap.add_argument(
        "--ramp-warmup", type=float, help="sweep.ramp_warmup_s (both configurations), s"
    )
    ap.add_argument("--window", type=float, help="measurement.window_s instead of the spec's")
    ap.add_argument(
        "--search-window", type=float, help="measurement.search_window_s instead of the spec's"
    )
    ap.add_argument(
        "--no-pairs", action="store_true", help="sweep.stream_pairs off (adaptive: no pairs)"
    )
    ap.add_argument("--truth-b", type=float, help="compare: the candidate's truth, req/s")
    ap.add_argument(
        "--truth", type=float, help="the (baseline's) truth, req/s, measured before (no bisection)"
    )
    ap.add_argument(
        "--unpaired", action="store_true", help="compare: do not pair the runs on their streams"
    )
    ap.add_argument("--rate", type=float, default=11.0, help="warmup: the rate, req/s")
    ap.add_argument("--warmups", default="10,30,60,120", help="warmup: warm-ups to compare, s")
    ap.add_argument(
        "--rates", default="10.45,11.6", help="ramp-warmup: the rates the chain alternates, req/s"
    )
    ap.add_argument("--chain", type=int, default=4, help="ramp-warmup: probes per seed")
    ap.add_argument(
        "--bound", choices=["tpot", "ttft"], default="tpot", help="ramp-warmup: the bound counted"
    )
    ap.add_argument(
        "--jobs", type=int, default=2, help="accuracy, compare, self, ramp-warmup: processes"
    )
    ap.add_argument(
        "--cache",
        type=Path,
        help="accuracy, compare, self: keep each trial here, keyed by its spec, seed and mode, and"
        " reuse it (a comparison's baseline runs once for several candidates; one directory per"
        " version of the code)",
    )
    ap.add_argument(
        "--bracket", default="7.5,11.5", help="seeds: where each seed's bisection starts, req/s"
    )
    args = ap.parse_args()
    t0 = time.perf_counter()
    runner = {
        "accuracy": accuracy,
        "compare": compare,
        "self": self_compare,
        "warmup": warmup,
        "ramp-warmup": ramp_warmup,
        "seeds": seed_boundaries,
    }[args.mode]
    result = runner(args)
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    print(
        json.dumps(result, default=lambda v: None if isinstance(v, float) and math.isnan(v) else v)
    )


if __name__ == "__main__":
    main()
