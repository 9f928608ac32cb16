"""``tokenwatt export FILE --format csv|jsonl|parquet --out DIR``: tables for notebooks."""

from __future__ import annotations

import argparse
from pathlib import Path

from tokenwatt import export, store
from tokenwatt.cli._common import escape, out_console
from tokenwatt.errors import InputError
from tokenwatt.schema.result import ResultFile
from tokenwatt.schema.run import RunFile

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the sub-command."""
    p = sub.add_parser(
        "export",
        help="write a run's or result's evidence as tables (csv, jsonl, parquet)",
        description="One table per kind of evidence, units in the column names. A run file"
        " gives probes, requests (timings, tokens, status of every window request),"
        " power_samples, power_gaps, engine_samples and accuracy_items; a result file gives"
        " configs, probes and power_trace. Every table is written, an empty one with its"
        " header only.",
        epilog="parquet needs pyarrow: pip install 'tokenwatt[parquet]'. Exit status 2 (nothing"
        " written) for a file that is not a run or result, a table file that exists (without"
        " --force), or parquet without pyarrow.",
    )
    p.add_argument("file", type=Path, metavar="RUN|RESULT", help="a run or result file")
    p.add_argument("--format", dest="fmt", choices=export.FORMATS, default="csv")
    p.add_argument("--out", type=Path, required=True, help="folder to write the tables into")
    p.add_argument("--force", action="store_true", help="replace table files that exist")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Load the file, build its tables, write them."""
    export.require_format(args.fmt)  # before reading what may be a large file
    kind, model = store.load_any(args.file)
    if isinstance(model, RunFile):
        tables = export.run_tables(model)
    elif isinstance(model, ResultFile):
        tables = export.result_tables(model)
    else:
        raise InputError(f"{args.file}: is a {kind} file; export reads run and result files")
    paths = export.write_tables(tables, args.out, args.fmt, force=args.force)
    con = out_console()
    for table, path in zip(tables, paths, strict=True):
        con.print(f"wrote {escape(str(path))}: {table.rows} rows, {len(table.columns)} columns")
    return 0
