"""Accelerator presets: rated bandwidth, peak dense FLOP/s, memory and power, with sources.

One table serves three readers: the rated bandwidth of the GPUs in use (for the inventory and
the MBU estimate), the hardware inventory (matching an NVML device name to a preset), and the
embedded simulator (its roofline and power model). Figures are the vendors' datasheet numbers
for *dense* math (no 2:4 sparsity); idle power is a typical reading at rest, not a datasheet
value.

Rated bandwidth per GPU, the first that applies (the run records which):

1. ``hardware.rated_bw_tbs_per_gpu`` from the spec: the user's figure wins;
2. this table, by the name NVML reports for the (first) GPU in use;
3. NVML clocks, for a GPU the table lacks: 2 × max memory clock × bus width ÷ 8 (double data
   rate; 2,619 MHz × 5,120 bit = 3.35 TB/s for an H100 SXM).

When the table and the clocks disagree by more than 10 %, or the GPUs in use differ, a note
says so.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokenwatt.schema.run import GpuInfo

__all__ = [
    "GPU_PRESETS",
    "GpuPreset",
    "RatedBandwidth",
    "preset",
    "preset_for_device_name",
    "rated_bandwidth",
    "rated_bandwidth_from_clocks_tbs",
]

_CROSS_CHECK_TOLERANCE = 0.10


@dataclass(frozen=True)
class GpuPreset:
    """Datasheet figures of one accelerator model."""

    key: str
    """Short name used on the command line (``tokenwatt sim --gpu h100-sxm``)."""
    name: str
    """Display name, as the driver reports it where known."""
    vendor: str
    mem_bw_tbs: float
    """Rated memory bandwidth, TB/s (10^12 bytes per second)."""
    bf16_tflops: float
    """Peak dense BF16/FP16 tensor throughput, TFLOP/s."""
    fp8_tflops: float | None
    """Peak dense FP8 tensor throughput, TFLOP/s; None where the hardware has no FP8 math."""
    memory_gb: float
    """Memory capacity, GB (10^9 bytes)."""
    power_limit_w: float
    """Default board power limit (TDP/TBP), W."""
    idle_power_w: float
    """Typical board power at rest, W (measured figures vary by board and clocks)."""
    name_pattern: str
    """Regular expression matched against driver-reported device names."""
    source: str
    """Where the figures come from."""


GPU_PRESETS: tuple[GpuPreset, ...] = (
    GpuPreset(
        key="h100-sxm",
        name="NVIDIA H100 80GB HBM3",
        vendor="NVIDIA",
        mem_bw_tbs=3.35,
        bf16_tflops=989.4,
        fp8_tflops=1978.9,
        memory_gb=80.0,
        power_limit_w=700.0,
        idle_power_w=70.0,
        name_pattern=r"H100 80GB HBM3|H100 SXM",
        source="NVIDIA H100 Tensor Core GPU datasheet (SXM5 column), 2023",
    ),
    GpuPreset(
        key="h100-pcie",
        name="NVIDIA H100 PCIe",
        vendor="NVIDIA",
        mem_bw_tbs=2.0,
        bf16_tflops=756.5,
        fp8_tflops=1513.0,
        memory_gb=80.0,
        power_limit_w=350.0,
        idle_power_w=50.0,
        name_pattern=r"H100 PCIe",
        source="NVIDIA H100 Tensor Core GPU datasheet (PCIe column), 2023",
    ),
    GpuPreset(
        key="h100-nvl",
        name="NVIDIA H100 NVL",
        vendor="NVIDIA",
        mem_bw_tbs=3.9,
        bf16_tflops=835.5,
        fp8_tflops=1671.0,
        memory_gb=94.0,
        power_limit_w=400.0,
        idle_power_w=60.0,
        name_pattern=r"H100 NVL",
        source="NVIDIA H100 Tensor Core GPU datasheet (H100 NVL column), 2023",
    ),
    GpuPreset(
        key="h200",
        name="NVIDIA H200",
        vendor="NVIDIA",
        mem_bw_tbs=4.8,
        bf16_tflops=989.4,
        fp8_tflops=1978.9,
        memory_gb=141.0,
        power_limit_w=700.0,
        idle_power_w=75.0,
        name_pattern=r"(?<!G)H200",  # not the GH200 superchip (other memory, other bandwidth)
        source="NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column), 2024",
    ),
    GpuPreset(
        key="a100-80gb-pcie",
        name="NVIDIA A100 80GB PCIe",
        vendor="NVIDIA",
        mem_bw_tbs=1.935,
        bf16_tflops=312.0,
        fp8_tflops=None,
        memory_gb=80.0,
        power_limit_w=300.0,
        idle_power_w=50.0,
        name_pattern=r"A100 80GB PCIe|A100[- ]PCIE[- ]80GB",
        source="NVIDIA A100 Tensor Core GPU datasheet (80GB PCIe column), 2021",
    ),
    GpuPreset(
        key="a100-80gb",
        name="NVIDIA A100-SXM4-80GB",
        vendor="NVIDIA",
        mem_bw_tbs=2.039,
        bf16_tflops=312.0,
        fp8_tflops=None,
        memory_gb=80.0,
        power_limit_w=400.0,
        idle_power_w=55.0,
        name_pattern=r"A100[- ]SXM4?[- ]80GB|A100 80GB(?! PCIe)",
        source="NVIDIA A100 Tensor Core GPU datasheet (80GB SXM column), 2021",
    ),
    GpuPreset(
        key="l40s",
        name="NVIDIA L40S",
        vendor="NVIDIA",
        mem_bw_tbs=0.864,
        bf16_tflops=362.05,
        fp8_tflops=733.0,
        memory_gb=48.0,
        power_limit_w=350.0,
        idle_power_w=35.0,
        name_pattern=r"L40S",
        source="NVIDIA L40S datasheet, 2023 (dense = half the with-sparsity figures)",
    ),
    GpuPreset(
        key="b200",
        name="NVIDIA B200",
        vendor="NVIDIA",
        mem_bw_tbs=8.0,
        bf16_tflops=2250.0,
        fp8_tflops=4500.0,
        memory_gb=180.0,
        power_limit_w=1000.0,
        idle_power_w=120.0,
        name_pattern=r"B200",
        source="NVIDIA HGX B200 datasheet (per GPU: 1,440 GB and 18 PFLOPS FP8 sparse / 8), 2024",
    ),
    GpuPreset(
        key="mi300x",
        name="AMD Instinct MI300X",
        vendor="AMD",
        mem_bw_tbs=5.3,
        bf16_tflops=1307.4,
        fp8_tflops=2614.9,
        memory_gb=192.0,
        power_limit_w=750.0,
        idle_power_w=140.0,
        name_pattern=r"MI300X",
        source="AMD Instinct MI300X accelerator datasheet, 2023",
    ),
)


def preset(key: str) -> GpuPreset:
    """The preset with this key.

    Raises:
        KeyError: naming the known keys.
    """
    for item in GPU_PRESETS:
        if item.key == key:
            return item
    known = ", ".join(p.key for p in GPU_PRESETS)
    raise KeyError(f"unknown GPU preset {key!r}; known: {known}")


def preset_for_device_name(name: str) -> GpuPreset | None:
    """The preset whose pattern matches a driver-reported device name, if any."""
    for item in GPU_PRESETS:
        if re.search(item.name_pattern, name, flags=re.IGNORECASE):
            return item
    return None


def rated_bandwidth_from_clocks_tbs(max_mem_clock_mhz: float, bus_width_bits: int) -> float:
    """Peak DRAM bandwidth from NVML's max memory clock and bus width, TB/s.

    Double data rate: two transfers per clock, ``bus_width_bits / 8`` bytes each, so
    ``2 x MHz x 1e6 x bits / 8`` bytes/s (2619 MHz x 5120 bit = 3.35 TB/s for an H100 SXM).
    """
    return 2.0 * max_mem_clock_mhz * 1e6 * bus_width_bits / 8.0 / 1e12


@dataclass(frozen=True)
class RatedBandwidth:
    """Rated memory bandwidth of the GPUs serving the model."""

    per_gpu_tbs: float
    gpus: int
    source: str
    """Where the figure comes from: ``spec``, ``GPU-name table (<datasheet>)`` or
    ``NVML clocks (<MHz> MHz x <bits> bit)``."""

    @property
    def total_tbs(self) -> float:
        """All GPUs together, TB/s."""
        return self.per_gpu_tbs * self.gpus


def rated_bandwidth(
    *,
    spec_tbs_per_gpu: float | None = None,
    gpus: Sequence[GpuInfo] = (),
    gpu_count: int | None = None,
    preset_key: str | None = None,
) -> tuple[RatedBandwidth | None, list[str]]:
    """The rated bandwidth in the module's order (None if unknown), and notes (pure).

    Args:
        spec_tbs_per_gpu: ``hardware.rated_bw_tbs_per_gpu`` from the spec.
        gpus: the GPUs in use, as NVML read them (name, max memory clock, bus width).
        gpu_count: GPUs the figure covers (default: those in ``gpus``, at least one).
        preset_key: a preset key for the table step when no GPU was read (a simulated GPU).
    """
    notes: list[str] = []
    count = gpu_count if gpu_count is not None else max(1, len(gpus))
    first = gpus[0] if gpus else None
    names = sorted({g.name for g in gpus})
    if len(names) > 1:
        notes.append(
            f"the GPUs in use differ ({', '.join(names)}); rated bandwidth is the first"
            f" one's ({first.name if first else '?'})"
        )
    clocks_tbs: float | None = None
    if first is not None and first.max_memory_clock_mhz and first.memory_bus_width_bits:
        clocks_tbs = rated_bandwidth_from_clocks_tbs(
            first.max_memory_clock_mhz, first.memory_bus_width_bits
        )
    if first is not None:
        table = preset_for_device_name(first.name)
    else:
        table = preset(preset_key) if preset_key is not None else None
    if table is not None and clocks_tbs is not None:
        gap = abs(clocks_tbs - table.mem_bw_tbs) / table.mem_bw_tbs
        if gap > _CROSS_CHECK_TOLERANCE:
            notes.append(
                f"NVML clocks give {clocks_tbs:.2f} TB/s per GPU, the table {table.mem_bw_tbs}"
                f" TB/s ({gap:.0%} apart)"
            )
    if spec_tbs_per_gpu is not None:
        return RatedBandwidth(spec_tbs_per_gpu, count, "spec"), notes
    if table is not None:
        return RatedBandwidth(table.mem_bw_tbs, count, f"GPU-name table ({table.source})"), notes
    if clocks_tbs is not None and first is not None:
        source = (
            f"NVML clocks ({first.max_memory_clock_mhz} MHz x {first.memory_bus_width_bits} bit)"
        )
        return RatedBandwidth(clocks_tbs, count, source), notes
    if first is not None:
        notes.append(f"no rated bandwidth known for {first.name}")
    return None, notes
