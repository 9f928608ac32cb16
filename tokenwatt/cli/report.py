"""``tokenwatt report RUN...``: combine run files into one result (results/<id>.json).

``--fail-on`` makes the verdict the exit status (:mod:`tokenwatt.gate`); ``--json`` prints the
verdict and figures as one JSON object on stdout, and every message on stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tokenwatt import gate, policy, store
from tokenwatt.cli._common import err_console, escape, out_console, result_id_arg, text_arg
from tokenwatt.compare import FLEET_CARDS
from tokenwatt.errors import ResultError
from tokenwatt.multiplicity import CORRECTIONS, FAMILY_ALPHA
from tokenwatt.report import LoadedRun, build_result, report_command

__all__ = ["register", "run"]


def _cards(value: str) -> int | None:
    if value.lower() == "none":
        return None
    cards = int(value)
    if cards < 1:
        raise argparse.ArgumentTypeError("must be at least 1, or 'none'")
    return cards


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the sub-command."""
    p = sub.add_parser(
        "report",
        help="combine run files into a result (results/<id>.json)",
        description="Recompute every figure from the run files, compare the configurations"
        " against the variance band and the accuracy gate, and write one result.",
        epilog=f"Exit status: 0 written (and the gate passed); 2 bad input, nothing written;"
        f" with --fail-on, after the result is written: {gate.EXIT_WORSE} the candidate is"
        f" worse, {gate.EXIT_GATE_FAILED} it fails the accuracy gate (both levels),"
        f" {gate.EXIT_INCONCLUSIVE} the verdict is inconclusive (--fail-on inconclusive only).",
    )
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="run files: one baseline, any number of candidates (tuned, each its own label),"
        " and the baseline's repeat (other)",
    )
    p.add_argument("--title", required=True, type=text_arg, help="title of the result")
    p.add_argument(
        "--id", dest="result_id", type=result_id_arg, help="result id (default: from the title)"
    )
    p.add_argument("--out", help="result file to write (default: results/<id>.json)")
    p.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="combine runs that differ in hardware, model, SLO or workload; the result records"
        " each difference",
    )
    p.add_argument(
        "--fleet-cards",
        type=_cards,
        default=FLEET_CARDS,
        help="project the per-card difference onto N cards ('none': no projection;"
        f" default {FLEET_CARDS})",
    )
    p.add_argument(
        "--force", action="store_true", help="replace an existing result file (only a result)"
    )
    p.add_argument(
        "--correction",
        choices=CORRECTIONS,
        default="holm",
        help="with several candidates: the multiple-comparison correction of their verdicts,"
        f" holding the family-wise error rate at {FAMILY_ALPHA:g} (default: holm)",
    )
    p.add_argument(
        "--fail-on",
        choices=gate.FAIL_ON_LEVELS,
        help="CI gate: exit non-zero when the verdict says so. 'worse': exit"
        f" {gate.EXIT_WORSE} if the candidate is worse, {gate.EXIT_GATE_FAILED} if it fails the"
        f" accuracy gate; 'inconclusive': those, and {gate.EXIT_INCONCLUSIVE} if the data cannot"
        " say. With several candidates, the most severe of their verdicts. The result is"
        " written either way",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the verdict and each config's figures as one JSON object on stdout"
        " (messages go to stderr)",
    )
    p.set_defaults(handler=run)


def _refuse_repeated_files(paths: list[str]) -> None:
    """The same run file named twice (by any path) would count as two configurations."""
    seen: dict[tuple[int, int], str] = {}
    for given in paths:
        try:
            info = Path(given).stat()
        except OSError:
            continue  # loading it says what is wrong
        key = (info.st_dev, info.st_ino)
        if key in seen:
            raise ResultError(
                f"{given}: the same run file as {seen[key]}; each run may be given once"
            )
        seen[key] = given


def run(args: argparse.Namespace) -> int:
    """Load the runs, build the result, write it atomically."""
    if args.out:
        store.check_output(Path(args.out), kind="result", force=args.force)
    _refuse_repeated_files(args.runs)
    loaded = [LoadedRun(path, store.load_run(Path(path))) for path in args.runs]
    if args.fail_on and not any(r.run.role == "tuned" for r in loaded):
        raise ResultError(
            f"--fail-on {args.fail_on}: no run has role 'tuned', so there is no verdict to gate"
            " on; give the candidate's run file"
        )
    command = report_command(
        args.runs,
        title=args.title,
        result_id=args.result_id,
        out=args.out,
        allow_mismatch=args.allow_mismatch,
        fleet_cards=args.fleet_cards,
        correction=args.correction,
    )
    result = build_result(
        loaded,
        title=args.title,
        report_command=command,
        result_id=args.result_id,
        allow_mismatch=args.allow_mismatch,
        fleet_cards=args.fleet_cards,
        correction=args.correction,
    )
    out = Path(args.out) if args.out else Path("results") / f"{result.id}.json"
    store.check_output(out, kind="result", force=args.force)
    store.save_result(result, out)
    err = err_console()
    # With --json, stdout carries the JSON object alone: what a person reads goes to stderr.
    con = err if args.json else out_console()
    con.print(f"wrote {escape(str(out))} (status: {result.status})")
    if result.verdict is not None:
        con.print(escape(result.verdict.text))
    for each in result.verdicts or []:
        con.print(escape(each.text))
    for violation in policy.check_result(result):
        err.print(f"[yellow]not publishable[/yellow]: {escape(str(violation))}")
    if result.mismatches:
        for mismatch in result.mismatches:
            err.print(f"[yellow]mismatch accepted[/yellow]: {escape(mismatch)}")
    summary = gate.summarize(result, result_file=str(out), fail_on=args.fail_on)
    if summary.exit_code:
        _, failing = gate.failing_verdict(gate.result_verdicts(result), args.fail_on)
        assert failing is not None  # a gate fails only on a verdict
        whose = f" for '{failing.candidate}'" if failing.candidate else ""
        err.print(
            f"[red]--fail-on {args.fail_on}[/red]: the verdict{whose} is {failing.outcome}"
            f" (exit {summary.exit_code})"
        )
    if args.json:
        sys.stdout.write(summary.model_dump_json() + "\n")
    sys.stdout.flush()
    return summary.exit_code
