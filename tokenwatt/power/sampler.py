"""The sampler: reads one power source at ``sampling_hz`` in its own thread for the whole run.

Every sample is stamped on the load generator's clock (``time.monotonic_ns`` by default), at the
middle of the read, so :mod:`tokenwatt.energy` can cut samples to measurement windows. A read
that fails opens a gap (start = the failed attempt, end = the next good reading, cause = the
error); the sampler keeps trying at its normal rate and resumes when the source answers again.
No reading is ever invented: a gap is a stretch with no samples, never a zero.

Ticks are on a fixed grid (``start + k / sampling_hz``); a read slower than the period makes the
sampler skip the ticks it missed rather than burst to catch up. Samplers given the same grid start
(one per node of a server spanning nodes, :mod:`tokenwatt.power.nodes`) read on the same ticks,
and each sample keeps the tick it was read on.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

from tokenwatt.errors import PowerError
from tokenwatt.power.base import PowerSource, Reading, build_source
from tokenwatt.schema.run import PowerEvidence, PowerGap, PowerSample
from tokenwatt.schema.spec import Spec

if TYPE_CHECKING:
    from tokenwatt.power.nodes import NodesSampler

__all__ = ["PowerSampler", "sampler_for_spec"]

logger = logging.getLogger(__name__)

Clock = Callable[[], int]


@dataclass(slots=True)
class _Gap:
    start_ns: int
    end_ns: int | None
    cause: str
    attempts: int = 1


class PowerSampler:
    """Samples a :class:`~tokenwatt.power.base.PowerSource` in a background thread.

    Use as ``with PowerSampler(source, sampling_hz=1) as sampler: ...`` then
    ``sampler.evidence()``, or call :meth:`start` and :meth:`stop` (which returns the evidence).
    The source is opened by :meth:`start` (set-up errors raise there, before any load is sent)
    and closed by :meth:`stop`.
    """

    def __init__(
        self,
        source: PowerSource,
        *,
        sampling_hz: float,
        clock_ns: Clock = time.monotonic_ns,
        label: str | None = None,
    ) -> None:
        """Prepare, without opening the source.

        Args:
            source: the meter to read.
            sampling_hz: reads per second (> 0).
            clock_ns: the clock samples are stamped with; must be the load generator's.
            label: what log lines call the meter (a node's name); default the source's name.
        """
        if not sampling_hz > 0:
            raise ValueError(f"sampling_hz must be positive, not {sampling_hz}")
        self.source = source
        self.sampling_hz = sampling_hz
        self.label = label or source.name
        self._period_ns = round(1e9 / sampling_hz)
        self._clock_ns = clock_ns
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._samples: list[tuple[int, Reading]] = []
        self._ticks: list[int] = []
        self._grid_start_ns: int | None = None
        self._gaps: list[_Gap] = []
        self._crash: BaseException | None = None
        self._started = False
        self._stopped = False
        self._reads_ns: list[int] = []

    # -- life cycle -----------------------------------------------------------------------------

    def start(self, *, grid_start_ns: int | None = None) -> None:
        """Open the source and start sampling in a daemon thread.

        Args:
            grid_start_ns: tick 0 of the sampling grid, on the sampler's clock; the first read
                is then on the next tick of that grid. Default: now, read at once.

        Raises:
            PowerError: the source cannot be opened (nothing is started then).
            RuntimeError: started twice.
        """
        if self._started:
            raise RuntimeError("PowerSampler.start() called twice")
        self.source.open()
        self._started = True
        self._grid_start_ns = grid_start_ns
        if self.source.scope == "none":
            logger.info("power source 'none': power is not measured")
            return
        self._thread = threading.Thread(
            target=self._run, name=f"tokenwatt-power-{self.label}", daemon=True
        )
        self._thread.start()
        logger.info(
            "sampling %s power at %s Hz: %s",
            self.label,
            self.sampling_hz,
            self.source.description,
        )

    def request_stop(self) -> None:
        """Ask the thread to stop after its current read, without waiting (see :meth:`stop`)."""
        self._stop.set()

    def stop(self) -> PowerEvidence:
        """Stop the thread, close the source and return everything recorded.

        Raises:
            PowerError: the sampling thread died of an unexpected error (a bug in a source);
                what was recorded before it is lost to the caller only through this error.
        """
        if self._started and not self._stopped:
            self._stopped = True
            self._stop.set()
            if self._thread is not None:
                self._thread.join()
            end_ns = self._clock_ns()
            with self._lock:
                for gap in self._gaps:
                    if gap.end_ns is None:
                        gap.end_ns = end_ns
            self.source.close()
        if self._crash is not None:
            raise PowerError(
                f"the {self.label} power sampler stopped on an unexpected error:"
                f" {type(self._crash).__name__}: {self._crash}"
            ) from self._crash
        return self.evidence()

    def __enter__(self) -> PowerSampler:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.stop()
        else:
            # Already failing: stop quietly so the original error is the one reported.
            try:
                self.stop()
            except PowerError:
                logger.exception("power sampler failed while another error was raised")

    # -- results --------------------------------------------------------------------------------

    def evidence(self) -> PowerEvidence:
        """What was recorded so far (a snapshot; safe while running; open gaps end now)."""
        return self.evidence_with_ticks()[0]

    def evidence_with_ticks(self) -> tuple[PowerEvidence, list[int]]:
        """:meth:`evidence`, and for each of its samples the grid tick it was read on."""
        now_ns = self._clock_ns()
        with self._lock:
            samples = list(self._samples)
            ticks = list(self._ticks)
            gaps = [
                PowerGap(
                    start_ns=g.start_ns,
                    end_ns=g.end_ns if g.end_ns is not None else now_ns,
                    cause=g.cause if g.attempts == 1 else f"{g.cause} ({g.attempts} failed reads)",
                )
                for g in self._gaps
            ]
        evidence = PowerEvidence(
            source=self.source.name,
            description=self.source.description,
            scope=self.source.scope,
            sampling_hz=self.sampling_hz,
            samples=[
                PowerSample(
                    t_ns=t_ns,
                    watts=r.watts,
                    gpu_watts=list(r.gpu_watts) if r.gpu_watts is not None else None,
                    energy_j=r.energy_j,
                    throttle_reasons=list(r.throttle_reasons),
                )
                for t_ns, r in samples
            ],
            gaps=gaps,
            power_limit_w=self.source.power_limit_w,
            throttle_monitored=self.source.throttle_monitored,
        )
        return evidence, ticks

    @property
    def sample_count(self) -> int:
        """Samples recorded so far."""
        with self._lock:
            return len(self._samples)

    @property
    def ticks(self) -> list[int]:
        """The grid tick of each sample so far."""
        with self._lock:
            return list(self._ticks)

    @property
    def gap_count(self) -> int:
        """Gaps recorded so far (an open one included)."""
        with self._lock:
            return len(self._gaps)

    @property
    def read_durations_ns(self) -> list[int]:
        """How long each read took, ns (for benchmarks)."""
        with self._lock:
            return list(self._reads_ns)

    # -- the thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        tick = 0
        t0_ns = self._clock_ns() if self._grid_start_ns is None else self._grid_start_ns
        try:
            if self._grid_start_ns is not None:
                # Join the shared grid at its next tick (opening the source took time).
                tick = max(0, math.ceil((self._clock_ns() - t0_ns) / self._period_ns))
                wait_ns = t0_ns + tick * self._period_ns - self._clock_ns()
                if wait_ns > 0:
                    self._stop.wait(wait_ns / 1e9)
            while not self._stop.is_set():
                self._sample_once(tick)
                # Next tick on the grid that is still ahead: skip ticks a slow read missed.
                now_ns = self._clock_ns()
                tick = max(tick + 1, math.ceil((now_ns - t0_ns) / self._period_ns))
                wait_ns = t0_ns + tick * self._period_ns - now_ns
                if wait_ns > 0:
                    self._stop.wait(wait_ns / 1e9)
        # A bug in a source must not end sampling silently: keep it for stop() to re-raise.
        except BaseException as exc:  # noqa: BLE001 - re-raised with context by stop()
            self._crash = exc
            logger.error("power sampler thread stopped: %s: %s", type(exc).__name__, exc)
            with self._lock:
                if not self._gaps or self._gaps[-1].end_ns is not None:
                    self._gaps.append(_Gap(self._clock_ns(), None, f"sampler crashed: {exc}"))

    def _sample_once(self, tick: int) -> None:
        before_ns = self._clock_ns()
        try:
            reading = self.source.read()
            if not (math.isfinite(reading.watts) and reading.watts >= 0):
                raise PowerError(f"{self.label} source read {reading.watts!r} W")
        except PowerError as exc:
            after_ns = self._clock_ns()
            with self._lock:
                self._reads_ns.append(after_ns - before_ns)
                open_gap = self._gaps[-1] if self._gaps and self._gaps[-1].end_ns is None else None
                if open_gap is None:
                    self._gaps.append(_Gap(before_ns, None, str(exc)))
                else:
                    open_gap.attempts += 1
            if open_gap is None:
                logger.warning("%s power readings stopped (gap opened): %s", self.label, exc)
            return
        after_ns = self._clock_ns()
        t_ns = (before_ns + after_ns) // 2
        closed: _Gap | None = None
        with self._lock:
            self._reads_ns.append(after_ns - before_ns)
            if self._gaps and self._gaps[-1].end_ns is None:
                closed = self._gaps[-1]
                closed.end_ns = t_ns
            self._samples.append((t_ns, reading))
            self._ticks.append(tick)
        if closed is not None:
            logger.warning(
                "%s power readings resumed after %.1f s without readings (%s)",
                self.label,
                (t_ns - closed.start_ns) / 1e9,
                closed.cause,
            )


def sampler_for_spec(
    spec: Spec,
    *,
    default_metrics_url: str | None = None,
    env: Mapping[str, str] | None = None,
    clock_ns: Clock = time.monotonic_ns,
) -> PowerSampler | NodesSampler:
    """A sampler (not started) for the spec's power source, GPUs and ``sampling_hz``.

    With ``power.nodes``, a :class:`~tokenwatt.power.nodes.NodesSampler` over every node.

    Args:
        spec: the whole spec (``power`` and ``hardware.gpus`` are used).
        default_metrics_url: the simulator's ``/metrics``, for ``prometheus`` without a url.
        env: where the password variable is read; default ``os.environ``.
        clock_ns: the load generator's clock.

    Raises:
        PowerError: the power section cannot be served (see
            :func:`~tokenwatt.power.base.build_source`).
    """
    sampling_hz = float(spec.power.sampling_hz)
    if spec.power.nodes is None:
        source = build_source(
            spec.power,
            gpu_indices=spec.hardware.gpus,
            default_metrics_url=default_metrics_url,
            env=env,
        )
        return PowerSampler(source, sampling_hz=sampling_hz, clock_ns=clock_ns)
    # nodes.py builds on this module's PowerSampler, hence the import here.
    from tokenwatt.power.nodes import NodesSampler

    sources: list[tuple[str, PowerSource]] = []
    for i, node in enumerate(spec.power.nodes):
        if node.ray_node is not None:
            from tokenwatt.power.remote import remote_source

            sources.append((node.name, remote_source(node, sampling_hz=sampling_hz)))
            continue
        try:
            source = build_source(
                node,
                # hardware.gpus are this machine's: they are the GPUs of a 'board' node only.
                gpu_indices=spec.hardware.gpus if node.source == "board" else None,
                default_metrics_url=default_metrics_url,
                env=env,
            )
        except PowerError as exc:
            raise PowerError(f"power.nodes[{i}] ({node.name}): {exc}") from exc
        sources.append((node.name, source))
    return NodesSampler(sources, sampling_hz=sampling_hz, clock_ns=clock_ns)
