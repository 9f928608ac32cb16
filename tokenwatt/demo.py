"""The demo: a comparison on the embedded simulator, a report and the site, in minutes.

Baseline, then tuned, each in quick mode against the simulator that ``measure`` starts and
stops itself; then ``report`` and ``mkdocs build``. With ``repeat``, the baseline again
afterwards, to bound drift: the seed's three runs (about 3 minutes more). Everything it makes is
marked simulated and quick: never publishable.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tokenwatt import store
from tokenwatt.compare import FLEET_CARDS
from tokenwatt.errors import InputError, TokenwattError
from tokenwatt.measure import MeasureOptions, Progress, measure
from tokenwatt.report import LoadedRun, build_result, quote_arg, report_command
from tokenwatt.schema.base import Role
from tokenwatt.schema.result import ResultFile

__all__ = [
    "DEMO_REPEAT",
    "DEMO_RUNS",
    "DEMO_TITLE",
    "DemoPaths",
    "DemoRun",
    "build_site",
    "demo_runs",
    "run_demo",
]

logger = logging.getLogger(__name__)

DEMO_TITLE = "Demo: tuned vs default kernels, Qwen3-8B on a simulated L40S"


@dataclass(frozen=True)
class DemoRun:
    """One of the demo's three runs."""

    spec: str
    label: str
    role: Role
    description: str


DEMO_RUNS: tuple[DemoRun, ...] = (
    DemoRun("specs/demo-sim.spec.yaml", "demo-default", "baseline", "default kernels"),
    DemoRun("specs/demo-sim-tuned.spec.yaml", "demo-tuned", "tuned", "tuned kernels"),
)
DEMO_REPEAT = DemoRun(
    "specs/demo-sim.spec.yaml", "demo-default-2", "other", "default kernels (repeat)"
)
"""The baseline again, after the candidate (``tokenwatt demo --repeat``): the drift bound."""


def demo_runs(*, repeat: bool) -> tuple[DemoRun, ...]:
    """The demo's runs in order: baseline, tuned, and with ``repeat`` the baseline again."""
    return (*DEMO_RUNS, DEMO_REPEAT) if repeat else DEMO_RUNS


@dataclass(frozen=True)
class DemoPaths:
    """Where the demo reads and writes (relative to the repository root)."""

    root: Path
    runs_dir: Path = Path("runs/demo")
    results_dir: Path = Path("results")
    site_dir: Path = Path("public")
    result_id: str = "demo-sim-tuned-vs-default-kernels"

    def check(self, runs: Sequence[DemoRun] = DEMO_RUNS) -> None:
        """The demo needs the repository's specs and site configuration.

        Raises:
            InputError: naming what is missing and where to run the demo from.
        """
        needed = [Path(r.spec) for r in runs] + [Path("mkdocs.yml")]
        missing = [str(p) for p in needed if not (self.root / p).is_file()]
        if missing:
            raise InputError(
                f"{self.root}: not a tokenwatt checkout ({', '.join(missing)} missing);"
                " run 'tokenwatt demo' from the repository root"
            )


def _command(run: DemoRun, out: Path) -> str:
    return (
        f"tokenwatt run --spec {run.spec} --label {quote_arg(run.label)} --role {run.role}"
        f" --out {out.as_posix()} --description {quote_arg(run.description)} --quick"
    )


async def run_demo(
    paths: DemoPaths, progress: Progress, *, runs: Sequence[DemoRun] = DEMO_RUNS
) -> tuple[ResultFile, Path]:
    """Measure the runs (baseline, tuned, and the baseline again if asked), write the report.

    Returns:
        The result and the path it was written to.
    """
    paths.check(runs)
    loaded: list[LoadedRun] = []
    for number, demo in enumerate(runs, start=1):
        out = paths.runs_dir / f"{demo.label}.json"
        progress.phase(f"run {number}/{len(runs)}", f"{demo.description} ({demo.role})")
        spec_path = paths.root / demo.spec
        run = await measure(
            MeasureOptions(
                spec=store.load_spec(spec_path),
                spec_arg=demo.spec,
                label=demo.label,
                role=demo.role,
                out=paths.root / out,
                command=_command(demo, out),
                description=demo.description,
                quick=True,
                force=True,  # the demo's own run files, made again on every demo
            ),
            progress,
        )
        loaded.append(LoadedRun(out.as_posix(), run))
    progress.phase("report", DEMO_TITLE)
    target = paths.results_dir / f"{paths.result_id}.json"
    result = build_result(
        loaded,
        title=DEMO_TITLE,
        result_id=paths.result_id,
        report_command=report_command(
            [r.path for r in loaded],
            title=DEMO_TITLE,
            result_id=paths.result_id,
            out=None,
            allow_mismatch=False,
            fleet_cards=FLEET_CARDS,
        ),
    )
    store.save_result(result, paths.root / target)
    return result, paths.root / target


def build_site(paths: DemoPaths) -> Path:
    """``mkdocs build --strict`` of the repository's site; returns the index page.

    Raises:
        TokenwattError: with mkdocs' own message when the build fails.
    """
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--quiet",
            "--site-dir",
            str(paths.site_dir),
        ],
        cwd=paths.root,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise TokenwattError(f"mkdocs build failed:\n{done.stderr[-3000:]}")
    return paths.root / paths.site_dir / "index.html"
