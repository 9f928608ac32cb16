"""Rated bandwidth: one resolution for the inventory and the MBU estimate (DESIGN.md order)."""

from __future__ import annotations

import pytest

from tokenwatt.gpus import (
    RatedBandwidth,
    preset_for_device_name,
    rated_bandwidth,
    rated_bandwidth_from_clocks_tbs,
)
from tokenwatt.schema.run import GpuInfo

H100 = "NVIDIA H100 80GB HBM3"


def test_clocks_formula_hand_worked():
    # 2 transfers x 2,619e6 /s x 5,120 bit / 8 = 3.352e12 B/s
    assert rated_bandwidth_from_clocks_tbs(2619, 5120) == pytest.approx(3.35232)


def test_spec_then_table_then_clocks():
    gpu = GpuInfo(index=0, name=H100)
    clocked = GpuInfo(index=0, name=H100, max_memory_clock_mhz=2619, memory_bus_width_bits=5120)
    spec, notes = rated_bandwidth(gpu_count=2, spec_tbs_per_gpu=3.0, gpus=[clocked])
    assert spec == RatedBandwidth(3.0, 2, "spec")
    assert spec.total_tbs == 6.0
    assert notes == []
    # DESIGN.md: "spec, else a table by GPU name" -- the table wins over the clocks.
    table, _ = rated_bandwidth(gpu_count=1, gpus=[clocked])
    assert table is not None
    assert table.per_gpu_tbs == 3.35
    assert table.source.startswith("GPU-name table (NVIDIA H100")
    assert rated_bandwidth(gpus=[gpu])[0] == table
    # A GPU the table lacks: its clocks.
    unknown = GpuInfo(
        index=0, name="NVIDIA Future GPU", max_memory_clock_mhz=2619, memory_bus_width_bits=5120
    )
    nvml, _ = rated_bandwidth(gpu_count=1, gpus=[unknown])
    assert nvml is not None
    assert nvml.per_gpu_tbs == pytest.approx(3.352, abs=0.001)
    assert nvml.source == "NVML clocks (2619 MHz x 5120 bit)"
    # A simulated GPU by preset key; nothing known at all.
    h200, _ = rated_bandwidth(gpu_count=1, preset_key="h200")
    assert h200 is not None
    assert h200.per_gpu_tbs == 4.8
    none, notes = rated_bandwidth(gpu_count=1, gpus=[GpuInfo(index=0, name="Mystery GPU")])
    assert none is None
    assert notes == ["no rated bandwidth known for Mystery GPU"]


def test_gpu_count_defaults_to_the_gpus_in_use():
    two = [GpuInfo(index=i, name=H100) for i in range(2)]
    assert rated_bandwidth(gpus=two)[0] == RatedBandwidth(
        3.35,
        2,
        rated_bandwidth(gpus=two[:1])[0].source,  # type: ignore[union-attr]
    )
    assert rated_bandwidth(spec_tbs_per_gpu=1.0)[0] == RatedBandwidth(1.0, 1, "spec")


def test_notes_for_mixed_gpus_and_a_table_the_clocks_contradict():
    slow = GpuInfo(index=0, name=H100, max_memory_clock_mhz=1000, memory_bus_width_bits=5120)
    other = GpuInfo(index=1, name="NVIDIA H200")
    rated, notes = rated_bandwidth(spec_tbs_per_gpu=3.0, gpus=[slow, other])
    assert rated == RatedBandwidth(3.0, 2, "spec")
    assert notes == [
        f"the GPUs in use differ ({H100}, NVIDIA H200); rated bandwidth is the first one's ({H100})",
        "NVML clocks give 1.28 TB/s per GPU, the table 3.35 TB/s (62% apart)",
    ]


@pytest.mark.parametrize(
    ("device_name", "key"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA H200 NVL", "h200"),
        ("NVIDIA GH200 480GB", None),  # a superchip with other memory: not the H200's 4.8 TB/s
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100 80GB PCIe", "a100-80gb-pcie"),  # 1.935 TB/s, not the SXM's 2.039
        ("NVIDIA A100-PCIE-40GB", None),
        ("NVIDIA L40S", "l40s"),
    ],
)
def test_device_names_find_their_own_row(device_name, key):
    found = preset_for_device_name(device_name)
    assert (found.key if found else None) == key
