"""``tokenwatt compare RESULT...``: results of one scenario side by side, by date.

The rows come from :mod:`tokenwatt.comparison_set`; this module only prints them, as a table on
stdout, or with ``--json`` as one JSON object (messages then go to stderr).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from tokenwatt import store
from tokenwatt.cli._common import err_console, escape, out_console
from tokenwatt.comparison_set import (
    ComparisonRow,
    ComparisonSet,
    LoadedResult,
    build_comparison_set,
)

__all__ = ["register", "run", "table"]

_DASH = "\u2014"
_MAX_PIPED_WIDTH = 400
_ROLE_WORDS = {"baseline": "(baseline)", "other": "(baseline repeat)"}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the sub-command."""
    p = sub.add_parser(
        "compare",
        help="results of the same hardware, model, SLO and workload side by side, by date",
        description="One row per configuration of each result, ordered by the date of its"
        " measurement: SLO capacity with its 95 %% interval, goodput, tokens per joule, MBU and"
        " the verdict its own report gave. The figures are the results' own; no verdict is"
        " drawn across results.",
        epilog="Exit status 2 (bad input): a file that is not a result, a result given twice,"
        " or results that differ in hardware, model, SLO, workload or simulation (each"
        " difference named; --allow-mismatch shows them anyway, marked).",
    )
    p.add_argument(
        "results",
        nargs="+",
        metavar="RESULT",
        help="result files; the first is the reference the others are checked against",
    )
    p.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="show results that differ from the first in hardware, model, SLO, workload or"
        " simulation; each of their rows is marked with what differs",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the comparison as one JSON object on stdout (messages go to stderr)",
    )
    p.set_defaults(handler=run)


def _number(value: float | None, digits: int) -> str:
    return _DASH if value is None else f"{value:,.{digits}f}"


def _capacity(row: ComparisonRow) -> str:
    if row.slo_capacity_rps is None:
        return _DASH
    text = f"{row.slo_capacity_rps:,.2f}"
    ci = row.slo_capacity_ci_rps
    if ci is None or len(ci) != 2:
        return f"{text} (not bounded)"
    return f"{text} ({ci[0]:,.2f}\u2013{ci[1]:,.2f})"


def _verdict(row: ComparisonRow) -> Text:
    """A candidate's outcome; a baseline or its repeat says what it is (it has no verdict)."""
    if row.verdict is not None:
        return Text(row.verdict.replace("_", " "))
    return Text(_ROLE_WORDS.get(row.key, _DASH), style="dim")


def table(comparison: ComparisonSet) -> Table:
    """The comparison as a rich table, units in the headers, mismatching rows marked."""
    marked = any(row.mismatched for row in comparison.rows)
    t = Table(title="Results side by side, by date", title_justify="left")
    t.add_column("date")
    t.add_column("result")
    t.add_column("config")
    t.add_column("engine")
    t.add_column("SLO capacity, req/s (95 % CI)", justify="right")
    t.add_column("goodput, tok/s", justify="right")
    t.add_column("tokens/J", justify="right")
    t.add_column("MBU, %", justify="right")
    t.add_column("verdict of its report")
    if marked:
        t.add_column("differs from the reference")
    rows = comparison.rows
    for i, row in enumerate(rows):
        cells = [
            Text(row.date.isoformat() if row.date else _DASH),
            Text(row.result_id),
            Text(row.label),
            Text(row.engine),
            Text(_capacity(row)),
            Text(_number(row.goodput_tok_s, 1)),
            Text(_number(row.tokens_per_joule, 3)),
            Text(_number(row.mbu_pct, 1)),
            _verdict(row),
        ]
        if marked:
            cells.append(Text("\u2260 " + ", ".join(row.mismatched) if row.mismatched else ""))
        last_of_result = i + 1 == len(rows) or rows[i + 1].result_file != row.result_file
        t.add_row(*cells, style="yellow" if row.mismatched else None, end_section=last_of_result)
    return t


def run(args: argparse.Namespace) -> int:
    """Load the results, check they compare, print them."""
    loaded = [LoadedResult(path, store.load_result(Path(path))) for path in args.results]
    comparison = build_comparison_set(loaded, allow_mismatch=args.allow_mismatch)
    err = err_console()
    for mismatch in comparison.mismatches:
        err.print(f"[yellow]mismatch accepted[/yellow]: {escape(mismatch)}")
    if args.json:
        sys.stdout.write(comparison.model_dump_json() + "\n")
    else:
        con = out_console()
        drawn = table(comparison)
        if not con.is_terminal:
            # Piped into a file or a pager: at its natural width, not wrapped at 80 columns.
            wide = con.options.update(max_width=_MAX_PIPED_WIDTH)
            con.width = max(con.width, Measurement.get(con, wide, drawn).maximum)
        con.print(drawn)
        for result in comparison.results:
            con.print(Text(f"{result.result_id}: {result.title} ({result.result_file})"))
    sys.stdout.flush()
    return 0
