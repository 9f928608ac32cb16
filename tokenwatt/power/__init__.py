"""Power sources behind one protocol, and the sampler that reads them for the whole run.

``build_source(spec.power, gpu_indices=spec.hardware.gpus)`` returns the source the spec names
(``board``, ``redfish``, ``ipmi``, ``command``, ``prometheus`` or ``none``);
``PowerSampler(source, sampling_hz=spec.power.sampling_hz)`` reads it in its own thread and
returns the raw :class:`~tokenwatt.schema.run.PowerEvidence`; :mod:`tokenwatt.energy` turns that
into the figures over the confirmed windows. A server spanning nodes (``power.nodes``) gets a
:class:`~tokenwatt.power.nodes.NodesSampler`: one sampler per node, their readings summed.
"""

from tokenwatt.power.base import (
    POWER_NOT_MEASURED,
    SOURCES,
    BuildContext,
    PowerScope,
    PowerSource,
    Reading,
    build_source,
    register_source,
)
from tokenwatt.power.board import CLOCK_EVENT_REASONS, BoardSource, reason_names
from tokenwatt.power.command import CommandSource
from tokenwatt.power.ipmi import IpmiSource
from tokenwatt.power.nodes import NodesSampler, Sampler
from tokenwatt.power.none import NoneSource
from tokenwatt.power.prometheus import PrometheusSource
from tokenwatt.power.redfish import RedfishSource
from tokenwatt.power.replay import ReplaySource
from tokenwatt.power.sampler import PowerSampler, sampler_for_spec

__all__ = [
    "CLOCK_EVENT_REASONS",
    "POWER_NOT_MEASURED",
    "SOURCES",
    "BoardSource",
    "BuildContext",
    "CommandSource",
    "IpmiSource",
    "NodesSampler",
    "NoneSource",
    "PowerSampler",
    "PowerScope",
    "PowerSource",
    "PrometheusSource",
    "Reading",
    "RedfishSource",
    "ReplaySource",
    "Sampler",
    "build_source",
    "reason_names",
    "register_source",
    "sampler_for_spec",
]
