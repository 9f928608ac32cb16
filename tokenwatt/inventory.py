"""Hardware inventory: the GPUs in use as NVML reports them, and their rated memory bandwidth.

Read per GPU in use (``hardware.gpus``, else all): name, UUID, memory, enforced power limit,
memory bus width and maximum memory clock; plus the driver version. Nothing is changed.

Rated bandwidth per GPU: :func:`tokenwatt.gpus.rated_bandwidth` (the spec's figure, else the
GPU-name table, else NVML clocks), with its source and notes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from tokenwatt.errors import PowerError
from tokenwatt.gpus import preset_for_device_name, rated_bandwidth
from tokenwatt.power.board import check_gpu_indices, nvml_session
from tokenwatt.schema.run import GpuInfo
from tokenwatt.schema.spec import HardwareSpec

__all__ = ["Inventory", "read_inventory"]

logger = logging.getLogger(__name__)

_NVML_CLOCK_MEM = 2


@dataclass(frozen=True)
class Inventory:
    """What the machine says about its GPUs, with the rated bandwidth and its source."""

    source: Literal["nvml", "none"]
    """Where the GPU list comes from (``none``: not read; only spec values)."""
    driver: str | None
    gpus: list[GpuInfo]
    accelerator: str | None
    """Name of the GPUs in use (the first one's, when they differ)."""
    vendor: str | None
    rated_bw_tbs_per_gpu: float | None
    rated_bw_source: str | None
    """``spec``, ``GPU-name table (<datasheet>)`` or ``NVML clocks (<MHz> MHz x <bits> bit)``."""
    notes: list[str] = field(default_factory=list)

    @property
    def rated_bw_tbs_total(self) -> float | None:
        """Rated bandwidth of all the GPUs in use, TB/s (per GPU × count)."""
        if self.rated_bw_tbs_per_gpu is None:
            return None
        return self.rated_bw_tbs_per_gpu * max(1, len(self.gpus))


def _optional(call: Any, *args: Any) -> Any:
    """An NVML query that some GPUs do not support: None instead of an error."""
    import pynvml

    try:
        return call(*args)
    except pynvml.NVMLError as exc:
        logger.debug("%s: %s", getattr(call, "__name__", call), exc)
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _read_gpu(nvml: Any, index: int) -> GpuInfo:
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        name = _text(nvml.nvmlDeviceGetName(handle))
    except nvml.NVMLError as exc:
        raise PowerError(f"GPU {index}: NVML cannot read it: {exc}") from exc
    uuid = _optional(nvml.nvmlDeviceGetUUID, handle)
    memory = _optional(nvml.nvmlDeviceGetMemoryInfo, handle)
    limit_mw = _optional(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    if limit_mw is None:
        limit_mw = _optional(nvml.nvmlDeviceGetPowerManagementLimit, handle)
    bus = _optional(nvml.nvmlDeviceGetMemoryBusWidth, handle)
    clock = _optional(nvml.nvmlDeviceGetMaxClockInfo, handle, _NVML_CLOCK_MEM)
    return GpuInfo(
        index=index,
        name=name,
        uuid=_text(uuid) if uuid is not None else None,
        memory_total_mib=memory.total / 2**20 if memory is not None else None,
        power_limit_w=int(limit_mw) / 1000.0 if limit_mw is not None else None,
        memory_bus_width_bits=int(bus) if bus is not None else None,
        max_memory_clock_mhz=int(clock) if clock is not None else None,
    )


def read_inventory(
    hardware: HardwareSpec, *, strict: bool = False, gpus_in_use: int | None = None
) -> Inventory:
    """The GPUs in use, the driver and the rated bandwidth (spec values win).

    Args:
        hardware: the spec's ``hardware`` section.
        strict: raise when NVML cannot be read; by default the inventory then holds only the
            spec's values and a note saying why.
        gpus_in_use: how many GPUs the model runs on (tensor parallel x replicas); see
            :func:`~tokenwatt.power.board.check_gpu_indices`.

    Raises:
        PowerError: with ``strict``, or when ``hardware.gpus`` names a GPU NVML does not see.
    """
    notes: list[str] = []
    gpus: list[GpuInfo] = []
    driver: str | None = None
    source: Literal["nvml", "none"] = "none"
    if hardware.adapter == "nvidia":
        listed = False
        try:
            with nvml_session() as nvml:
                try:
                    driver = _text(nvml.nvmlSystemGetDriverVersion())
                    count = int(nvml.nvmlDeviceGetCount())
                except nvml.NVMLError as exc:
                    raise PowerError(f"NVML cannot list the GPUs: {exc}") from exc
                listed = True
                indices = check_gpu_indices(hardware.gpus, count, in_use=gpus_in_use)
                gpus = [_read_gpu(nvml, i) for i in indices]
                source = "nvml"
        except PowerError as exc:
            # NVML missing is a fact to report; a spec naming absent GPUs is the user's error.
            if strict or listed:
                raise
            notes.append(f"GPU inventory not read: {exc}")
            logger.warning("GPU inventory not read: %s", exc)
    else:
        notes.append(f"hardware.adapter is {hardware.adapter!r}: GPUs not read through NVML")
    rated, bw_notes = rated_bandwidth(spec_tbs_per_gpu=hardware.rated_bw_tbs_per_gpu, gpus=gpus)
    accelerator = gpus[0].name if gpus else None
    preset = preset_for_device_name(accelerator) if accelerator else None
    vendor = preset.vendor if preset else ("NVIDIA" if gpus else None)
    return Inventory(
        source=source,
        driver=driver,
        gpus=gpus,
        accelerator=accelerator,
        vendor=vendor,
        rated_bw_tbs_per_gpu=rated.per_gpu_tbs if rated is not None else None,
        rated_bw_source=rated.source if rated is not None else None,
        notes=notes + bw_notes,
    )
