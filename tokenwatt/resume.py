"""Resuming an interrupted sweep (``tokenwatt run ... --resume runs/x.json``).

A run cut short by Ctrl-C, SIGTERM or an aborting error is written marked incomplete, with every
probe finished so far (:mod:`tokenwatt.measure`). Resuming it measures only what is missing:

1. **Check** (:func:`check_resumable`): the file is an incomplete run; the spec file has the
   same SHA-256 as the one the run recorded (a changed spec would make the old probes answers to
   another question; the differing fields are named); the workload and accuracy seeds, label,
   role, ``--quick``, the durations in force and the accuracy check match. Any difference is
   refused by name (exit 2), with nothing measured.
2. **Replay** (:func:`replay`): each recorded probe is handed to the sweep in order, as if it
   had just been measured. The sweep decides only from probe outcomes (and, for the adaptive
   strategy, their probe-seconds), so it reaches exactly the state it was in when the run was
   cut, and its next plan is the first probe not yet measured. Each recorded probe must be the
   probe the sweep asks for (same phase, rate, durations, attempt and repeat; one that started
   on carried requests warmed up for ``sweep.ramp_warmup_s``); if not, the run cannot be
   continued and the first mismatch is named. The first probe after the resumption finds
   nothing left running, so it warms up as from idle (:func:`tokenwatt.sweep.warmup_when`).
3. **Continue**: probe i still sends the workload's stream i (common random numbers), so the
   probes measured after the resumption are those an uninterrupted run would have measured.

The accuracy check is reused when the interrupted run got past it (it has probes); otherwise it
runs again. Power samples of the interrupted part are kept, with a gap where nothing was
sampled between the two processes. What was reused is recorded in the run file
(:class:`~tokenwatt.schema.run.ResumeInfo`): probes reused and probe-seconds saved.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenwatt.errors import RunFileError
from tokenwatt.schema.run import PowerEvidence, PowerGap, PowerSample, ProbeRecord, RunFile
from tokenwatt.schema.spec import MeasurementSpec, Spec
from tokenwatt.sweep import RERUN_STREAM_STEP, ProbePlan, Strategy, as_ramped, warmup_when

__all__ = [
    "ResumeCheck",
    "check_resumable",
    "merge_power",
    "probe_seconds",
    "replay",
    "spec_differences",
]

logger = logging.getLogger(__name__)

_GAP_CAUSE = "not sampled: between the interrupted run and its resumption"


@dataclass(frozen=True)
class ResumeCheck:
    """What a resumption must agree with (the new command's side)."""

    spec: Spec
    """The spec as filled in for the new run (:func:`tokenwatt.store.filled`)."""
    spec_sha256: str
    label: str
    role: str
    quick: bool
    effective: MeasurementSpec
    accuracy: bool
    """The new run checks accuracy (a spec with an accuracy section and no ``--no-accuracy``)."""


def _leaves(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping):
        for key in value:
            yield from _leaves(value[key], f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, value


def spec_differences(recorded: Spec, now: Spec, *, limit: int = 3) -> list[str]:
    """The first fields where two specs differ, as ``field: <recorded> in the run, <now> now``."""
    old = dict(_leaves(recorded.model_dump(mode="json")))
    new = dict(_leaves(now.model_dump(mode="json")))
    out: list[str] = []
    for key in sorted(old.keys() | new.keys()):
        if old.get(key) != new.get(key):
            out.append(f"{key}: {old.get(key)!r} in the run, {new.get(key)!r} now")
    if len(out) > limit:
        out = [*out[:limit], f"and {len(out) - limit} more"]
    return out


def check_resumable(run: RunFile, path: Path, want: ResumeCheck) -> None:
    """Refuse a run that cannot be continued by this command, naming the difference.

    Raises:
        RunFileError: the run is complete, or it was measured with another spec, seeds, label,
            role, quick mode, durations or accuracy setting.
    """
    where = f"{path}: cannot resume"
    if run.complete:
        raise RunFileError(f"{where}: the run is complete; there is nothing left to measure")
    if run.environment.spec_sha256 != want.spec_sha256:
        diffs = spec_differences(run.spec, want.spec)
        detail = "; ".join(diffs) if diffs else "the files differ only in layout or comments"
        raise RunFileError(
            f"{where}: the spec changed since the run (SHA-256"
            f" {run.environment.spec_sha256[:12]} in the run,"
            f" {want.spec_sha256[:12]} now): {detail}"
        )
    seeds = [
        ("workload.seed", run.spec.workload.seed, want.spec.workload.seed),
        (
            "accuracy.seeds",
            run.spec.accuracy.seeds if run.spec.accuracy else None,
            want.spec.accuracy.seeds if want.spec.accuracy else None,
        ),
    ]
    checks: list[tuple[str, object, object]] = [
        *seeds,
        ("--label", run.label, want.label),
        ("--role", run.role, want.role),
        ("--quick", run.quick, want.quick),
    ]
    for name, recorded, now in checks:
        if recorded != now:
            raise RunFileError(f"{where}: {name} is {recorded!r} in the run, {now!r} now")
    if run.effective != want.effective:
        diffs = [
            f"{k}: {v!r} in the run, {getattr(want.effective, k)!r} now"
            for k, v in run.effective
            if getattr(want.effective, k) != v
        ]
        raise RunFileError(f"{where}: the durations in force differ: {'; '.join(diffs)}")
    if run.probes and want.accuracy != (run.accuracy is not None):
        said = "checked accuracy" if run.accuracy is not None else "skipped the accuracy check"
        fix = "drop --no-accuracy" if run.accuracy is not None else "add --no-accuracy"
        raise RunFileError(f"{where}: the interrupted run {said}; {fix} to continue it")


def probe_seconds(record: ProbeRecord) -> float:
    """Wall time of a recorded probe: its ``probe_s``, else warm-up to the last window request.

    Run files written before ``probe_s`` existed lack it; the estimate from the probe's clocks
    then misses only the moments before the warm-up started.
    """
    if record.probe_s is not None:
        return record.probe_s
    return record.warmup_s + (record.end_ns - record.window_start_ns) / 1e9


def _same_plan(plan: ProbePlan, record: ProbeRecord, ramp_warmup_s: float | None) -> list[str]:
    # A probe that started on carried requests warmed up for sweep.ramp_warmup_s.
    warmup_s = warmup_when(as_ramped(plan, ramp_warmup_s), carried=record.ramp is not None)
    pairs: list[tuple[str, object, object]] = [
        ("phase", plan.phase, record.phase),
        ("attempt", plan.attempt, record.attempt),
        ("repeat", plan.repeat, record.repeat),
    ]
    out = [f"{k} {want!r}, recorded {got!r}" for k, want, got in pairs if want != got]
    if record.stream is not None:
        # A probe re-run with more workers (it was client-bound) took a later stream.
        want_stream = record.index if plan.stream is None else plan.stream
        if (record.stream - want_stream) % RERUN_STREAM_STEP or record.stream < want_stream:
            out.append(f"stream {want_stream}, recorded {record.stream}")
        if plan.variant != record.variant:
            out.append(f"variant {plan.variant}, recorded {record.variant}")
    for name, want_f, got_f in [
        ("rate_rps", plan.rate_rps, record.rate_rps),
        ("warmup_s", warmup_s, record.warmup_s),
        ("window_s", plan.window_s, record.window_s),
    ]:
        if not math.isclose(want_f, got_f, rel_tol=1e-9, abs_tol=1e-12):
            out.append(f"{name} {want_f!r}, recorded {got_f!r}")
    return out


def replay(
    sweep: Strategy,
    probes: list[ProbeRecord],
    path: Path,
    *,
    ramp_warmup_s: float | None = None,
) -> float:
    """Feed recorded probes to a fresh sweep, in order; return their probe-seconds.

    ``ramp_warmup_s`` is the spec's ``sweep.ramp_warmup_s``: a recorded probe that started on
    carried requests warmed up for that instead of the plan's warm-up.

    Raises:
        RunFileError: a recorded probe is not the one the sweep asks for, or the sweep ends
            before the recorded probes do.
    """
    saved = 0.0
    for record in probes:
        plan = sweep.next()
        if plan is None:
            raise RunFileError(
                f"{path}: cannot resume: the sweep ends before probe {record.index},"
                " which the run recorded"
            )
        if mismatch := _same_plan(plan, record, ramp_warmup_s):
            raise RunFileError(
                f"{path}: cannot resume: probe {record.index} is not the probe the sweep asks"
                f" for now (sweep asks {'; '.join(mismatch)})"
            )
        seconds = probe_seconds(record)
        sweep.observe(record, seconds)
        saved += seconds
    logger.info("resume: %d recorded probe(s) replayed, %.1f probe-seconds", len(probes), saved)
    return saved


def _joined(
    old: tuple[Sequence[PowerSample], Sequence[PowerGap]],
    new: tuple[Sequence[PowerSample], Sequence[PowerGap]],
) -> dict[str, list[PowerSample] | list[PowerGap]]:
    """Old samples and gaps in front of the new ones, the stretch between them a gap."""
    (old_samples, old_gaps), (new_samples, new_gaps) = old, new
    gaps = list(old_gaps)
    if old_samples and new_samples:
        gaps.append(
            PowerGap(start_ns=old_samples[-1].t_ns, end_ns=new_samples[0].t_ns, cause=_GAP_CAUSE)
        )
    return {"samples": [*old_samples, *new_samples], "gaps": [*gaps, *new_gaps]}


def merge_power(old: PowerEvidence | None, new: PowerEvidence) -> PowerEvidence:
    """The new process's power evidence with the interrupted run's samples in front of it.

    Both processes read the same monotonic clock (one host, one boot), so the samples join on
    one time axis, with a gap between the last old and the first new sample (on the total and on
    each node of a server spanning nodes). Samples that do not come before the new ones (another
    boot, another source or other nodes) are dropped, with a note.
    """
    old_nodes, new_nodes = (old.nodes or []) if old else [], new.nodes or []
    if old is None or not (old.samples or any(n.samples for n in old_nodes)):
        return new
    traces = [(old.samples, new.samples)] + [
        (o.samples, n.samples) for o, n in zip(old_nodes, new_nodes, strict=False)
    ]
    if (
        old.source != new.source
        or [n.name for n in old_nodes] != [n.name for n in new_nodes]
        or any(a and b and a[-1].t_ns >= b[0].t_ns for a, b in traces)
    ):
        logger.warning("resume: power samples of the interrupted run dropped (clock or source)")
        return new.model_copy(
            update={
                "notes": [
                    *new.notes,
                    "power samples of the interrupted run dropped on resumption"
                    " (another source or clock)",
                ]
            }
        )
    nodes = [
        n.model_copy(update=_joined((o.samples, o.gaps), (n.samples, n.gaps)))
        for o, n in zip(old_nodes, new_nodes, strict=True)
    ]
    return new.model_copy(
        update={
            **_joined((old.samples, old.gaps), (new.samples, new.gaps)),
            "nodes": nodes if new.nodes is not None else None,
        }
    )
