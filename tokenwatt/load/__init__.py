"""The load generator: workloads, arrival schedules and probes."""

from tokenwatt.load.probe import LoadGenerator, build_probe_record
from tokenwatt.load.workload import Workload, build_workload

__all__ = ["LoadGenerator", "Workload", "build_probe_record", "build_workload"]
