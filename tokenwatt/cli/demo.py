"""``tokenwatt demo``: a comparison on the simulator, a report and the site, in minutes."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from tokenwatt.cli._common import err_console, escape, out_console
from tokenwatt.cli.measure import LogProgress, TerminalProgress, run_until_signal
from tokenwatt.demo import DemoPaths, build_site, demo_runs, run_demo
from tokenwatt.store import load_spec

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the sub-command."""
    p = sub.add_parser(
        "demo",
        help="run the whole pipeline on the embedded simulator and build the site",
        description="Baseline and tuned (quick mode) against the embedded simulator, a report"
        " into results/, and the site into public/. Run it from the repository root. Takes"
        " about 5 minutes; everything it makes is marked simulated.",
    )
    p.add_argument(
        "--no-site", action="store_true", help="skip 'mkdocs build' (runs and report only)"
    )
    p.add_argument(
        "--repeat",
        action="store_true",
        help="measure the baseline again after the candidate, to bound drift (the seed's three"
        " runs; about 3 minutes more)",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo and say where everything is."""
    paths = DemoPaths(root=Path.cwd())
    runs = demo_runs(repeat=args.repeat)
    paths.check(runs)
    slo = load_spec(paths.root / runs[0].spec).spec.slo
    err = err_console()
    if err.is_terminal:
        with TerminalProgress(slo, err) as progress:
            result, target = asyncio.run(run_until_signal(run_demo(paths, progress, runs=runs)))
    else:
        result, target = asyncio.run(
            run_until_signal(run_demo(paths, LogProgress(slo, err), runs=runs))
        )
    out = out_console()
    for demo in runs:
        out.print(f"run:    {escape((paths.runs_dir / (demo.label + '.json')).as_posix())}")
    out.print(f"result: {escape(str(target.relative_to(paths.root)))}")
    if result.verdict is not None:
        out.print(escape(result.verdict.text))
    if not args.no_site:
        index = build_site(paths)
        page = paths.root / paths.site_dir / "results" / result.id / "index.html"
        out.print(f"site:   {escape(str(index))}")
        out.print(f"page:   {escape(str(page))}")
        out.print("(open it in a browser, or: python3 -m http.server -d public)")
    return 0
