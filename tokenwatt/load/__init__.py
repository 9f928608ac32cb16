"""The load generator: workloads, arrival schedules and probes (imported on first use)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tokenwatt.load.probe import LoadGenerator, build_probe_record
    from tokenwatt.load.workload import Workload, build_workload

_EXPORTS = {
    "LoadGenerator": "tokenwatt.load.probe",
    "build_probe_record": "tokenwatt.load.probe",
    "Workload": "tokenwatt.load.workload",
    "build_workload": "tokenwatt.load.workload",
}

__all__ = ["LoadGenerator", "Workload", "build_probe_record", "build_workload"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tokenwatt.load' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
