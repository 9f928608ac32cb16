"""The embedded engine simulator: a vLLM-like server for a chosen GPU and model.

It makes the whole pipeline runnable without a GPU, gives ground truth to check the sweep and the
MBU estimate against, and lets a spec be dry-run before renting hardware. It always says it is
simulated (``/version``), and everything measured against it is marked simulated.
"""

from tokenwatt.sim.engine import EngineConfig, EngineCore, EngineLoop, SimRequest
from tokenwatt.sim.launch import (
    SimProcess,
    SimSettings,
    launch,
    launch_for_spec,
    settings_from_spec,
)
from tokenwatt.sim.offline import simulate
from tokenwatt.sim.server import SIM_VERSION, SimApp

__all__ = [
    "SIM_VERSION",
    "EngineConfig",
    "EngineCore",
    "EngineLoop",
    "SimApp",
    "SimProcess",
    "SimRequest",
    "SimSettings",
    "launch",
    "launch_for_spec",
    "settings_from_spec",
    "simulate",
]
