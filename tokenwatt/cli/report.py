"""``tokenwatt report RUN...``: combine run files into one result (results/<id>.json)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tokenwatt import policy, store
from tokenwatt.cli._common import err_console, escape, out_console, result_id_arg, text_arg
from tokenwatt.compare import FLEET_CARDS
from tokenwatt.errors import ResultError
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
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="run files (one baseline, <= 1 tuned)")
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
    command = report_command(
        args.runs,
        title=args.title,
        result_id=args.result_id,
        out=args.out,
        allow_mismatch=args.allow_mismatch,
        fleet_cards=args.fleet_cards,
    )
    result = build_result(
        loaded,
        title=args.title,
        report_command=command,
        result_id=args.result_id,
        allow_mismatch=args.allow_mismatch,
        fleet_cards=args.fleet_cards,
    )
    out = Path(args.out) if args.out else Path("results") / f"{result.id}.json"
    store.check_output(out, kind="result", force=args.force)
    store.save_result(result, out)
    con, err = out_console(), err_console()
    con.print(f"wrote {escape(str(out))} (status: {result.status})")
    if result.verdict is not None:
        con.print(escape(result.verdict.text))
    for violation in policy.check_result(result):
        err.print(f"[yellow]not publishable[/yellow]: {escape(str(violation))}")
    if result.mismatches:
        for mismatch in result.mismatches:
            err.print(f"[yellow]mismatch accepted[/yellow]: {escape(mismatch)}")
    sys.stdout.flush()
    return 0
