"""GPU time is money: probe-seconds of the seed's sweep protocol and of the early stop.

Runs ``tokenwatt measure`` (in-process, accuracy skipped) on one spec and workload seed twice per
round, each against its own freshly started simulator: once with ``sweep.early_stop: false``
(the seed's protocol) and once with ``true``, alternating which goes first. Prints per run the
probes (rate, verdict, seconds), the probe-seconds (total and searching), the bracket the search
ended with (last pass, first fail above it), the confirmed rate and the wall time; then a
Markdown table for benchmarks/README.md.

    .venv/bin/python benchmarks/sweep_cost.py                  # tests/data/capacity-sim.spec.yaml
    .venv/bin/python benchmarks/sweep_cost.py --spec specs/sim-qwen3-30b-a3b-fp8.spec.yaml --quick
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tokenwatt.measure import MeasureOptions, measure
from tokenwatt.schema.run import ProbeRecord, RunFile
from tokenwatt.store import load_spec, resolve_spec_path
from tokenwatt.sweep import ProbePlan

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SPEC = "tests/data/capacity-sim.spec.yaml"


@dataclass
class Timing:
    """A silent progress display that keeps each probe's wall time."""

    seconds: list[float] = field(default_factory=list)
    _t0: float = 0.0

    def phase(self, name: str, detail: str = "") -> None:
        pass

    def accuracy(self, done: int, total: int) -> None:
        pass

    def probe_started(self, plan: ProbePlan, index: int, workers: int) -> None:
        self._t0 = time.monotonic()

    def probe_finished(self, record: ProbeRecord) -> None:
        self.seconds.append(time.monotonic() - self._t0)


@dataclass
class Outcome:
    early_stop: bool
    run: RunFile
    probe_s: list[float]
    wall_s: float

    @property
    def bracket(self) -> tuple[float | None, float | None]:
        search = [p for p in self.run.probes if p.phase in ("search", "bisect", "rates")]
        passed = [p.rate_rps for p in search if p.slo_pass]
        lo = max(passed) if passed else None
        above = [p.rate_rps for p in search if not p.slo_pass and (lo is None or p.rate_rps > lo)]
        return lo, (min(above) if above else None)


def _verdict(p: ProbeRecord) -> str:
    if p.slo_pass:
        return "pass"
    if p.early_stop is not None:
        return "FAIL (stopped early)"
    return "FAIL (client-bound)" if p.client_bound else "FAIL"


def run_once(spec_arg: str, *, early_stop: bool, quick: bool, out_dir: Path) -> Outcome:
    loaded = load_spec(resolve_spec_path(spec_arg))
    spec = loaded.spec.model_copy(
        update={"sweep": loaded.spec.sweep.model_copy(update={"early_stop": early_stop})}
    )
    label = "early-stop" if early_stop else "seed-protocol"
    timing = Timing()
    opts = MeasureOptions(
        spec=loaded.model_copy(update={"spec": spec}),
        spec_arg=spec_arg,
        label=label,
        role="baseline",
        out=out_dir / f"{label}.json",
        command=f"benchmarks/sweep_cost.py --spec {spec_arg}",
        quick=quick,
        no_accuracy=True,
    )
    t0 = time.monotonic()
    run = asyncio.run(measure(opts, timing))
    return Outcome(early_stop, run, timing.seconds, time.monotonic() - t0)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def report(o: Outcome) -> None:
    assert o.run.outcome is not None
    name = "early stop" if o.early_stop else "seed protocol"
    print(f"\n{name}: {len(o.run.probes)} probes, wall {o.wall_s:.1f} s")
    for p, s in zip(o.run.probes, o.probe_s, strict=True):
        print(f"  {p.index:2d} {p.phase:8s} {p.rate_rps:8.3f} req/s  {s:6.1f} s  {_verdict(p)}")
    lo, hi = o.bracket
    out = o.run.outcome
    print(
        f"  probe-seconds {out.probe_seconds:.1f} (searching {out.search_probe_seconds:.1f});"
        f" bracket [{_rate(lo)}, {_rate(hi)}]; confirmed {_rate(out.confirmed_rate_rps)}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", default=DEFAULT_SPEC)
    ap.add_argument("--quick", action="store_true", help="measure --quick")
    ap.add_argument("--rounds", type=int, default=1, help="pairs of runs (order alternates)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for early in (False, True) if r % 2 == 0 else (True, False):
                o = run_once(args.spec, early_stop=early, quick=args.quick, out_dir=Path(tmp))
                report(o)
                outcomes.append(o)
    print("\n| protocol | probes | probe-s (search) | bracket (req/s) | confirmed | wall s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for o in outcomes:
        assert o.run.outcome is not None
        lo, hi = o.bracket
        stopped = sum(p.early_stop is not None for p in o.run.probes)
        name = f"early stop ({stopped} stopped)" if o.early_stop else "seed protocol"
        out = o.run.outcome
        print(
            f"| {name} | {len(o.run.probes)} | {out.probe_seconds:.0f}"
            f" ({out.search_probe_seconds:.0f}) | {_rate(lo)} - {_rate(hi)} |"
            f" {_rate(out.confirmed_rate_rps)} | {o.wall_s:.0f} |"
        )


if __name__ == "__main__":
    main()
