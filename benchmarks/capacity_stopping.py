"""Stopping on precision: one run's interval against the truth, stopped or not.

Runs ``--trials`` adaptive sweeps of ``--spec`` in virtual time (workload seeds 100, 101, ...,
or from ``--first-seed``) at ``--budget`` probe-seconds with the precision target out of reach
(``precision_pct`` 0.01, so each spends its whole budget), keeps every run's probes (``--cache``,
one gzip JSON per seed), then replays each run after every stream pair, as the sweep saw it, and
reports against ``--truth`` (req/s; for the demo, ``benchmarks/capacity_curve.py``'s pooled
crossing):

- **budget**: the run cut where a smaller budget (``--cuts``) would have ended its refinement;
- **half-width**: stopped at the first pair whose interval's half-width is within
  ``--precision`` %, and whose dispersion rests on at least each of ``--min-dofs`` degrees of
  freedom (0: the rule before 2026-12-04; ``adaptive.PRECISION_MIN_DOF``: the rule since).

A sweep's decisions up to a stop do not depend on its budget or precision target, so each replay
is exactly what that sweep would have estimated before its confirmation; the confirmation is left
out (where it goes depends on the stop). ``capacity_designs.py adaptive`` measures sweeps whole.

    .venv/bin/python benchmarks/capacity_stopping.py --trials 120 --budget 4800
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import tokenwatt.capacity as capacity  # noqa: E402
from tokenwatt.adaptive import PRECISION_MIN_DOF  # noqa: E402
from tokenwatt.plan import engine_config, run_trial, with_sweep  # noqa: E402
from tokenwatt.schema.run import ProbeRecord  # noqa: E402
from tokenwatt.schema.spec import LoadedSpec, SloSpec  # noqa: E402
from tokenwatt.store import load_spec  # noqa: E402


@dataclass(frozen=True)
class Look:
    """The run's estimate after one stream pair."""

    spent_s: float
    capacity_rps: float | None
    ci_rps: tuple[float, float] | None
    half_width_pct: float | None
    method: str
    dof: int | None


def _loaded(spec_path: str, budget_s: float, ramp_warmup_s: float | None = None) -> LoadedSpec:
    fields: dict[str, object] = {"budget_s": budget_s, "precision_pct": 0.01}
    if ramp_warmup_s is not None:
        fields["ramp_warmup_s"] = ramp_warmup_s
    return with_sweep(load_spec(Path(spec_path)), **fields)


def _run(job: tuple[str, float, float | None, int, Path]) -> Path:
    """One whole-budget sweep, its probes and probe-seconds cached."""
    spec_path, budget_s, ramp_warmup_s, seed, cache = job
    path = cache / f"{Path(spec_path).stem}-{budget_s:g}-{seed}.json.gz"
    if path.exists():
        return path
    loaded = _loaded(spec_path, budget_s, ramp_warmup_s)
    trial = run_trial(loaded, engine_config(loaded), seed=seed)
    data = {
        "seconds": trial.probe_seconds,
        "probes": [p.model_dump(mode="json") for p in trial.probes],
    }
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wt") as f:
        json.dump(data, f)
    tmp.replace(path)
    return path


def _looks(job: tuple[Path, SloSpec]) -> list[Look]:
    """The estimate after every stream pair of one cached run (confirmation left out)."""
    path, slo = job
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    probes = [ProbeRecord.model_validate(p) for p in data["probes"]]
    looks: list[Look] = []
    spent = 0.0
    refines = 0
    for i, (probe, seconds) in enumerate(zip(probes, data["seconds"], strict=True)):
        if probe.phase == "confirm":
            break
        spent += seconds
        if probe.phase != "refine":
            continue
        refines += 1
        if refines % 2:
            continue
        est = capacity.estimate_capacity(probes[: i + 1], slo)
        looks.append(
            Look(spent, est.capacity_rps, est.ci_rps, est.half_width_pct, est.method, est.dof)
        )
    return looks


def _budget(looks: list[Look], budget_s: float, reserve_s: float) -> Look:
    """Where a sweep with this budget ends its refinement: the last pair within it."""
    within = [look for look in looks if look.spent_s <= budget_s - reserve_s]
    return within[-1] if within else looks[0]


def _stop(
    looks: list[Look], budget_s: float, reserve_s: float, precision_pct: float, min_dof: int
) -> Look:
    """Where a sweep that stops on precision ends its refinement (or its budget does)."""
    for look in looks:
        if look.spent_s > budget_s - reserve_s:
            break
        if (
            look.method == "logistic"
            and look.half_width_pct is not None
            and look.half_width_pct <= precision_pct
            and (look.dof or 0) >= min_dof
        ):
            return look
    return _budget(looks, budget_s, reserve_s)


def _line(label: str, picks: list[Look], truth: float) -> str:
    errors = np.array([(p.capacity_rps / truth - 1) * 100 for p in picks if p.capacity_rps])
    bounded = [p for p in picks if p.ci_rps is not None]
    hold = sum(1 for p in bounded if p.ci_rps is not None and p.ci_rps[0] <= truth <= p.ci_rps[1])
    widths = [p.half_width_pct for p in bounded if p.half_width_pct is not None]
    return (
        f"{label:<44} median |error| {np.median(np.abs(errors)):5.2f} %, mean"
        f" {errors.mean():+5.2f} %; bounded {len(bounded):3d} of {len(picks)}, holding the truth"
        f" {hold:3d} ({100 * hold / max(1, len(bounded)):3.0f} %), median half-width"
        f" {statistics.median(widths) if widths else float('nan'):4.1f} %; median probe-s"
        f" {statistics.median(p.spent_s for p in picks):5.0f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default="specs/demo-sim.spec.yaml")
    ap.add_argument(
        "--truth", type=float, default=11.036, help="req/s (the demo's, pooled over 60 seeds)"
    )
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--first-seed", type=int, default=100, help="workload seed of the first run")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--budget", type=float, default=4800.0, help="probe-s of every run")
    ap.add_argument("--cuts", default="600,1200,2400", help="smaller budgets to replay, probe-s")
    ap.add_argument("--precision", type=float, default=5.0, help="precision_pct to replay")
    ap.add_argument(
        "--min-dofs", default=f"0,{PRECISION_MIN_DOF}", help="stop rules to replay, comma-separated"
    )
    ap.add_argument(
        "--ramp-warmup",
        type=float,
        help="sweep.ramp_warmup_s for the sweeps (their cache is the same file names: give each"
        " setting its own --cache)",
    )
    ap.add_argument("--cache", type=Path, default=Path("/tmp/capacity_stopping"))
    args = ap.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    loaded = _loaded(args.spec, args.budget, args.ramp_warmup)
    slo = loaded.spec.slo
    m = loaded.spec.measurement
    reserve_s = m.repeats * (m.warmup_s + m.window_s)
    budgets = [float(c) for c in args.cuts.split(",") if c] + [args.budget]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        seeds = range(args.first_seed, args.first_seed + args.trials)
        jobs = [(args.spec, args.budget, args.ramp_warmup, seed, args.cache) for seed in seeds]
        paths = list(pool.map(_run, jobs))
        runs = list(pool.map(_looks, [(p, slo) for p in paths]))
    for budget in budgets:
        picks = [_budget(looks, budget, reserve_s) for looks in runs]
        print(_line(f"{budget:g} s, budget", picks, args.truth))
    for min_dof in (int(d) for d in args.min_dofs.split(",")):
        picks = [_stop(looks, args.budget, reserve_s, args.precision, min_dof) for looks in runs]
        label = f"{args.budget:g} s, half-width {args.precision:g} %, dof >= {min_dof}"
        print(_line(label, picks, args.truth))


if __name__ == "__main__":
    main()
