"""``board``: GPU board power through NVML (nvidia-ml-py), summed over the GPUs in use.

Per reading and per GPU: ``nvmlDeviceGetPowerUsage`` (mW; on Ampere and newer, except GA100,
NVML averages it over one second), the total-energy counter
``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver was loaded; Volta and newer) where
every GPU in use has it, and the current clock-event reasons
``nvmlDeviceGetCurrentClocksEventReasons`` (R535+ drivers; older ones only have
``nvmlDeviceGetCurrentClocksThrottleReasons``, used as the fallback). Reason bits are named in
:data:`CLOCK_EVENT_REASONS`. The enforced power limit (``nvmlDeviceGetEnforcedPowerLimit``,
summed) is read once when the source opens. Nothing here changes clocks or limits.

Every ``pynvml.NVMLError`` is translated into :class:`~tokenwatt.errors.PowerError` here, at the
seam, naming the GPU and the call.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pynvml

from tokenwatt.errors import PowerError
from tokenwatt.power.base import BuildContext, PowerSource, Reading, register_source
from tokenwatt.schema.spec import PowerSourceSpec

__all__ = [
    "CLOCK_EVENT_REASONS",
    "BoardSource",
    "nvml_error",
    "nvml_session",
    "reason_names",
]

logger = logging.getLogger(__name__)

CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clock_setting"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)
"""NVML clock-event (throttle) reason bits and tokenwatt's names for them (nvml.h 12.9;
``nvmlClocksEventReason*`` / ``nvmlClocksThrottleReason*`` in nvidia-ml-py 13.615)."""

_KNOWN_MASK = sum(bit for bit, _ in CLOCK_EVENT_REASONS)


def reason_names(mask: int) -> tuple[str, ...]:
    """Names of the reason bits set in ``mask``; unknown bits as ``unknown_0x...``."""
    names = [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]
    rest = mask & ~_KNOWN_MASK
    bit = 1
    while rest:
        if rest & bit:
            names.append(f"unknown_{bit:#x}")
            rest &= ~bit
        bit <<= 1
    return tuple(names)


def nvml_error(exc: Exception, what: str) -> PowerError:
    """A :class:`PowerError` for a failed NVML call, saying what to do where we know."""
    if isinstance(exc, pynvml.NVMLError_LibraryNotFound):
        return PowerError(
            f"{what}: NVML (libnvidia-ml.so.1) not found, so no NVIDIA driver is installed here;"
            " run on the GPU machine, or set power.source to redfish, ipmi, command, prometheus"
            " or none"
        )
    if isinstance(exc, pynvml.NVMLError_DriverNotLoaded):
        return PowerError(
            f"{what}: the NVIDIA driver is not loaded (NVML: {exc}); check nvidia-smi works"
        )
    if isinstance(exc, pynvml.NVMLError_NoPermission):
        return PowerError(f"{what}: NVML refused: {exc}; run as a user allowed to query the GPUs")
    return PowerError(f"{what}: NVML error: {exc}")


@contextlib.contextmanager
def nvml_session() -> Iterator[Any]:
    """``nvmlInit`` … ``nvmlShutdown`` around a block; yields the ``pynvml`` module.

    Raises:
        PowerError: NVML cannot be initialised (no library, no driver, no permission).
    """
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise nvml_error(exc, "starting NVML") from exc
    try:
        yield pynvml
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as exc:
            logger.warning("nvmlShutdown failed: %s", exc)


def check_gpu_indices(
    requested: Sequence[int] | None, count: int, *, in_use: int | None = None
) -> list[int]:
    """The GPU indices to use: ``requested`` (checked against ``count``) or all of them.

    "All of them" stands for the GPUs in use only when there are no more than ``in_use`` (the
    model's tensor parallel x replicas, when known): idle GPUs would add to the board power, and
    every per-GPU figure would be divided by GPUs that serve nothing (methodology page, "Power and
    energy": the sum over the GPUs in use).

    Raises:
        PowerError: an index is not among the GPUs NVML sees, or NVML sees more GPUs than
            ``in_use`` and none are named.
    """
    if requested is None:
        if count == 0:
            raise PowerError("NVML sees no GPU; check nvidia-smi, or set power.source to 'none'")
        if in_use is not None and count > in_use:
            raise PowerError(
                f"NVML sees {count} GPUs but the model runs on {in_use}"
                " (model.tensor_parallel x model.replicas); name the GPUs the server"
                " uses in spec hardware.gpus (NVML indices, as nvidia-smi lists them)"
            )
        return list(range(count))
    missing = [i for i in requested if i >= count]
    if missing:
        raise PowerError(
            f"spec hardware.gpus names GPU {', '.join(map(str, missing))}, but NVML sees"
            f" {count} GPU(s) (indices 0..{count - 1}); fix hardware.gpus"
        )
    return list(requested)


@register_source("board")
class BoardSource(PowerSource):
    """GPU board power from NVML, summed over the GPUs in use (scope ``board``)."""

    scope = "board"

    def __init__(self, *, gpu_indices: Sequence[int] | None = None) -> None:
        """Prepare for the GPUs at ``gpu_indices`` (NVML order); None = every GPU NVML sees."""
        super().__init__()
        self.description = "GPU board power sum (NVIDIA)"
        self._requested = list(gpu_indices) if gpu_indices is not None else None
        self.gpu_indices: list[int] = []
        self._handles: list[Any] = []
        self._reasons_call: Callable[[Any], int] | None = None
        self._opened = False

    @classmethod
    def from_spec(cls, spec: PowerSourceSpec, context: BuildContext) -> BoardSource:
        """Board power for ``context.gpu_indices`` (``spec.hardware.gpus``)."""
        return cls(gpu_indices=context.gpu_indices)

    def open(self) -> None:
        """Initialise NVML, pick the GPUs, probe the energy counter and the reasons call."""
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise nvml_error(exc, "board power source") from exc
        self._opened = True
        try:
            self._open_devices()
        except PowerError:
            self.close()
            raise

    def _open_devices(self) -> None:
        try:
            count = int(pynvml.nvmlDeviceGetCount())
        except pynvml.NVMLError as exc:
            raise nvml_error(exc, "counting GPUs") from exc
        self.gpu_indices = check_gpu_indices(self._requested, count)
        self._handles = []
        for index in self.gpu_indices:
            try:
                self._handles.append(pynvml.nvmlDeviceGetHandleByIndex(index))
            except pynvml.NVMLError as exc:
                raise nvml_error(exc, f"GPU {index}: getting its NVML handle") from exc
        self.has_energy_counter = self._probe_energy()
        self._reasons_call = self._probe_reasons()
        self.throttle_monitored = self._reasons_call is not None
        self.power_limit_w = self._enforced_limit_w()
        for index, handle in zip(self.gpu_indices, self._handles, strict=True):
            # Fail now, before any load is sent, if power itself cannot be read.
            try:
                pynvml.nvmlDeviceGetPowerUsage(handle)
            except pynvml.NVMLError as exc:
                raise nvml_error(exc, f"GPU {index}: reading power") from exc
        logger.info(
            "board power: GPUs %s, energy counter %s, clock-event reasons %s, limit %s W",
            self.gpu_indices,
            "yes" if self.has_energy_counter else "no (energy = integral of power)",
            "yes" if self.throttle_monitored else "no",
            self.power_limit_w,
        )

    def _probe_energy(self) -> bool:
        for index, handle in zip(self.gpu_indices, self._handles, strict=True):
            try:
                pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            except pynvml.NVMLError as exc:
                logger.info("GPU %d has no usable energy counter (%s)", index, exc)
                return False
        return True

    def _probe_reasons(self) -> Callable[[Any], int] | None:
        calls: list[tuple[str, Callable[[Any], int] | None]] = [
            (
                "nvmlDeviceGetCurrentClocksEventReasons",
                getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None),
            ),
            (
                "nvmlDeviceGetCurrentClocksThrottleReasons",
                getattr(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None),
            ),
        ]
        for name, call in calls:
            if call is None:
                logger.debug("%s: not in this nvidia-ml-py", name)
                continue
            try:
                for handle in self._handles:
                    call(handle)
            except (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_NotSupported) as exc:
                logger.info("%s unavailable (%s); trying the older call", name, exc)
                continue
            except pynvml.NVMLError as exc:
                logger.warning("%s failed (%s): clock-event reasons not recorded", name, exc)
                return None
            logger.debug("clock-event reasons via %s", name)
            return call
        return None

    def _enforced_limit_w(self) -> float | None:
        total_mw = 0
        for index, handle in zip(self.gpu_indices, self._handles, strict=True):
            try:
                total_mw += int(pynvml.nvmlDeviceGetEnforcedPowerLimit(handle))
            except pynvml.NVMLError:
                try:
                    total_mw += int(pynvml.nvmlDeviceGetPowerManagementLimit(handle))
                except pynvml.NVMLError as exc:
                    logger.info("GPU %d: power limit unknown (%s)", index, exc)
                    return None
        return total_mw / 1000.0

    def read(self) -> Reading:
        """Power (and energy counter, reasons) of every GPU in use, now."""
        if not self._handles:
            raise PowerError("board power source read before open()")
        gpu_w: list[float] = []
        energy_mj = 0
        energy_ok = self.has_energy_counter
        mask = 0
        reasons_ok = True
        for index, handle in zip(self.gpu_indices, self._handles, strict=True):
            try:
                gpu_w.append(int(pynvml.nvmlDeviceGetPowerUsage(handle)) / 1000.0)
            except pynvml.NVMLError as exc:
                raise nvml_error(exc, f"GPU {index}: reading power") from exc
            if energy_ok:
                try:
                    energy_mj += int(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle))
                except pynvml.NVMLError as exc:
                    logger.debug("GPU %d: energy counter read failed: %s", index, exc)
                    energy_ok = False
            if self._reasons_call is not None:
                try:
                    mask |= int(self._reasons_call(handle))
                except pynvml.NVMLError as exc:
                    logger.debug("GPU %d: clock-event reasons read failed: %s", index, exc)
                    reasons_ok = False
        reasons = reason_names(mask)
        if not reasons_ok:
            reasons = (*reasons, "reasons_unreadable")
        return Reading(
            watts=sum(gpu_w),
            gpu_watts=tuple(gpu_w),
            energy_j=energy_mj / 1000.0 if energy_ok else None,
            throttle_reasons=reasons,
        )

    def close(self) -> None:
        """Shut NVML down (once)."""
        if self._opened:
            self._opened = False
            self._handles = []
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError as exc:
                logger.warning("nvmlShutdown failed: %s", exc)
