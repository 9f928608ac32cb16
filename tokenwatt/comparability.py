"""Whether measurements may be compared: the hardware, model, SLO and workload they share.

One definition of each aspect serves both comparisons tokenwatt makes: the run files one
``tokenwatt report`` combines (:func:`run_differences`), and the result files ``tokenwatt compare``
puts side by side (:func:`result_differences`). A run knows its GPUs and measurement durations;
a result keeps what its page shows (the accelerator and count, the model in words) and its
baseline's spec, so the SLO, the workload section and the simulated flag are read the same way
from either. Results are not compared on their durations: a longer window makes a capacity
interval narrower, not a different quantity, and the interval says so.

The first item is the reference; every difference names both files and both values.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from tokenwatt.schema.result import ResultFile
from tokenwatt.schema.run import RunFile
from tokenwatt.schema.spec import Spec

__all__ = [
    "RESULT_ASPECTS",
    "RUN_ASPECTS",
    "Difference",
    "differences",
    "result_differences",
    "run_differences",
    "simulated_text",
    "slo_text",
    "workload_key",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Difference:
    """One way an item differs from the reference."""

    aspect: str
    reference: str
    other: str
    want: str
    got: str

    @property
    def text(self) -> str:
        """``SLO: a.json has p99 TTFT 2000 ms, ...; b.json has ...``."""
        return f"{self.aspect}: {self.reference} has {self.want}; {self.other} has {self.got}"


def slo_text(*, first_token: str, first_token_p99_ms: float, tpot_p99_ms: float) -> str:
    """The latency objective, as differences name it: ``p99 TTFT 2000 ms, p99 TPOT 50 ms``."""
    return f"p99 {first_token.upper()} {first_token_p99_ms:g} ms, p99 TPOT {tpot_p99_ms:g} ms"


def workload_key(spec: Spec) -> str:
    """The whole workload section (seed included), with defaults filled in."""
    return json.dumps(spec.workload.model_dump(mode="json"), sort_keys=True)


def simulated_text(simulated: bool) -> str:
    """A simulator's figures are never compared with real hardware's unawares."""
    return "simulated" if simulated else "real hardware"


def _run_hardware(run: RunFile) -> str:
    names = sorted(g.name for g in run.environment.gpus)
    if run.simulated and run.spec.engine.sim is not None:
        names = names or [f"sim:{run.spec.engine.sim.gpu}"]
    return f"{len(names)} x {', '.join(names) or 'unknown accelerator'}"


def _run_model(run: RunFile) -> str:
    return run.model_geometry_key or f"{run.spec.model.name} (vocab {run.spec.model.vocab_size})"


RUN_ASPECTS: Mapping[str, Callable[[RunFile], str]] = {
    "hardware": _run_hardware,
    "model": _run_model,
    "SLO": lambda r: slo_text(
        first_token=r.spec.slo.first_token,
        first_token_p99_ms=r.spec.slo.first_token_p99_ms,
        tpot_p99_ms=r.spec.slo.tpot_p99_ms,
    ),
    "workload": lambda r: workload_key(r.spec),
    "measurement durations": lambda r: (
        f"warm-up {r.effective.warmup_s:g} s, window {r.effective.window_s:g} s,"
        f" search window {r.effective.search_window_s:g} s, {r.effective.repeats} repeats"
    ),
    "simulated": lambda r: simulated_text(r.simulated),
}
"""What the runs of one report must share."""


def _result_simulated(result: ResultFile) -> bool:
    return bool(result.simulated) or any(
        c.measurement is not None and c.measurement.simulated for c in result.configs
    )


RESULT_ASPECTS: Mapping[str, Callable[[ResultFile], str]] = {
    "hardware": lambda r: f"{r.hardware.count} x {r.hardware.accelerator}",
    "model": lambda r: f"{r.model.name} ({r.model.quantization}, {r.model.parallelism})",
    "SLO": lambda r: slo_text(
        first_token=r.slo.first_token,
        first_token_p99_ms=r.slo.first_token_p99_ms,
        tpot_p99_ms=r.slo.tpot_p99_ms,
    ),
    "workload": lambda r: workload_key(r.spec),
    "simulated": lambda r: simulated_text(_result_simulated(r)),
}
"""What results compared side by side must share."""


def differences(
    items: Sequence[tuple[str, T]], aspects: Mapping[str, Callable[[T], str]]
) -> list[Difference]:
    """Every way the items differ from the first one, aspect by aspect.

    Args:
        items: (the path it was given as, the item); the first is the reference.
        aspects: each aspect's name and the text it reads off an item.
    """
    if not items:
        return []
    ref_path, ref = items[0]
    out: list[Difference] = []
    for name, key in aspects.items():
        want = key(ref)
        for path, other in items[1:]:
            got = key(other)
            if got != want:
                out.append(Difference(name, ref_path, path, want, got))
    return out


def run_differences(runs: Sequence[tuple[str, RunFile]]) -> list[Difference]:
    """How the runs differ in hardware, model, SLO, workload, durations or simulation."""
    return differences(runs, RUN_ASPECTS)


def result_differences(results: Sequence[tuple[str, ResultFile]]) -> list[Difference]:
    """How the results differ in hardware, model, SLO, workload or simulation."""
    return differences(results, RESULT_ASPECTS)
