"""The simulator's board-power model and its NVML-like meter.

Power of one GPU while a step runs::

    P = idle + busy + memory_w × (bytes/s ÷ rated bandwidth) + compute_w × (FLOP/s ÷ peak)

``busy`` is drawn whenever kernels run; the two utilisation terms scale with how hard the step
drives memory and tensor cores. When ``P`` would exceed the board limit the GPU lowers its clocks
(NVML reports ``sw_power_cap``, bit 0x4): the step's GPU time stretches by the factor ``s`` that
brings the utilisation terms down to fit, ``idle + busy + dynamic / s = limit``. Between steps
the GPU draws ``idle`` and reports ``GpuIdle`` (0x1).

The meter integrates power over time into an energy counter (NVML's total-energy counter, mJ)
and reports the mean power over the last second, as NVML's power reading does on recent
data-centre GPUs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

__all__ = [
    "CLOCKS_EVENT_GPU_IDLE",
    "CLOCKS_EVENT_SW_POWER_CAP",
    "PowerMeter",
    "PowerModel",
    "StepPower",
]

CLOCKS_EVENT_GPU_IDLE = 0x1
"""NVML ``nvmlClocksEventReasonGpuIdle``."""
CLOCKS_EVENT_SW_POWER_CAP = 0x4
"""NVML ``nvmlClocksEventReasonSwPowerCap``."""


@dataclass(frozen=True)
class StepPower:
    """Power and clock state of one step on one GPU."""

    power_w: float
    """Power while the GPU works on the step (after capping), W."""
    stretch: float
    """Factor by which clock reduction lengthens the step's GPU time (1 = full clocks)."""

    @property
    def capped(self) -> bool:
        """Whether the power cap lowered the clocks."""
        return self.stretch > 1.0


@dataclass(frozen=True)
class PowerModel:
    """Idle and dynamic power of one GPU, W."""

    idle_w: float
    limit_w: float
    busy_w: float
    memory_w: float
    """Extra power at 100% of rated memory bandwidth."""
    compute_w: float
    """Extra power at 100% of peak tensor throughput."""

    def __post_init__(self) -> None:
        if self.limit_w <= self.idle_w + self.busy_w:
            raise ValueError(
                f"power limit {self.limit_w:.0f} W must exceed idle + busy"
                f" ({self.idle_w + self.busy_w:.0f} W)"
            )

    def step(self, *, bandwidth_util: float, compute_util: float) -> StepPower:
        """Power of a step that uses these fractions of rated bandwidth and peak FLOP/s."""
        dynamic = self.memory_w * bandwidth_util + self.compute_w * compute_util
        power = self.idle_w + self.busy_w + dynamic
        if power <= self.limit_w:
            return StepPower(power_w=power, stretch=1.0)
        headroom = self.limit_w - self.idle_w - self.busy_w
        return StepPower(power_w=self.limit_w, stretch=dynamic / headroom)


class PowerMeter:
    """Energy counter and 1-s mean power of one GPU, fed with step segments.

    Segments ``(start, end, watts, reasons)`` are added in time order, possibly ending in the
    future (a step in progress); between segments the GPU idles. Times are seconds on the
    simulator's clock.
    """

    def __init__(self, *, idle_w: float, t0_s: float, history_s: float = 5.0) -> None:
        self.idle_w = idle_w
        self._history_s = history_s
        # (start, end, watts, reasons, energy_j at start)
        self._segments: deque[tuple[float, float, float, int, float]] = deque()
        self._base_t = t0_s
        self._base_j = 0.0
        self._last_end = t0_s
        self._last_end_j = 0.0

    def add(self, start_s: float, end_s: float, watts: float, reasons: int) -> None:
        """Record that the GPU draws ``watts`` from ``start_s`` to ``end_s``."""
        start_s = max(start_s, self._last_end)
        end_s = max(end_s, start_s)
        e_start = self._last_end_j + self.idle_w * (start_s - self._last_end)
        self._segments.append((start_s, end_s, watts, reasons, e_start))
        self._last_end = end_s
        self._last_end_j = e_start + watts * (end_s - start_s)
        horizon = start_s - self._history_s
        while len(self._segments) > 1 and self._segments[0][1] < horizon:
            s = self._segments.popleft()
            self._base_t = s[1]
            self._base_j = s[4] + s[2] * (s[1] - s[0])

    def energy_j(self, t_s: float) -> float:
        """Energy drawn since the meter started, J (exact within the kept history)."""
        if t_s >= self._last_end:
            return self._last_end_j + self.idle_w * (t_s - self._last_end)
        for start, end, watts, _, e_start in reversed(self._segments):
            if t_s >= end:
                e_end = e_start + watts * (end - start)
                return e_end + self.idle_w * (t_s - end)
            if t_s >= start:
                return e_start + watts * (t_s - start)
        # Before the kept history (or the start): as if idle, from the base point.
        return self._base_j + self.idle_w * (t_s - self._base_t)

    def mean_power_w(self, t_s: float, *, window_s: float = 1.0) -> float:
        """Mean power over ``[t - window, t]``, W."""
        return (self.energy_j(t_s) - self.energy_j(t_s - window_s)) / window_s

    def reasons(self, t_s: float) -> int:
        """NVML clock-event reasons at ``t``: those of the step running then, else GpuIdle."""
        for start, end, _, reasons, _ in reversed(self._segments):
            if start <= t_s < end:
                return reasons
            if end <= t_s:
                break
        return CLOCKS_EVENT_GPU_IDLE
