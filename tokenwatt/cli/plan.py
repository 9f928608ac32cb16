"""``tokenwatt plan SPEC``: the spec's sweep in virtual time, to plan a rental.

Runs the spec's sweep ``--trials`` times against the embedded engine in virtual time (seconds of
CPU for what would be an hour of GPU) and prints per trial the capacity estimate, its interval
and the probe-seconds, then the medians: the capacity to expect, the GPU time a run costs, and
the smallest change a comparison of two such runs can detect. ``--json`` prints one object
instead (:class:`tokenwatt.plan.PlanSummary`).
"""

from __future__ import annotations

import argparse
import json
from typing import get_args

from rich.table import Table

from tokenwatt import store
from tokenwatt.cli._common import err_console, escape, out_console, progress_replaces_info_log
from tokenwatt.plan import TRUTH_SEEDS, PlanTrial, TruthStep, plan
from tokenwatt.schema.spec import SweepStrategy

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the sub-command."""
    p = sub.add_parser(
        "plan",
        help="run a spec's sweep in virtual time: capacity, probe-seconds, detectable change",
        description="Run the spec's sweep against the embedded engine in virtual time, once per"
        " trial (each with its own workload seed), and print the SLO capacity it would find,"
        " the probe-seconds (GPU time) it would cost, and the minimum detectable effect of a"
        " comparison. The spec needs engine.sim (what to simulate).",
    )
    p.add_argument("spec", help="spec file (a bare name is also looked up in specs/)")
    p.add_argument("--trials", type=int, default=10, help="virtual sweeps to run (default 10)")
    p.add_argument(
        "--strategy",
        choices=get_args(SweepStrategy),
        help="sweep strategy to plan (default: the spec's sweep.strategy)",
    )
    p.add_argument("--quick", action="store_true", help="plan a --quick run")
    p.add_argument(
        "--no-truth",
        action="store_true",
        help="skip the engine's ground truth (minutes of CPU the first time; then cached)",
    )
    p.add_argument(
        "--truth-seeds",
        type=int,
        default=TRUTH_SEEDS,
        metavar="N",
        help=f"workload seeds whose 1,200 s windows the truth pools at each rate (default"
        f" {TRUTH_SEEDS}: the demo's truth to about ±2 %%, a scenario whose tail is rare queue"
        " episodes to about ±6 %%; the CPU grows with N)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=run)


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "—" if value is None else format(value, spec)


def run(args: argparse.Namespace) -> int:
    """Plan, then print the trials and the summary."""
    spec_path = store.resolve_spec_path(args.spec)
    loaded = store.load_spec(spec_path)
    err = err_console()
    quiet = args.json
    progress_replaces_info_log(args)  # the trial and truth lines below

    def on_trial(trial: PlanTrial) -> None:
        if quiet:
            return
        est = trial.estimate
        ci = f"[{_fmt(est.ci_rps[0])}, {_fmt(est.ci_rps[1])}]" if est.ci_rps else "unbounded"
        err.print(
            f"trial seed {trial.seed}: capacity {_fmt(est.capacity_rps)} req/s {ci},"
            f" {len(trial.probes)} probes, {trial.total_seconds:,.0f} probe-seconds"
        )

    def on_truth(step: TruthStep) -> None:
        if not quiet:
            err.print(
                f"ground truth: {step.rate_rps:.4f} req/s {'passes' if step.passed else 'fails'}"
                f" ({step.ttft_over_pct:.3f} % of requests over the first-token bound,"
                f" {step.tpot_over_pct:.3f} % over TPOT's)"
            )

    summary = plan(
        loaded,
        trials=args.trials,
        strategy=args.strategy,
        quick=args.quick,
        truth=not args.no_truth,
        truth_seeds=args.truth_seeds,
        progress=on_trial,
        truth_progress=on_truth,
    )
    out = out_console()
    if args.json:
        out.print(json.dumps(summary.model_dump(mode="json")), markup=False)
        return 0
    table = Table(title=f"tokenwatt plan {escape(str(spec_path))} ({summary.strategy})")
    table.add_column("figure")
    table.add_column("median over trials", justify="right")
    ci = summary.capacity_ci_rps
    rows = [
        ("trials", str(summary.trials)),
        ("SLO capacity, req/s", _fmt(summary.capacity_rps)),
        ("95 % interval, req/s", f"{_fmt(ci[0])} – {_fmt(ci[1])}" if ci else "unbounded"),
        ("trials with an unbounded interval", str(summary.unbounded_intervals)),
        ("probe-seconds (GPU time)", f"{summary.probe_seconds:,.0f}"),
        ("  of which searching", f"{summary.search_probe_seconds:,.0f}"),
        ("probes", f"{summary.probes:g}"),
        ("minimum detectable effect, other seeds, %", _fmt(summary.mde_pct, ".1f")),
        ("minimum detectable effect, same seed (paired), %", _fmt(summary.paired_mde_pct, ".1f")),
        (
            "engine's true capacity, req/s"
            + (
                f" ({summary.truth_seeds} seed{'s' if summary.truth_seeds > 1 else ''} pooled)"
                if summary.truth_seeds
                else ""
            ),
            _fmt(summary.true_capacity_rps),
        ),
        ("median |error| vs truth, %", _fmt(summary.median_abs_error_pct, ".1f")),
        (
            "intervals holding the truth",
            "—" if summary.coverage is None else f"{summary.coverage:.0%}",
        ),
        ("load short of steady state as a window opens, %", _fmt(summary.shortfall_pct, ".1f")),
        ("warm-up that reaches 1 %, s", _fmt(summary.steady_warmup_s, ",.0f")),
    ]
    if summary.self_called_different is not None:
        rows.append(
            (
                "pairs of trials called different",
                f"{summary.self_called_different} of {summary.pairs}",
            )
        )
    for name, value in rows:
        table.add_row(name, value)
    out.print(table)
    return 0
