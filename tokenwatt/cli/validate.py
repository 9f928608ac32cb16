"""``tokenwatt validate FILE...``: check files; ``--publish`` also applies the policy."""

from __future__ import annotations

import argparse
from pathlib import Path

from tokenwatt import policy, store
from tokenwatt.cli._common import err_console, escape, out_console
from tokenwatt.errors import InputError, PolicyError
from tokenwatt.measure import check_spec_inputs, prefix_reuse
from tokenwatt.schema.result import ResultFile
from tokenwatt.schema.run import RunFile
from tokenwatt.schema.spec import Spec

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the sub-command."""
    p = sub.add_parser(
        "validate",
        help="check spec (*.yaml), run and result (*.json) files",
        description="Check that each file loads and makes sense. Exit 0 if all do, 2 if any"
        " does not; with --publish, 1 if any valid file breaks the publishing policy.",
    )
    p.add_argument("files", nargs="+", type=Path, metavar="FILE")
    p.add_argument(
        "--publish",
        action="store_true",
        help="also apply the publishing policy (window, warm-up, repeats, accuracy questions)",
    )
    p.set_defaults(handler=run)


def _violations(kind: str, model: object) -> list[policy.Violation]:
    if isinstance(model, ResultFile):
        return policy.check_result(model)
    if isinstance(model, RunFile):
        return policy.check_run(model)
    if isinstance(model, Spec):
        return policy.check_spec(model)
    raise AssertionError(kind)  # pragma: no cover - load_any returns one of the three


def run(args: argparse.Namespace) -> int:
    """Validate each file; report every problem, not just the first file's."""
    out, err = out_console(), err_console()
    invalid = unpublishable = 0
    for path in args.files:
        try:
            kind, model = store.load_any(path)
            reuse = None
            if kind == "spec":
                loaded = store.load_spec(path)
                reuse = prefix_reuse(check_spec_inputs(loaded), loaded.spec)
        except InputError as exc:
            invalid += 1
            err.print(f"[red]invalid[/red] {escape(str(exc))}")
            continue
        if not args.publish:
            out.print(f"[green]ok[/green] {escape(str(path))} ({kind})")
            if reuse is not None:
                out.print(
                    "  shared prefixes: expected prefix-cache hit rate"
                    f" {reuse.expected_hit_rate_pct:.1f} % at {reuse.block_tokens}-token blocks"
                    f" ({escape(reuse.block_source)}; a run reads the engine's own block size)"
                )
            continue
        broken = _violations(kind, model)
        if not broken:
            out.print(f"[green]publishable[/green] {escape(str(path))} ({kind})")
            continue
        unpublishable += 1
        err.print(f"[yellow]not publishable[/yellow] {escape(str(path))} ({kind}):")
        for violation in broken:
            err.print(f"  - {escape(str(violation))}")
    if invalid:
        return InputError.exit_code
    if unpublishable:
        return PolicyError.exit_code
    return 0
