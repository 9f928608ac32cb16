"""tokenwatt: LLM serving goodput per second and per watt under a latency SLO.

The public API: load and save the three file kinds, and their models. They are imported on
first use, so that a process that needs one module (a load worker, the calibration server)
does not pay for the schemas it never touches.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tokenwatt.errors import TokenwattError
    from tokenwatt.schema import ResultFile, RunFile, Spec
    from tokenwatt.schema.spec import LoadedSpec
    from tokenwatt.store import load_result, load_run, load_spec, save_result, save_run

try:
    __version__ = version("tokenwatt")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

_EXPORTS = {
    "LoadedSpec": "tokenwatt.schema.spec",
    "ResultFile": "tokenwatt.schema",
    "RunFile": "tokenwatt.schema",
    "Spec": "tokenwatt.schema",
    "TokenwattError": "tokenwatt.errors",
    "load_result": "tokenwatt.store",
    "load_run": "tokenwatt.store",
    "load_spec": "tokenwatt.store",
    "save_result": "tokenwatt.store",
    "save_run": "tokenwatt.store",
}

__all__ = [
    "LoadedSpec",
    "ResultFile",
    "RunFile",
    "Spec",
    "TokenwattError",
    "__version__",
    "load_result",
    "load_run",
    "load_spec",
    "save_result",
    "save_run",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tokenwatt' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
