"""The engine in virtual time: a list of arrivals in, token times and ground truth out.

The same :class:`~tokenwatt.sim.engine.EngineCore` the real-time server runs, driven step after
step with no clock: a minute of simulated serving takes well under a second. Tests use it for
physics checks; ``benchmarks/sim_seed.py`` sweeps the seed's scenario with it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from tokenwatt.sim.engine import EngineConfig, EngineCore, SimRequest

__all__ = ["Arrival", "OfflineRun", "Snapshot", "simulate"]


@dataclass(frozen=True)
class Arrival:
    """A request for the offline driver."""

    t_s: float
    prompt_tokens: int
    output_tokens: int


@dataclass
class _Record:
    """Token times of one request in the offline driver."""

    times: list[float] = field(default_factory=list)

    def notify(self, req: SimRequest, t_s: float) -> None:
        self.times.append(t_s)


@dataclass(frozen=True)
class Snapshot:
    """Ground-truth counters at one instant of an offline run."""

    t_s: float
    energy_j: float
    """Energy of all GPUs since the start."""
    read_bytes: float
    steps: int
    busy_s: float
    running_seq_s: float
    decode_seq_s: float
    throttled_s: float
    generation_tokens: int


@dataclass
class OfflineRun:
    """What :func:`simulate` returns."""

    core: EngineCore
    requests: list[tuple[Arrival, list[float]]]
    """Each arrival with the times of its tokens."""
    snapshots: list[Snapshot]
    """Counters at the first step boundary at or after each requested time."""


def _snapshot(core: EngineCore, t_s: float) -> Snapshot:
    st = core.stats
    return Snapshot(
        t_s=t_s,
        energy_j=core.meter.energy_j(t_s) * core.config.tensor_parallel,
        read_bytes=st.read_bytes,
        steps=st.steps,
        busy_s=st.busy_s,
        running_seq_s=st.running_seq_s,
        decode_seq_s=st.decode_seq_s,
        throttled_s=st.throttled_s,
        generation_tokens=st.generation_tokens,
    )


def simulate(
    config: EngineConfig,
    arrivals: Iterable[Arrival],
    *,
    until_s: float | None = None,
    snapshot_at: Iterable[float] = (),
) -> OfflineRun:
    """Run the engine in virtual time over ``arrivals``.

    Requests join at the first step boundary at or after their arrival, as in the real-time
    loop; when the engine idles, time jumps to the next arrival.
    """
    core = EngineCore(config)
    pending = deque(sorted(arrivals, key=lambda a: a.t_s))
    marks = deque(sorted(snapshot_at))
    snaps: list[Snapshot] = []
    out: list[tuple[Arrival, list[float]]] = []
    t = 0.0
    rid = 0
    while pending or core.has_work:
        while marks and marks[0] <= t:
            marks.popleft()
            snaps.append(_snapshot(core, t))
        if until_s is not None and t >= until_s:
            break
        while pending and pending[0].t_s <= t:
            a = pending.popleft()
            rec = _Record()
            core.add(
                SimRequest(
                    rid,
                    prompt_tokens=a.prompt_tokens,
                    max_tokens=a.output_tokens,
                    arrival_s=a.t_s,
                    listener=rec,
                )
            )
            out.append((a, rec.times))
            rid += 1
        plan = core.schedule(t) if core.has_work else None
        if plan is None:
            if not pending:
                break
            t = max(t, pending[0].t_s)
            continue
        core.finish(plan, plan.end_s)
        t = plan.end_s
    while marks:
        snaps.append(_snapshot(core, max(t, marks.popleft())))
    if not math.isfinite(t):
        raise RuntimeError("virtual clock overflow")
    return OfflineRun(core=core, requests=out, snapshots=snaps)
