"""``tokenwatt suite gsm8k``: write an accuracy suite from the official GSM8K files."""

from __future__ import annotations

import argparse
from pathlib import Path

from tokenwatt.accuracy import import_gsm8k, write_suite
from tokenwatt.cli._common import escape, out_console

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the sub-command."""
    p = sub.add_parser("suite", help="write an accuracy suite (JSONL) from a public data set")
    kinds = p.add_subparsers(dest="suite_kind", metavar="KIND", required=True)
    g = kinds.add_parser(
        "gsm8k",
        help="N test questions + a train exemplar pool from GSM8K's test/train JSONL",
        description="Questions and exemplars are drawn with random.Random(seed): the same"
        " files and seed always give the same suite.",
    )
    g.add_argument("--test", type=Path, required=True, help="GSM8K test.jsonl")
    g.add_argument("--train", type=Path, required=True, help="GSM8K train.jsonl (exemplars)")
    g.add_argument("--count", type=int, default=200, help="test questions (default 200)")
    g.add_argument("--pool", type=int, default=64, help="train exemplars kept (default 64)")
    g.add_argument("--seed", type=int, default=0, help="seed of both draws (default 0)")
    g.add_argument("--out", type=Path, required=True, help="suite file to write")
    g.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Import and write the suite."""
    items = import_gsm8k(
        args.test, count=args.count, seed=args.seed, train=args.train, exemplar_pool=args.pool
    )
    write_suite(items, args.out)
    out_console().print(
        f"wrote {escape(str(args.out))}: {args.count} test questions, {args.pool} exemplars"
    )
    return 0
