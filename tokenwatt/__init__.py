"""tokenwatt: LLM serving goodput per second and per watt under a latency SLO.

The public API: load and save the three file kinds, and their models.
"""

from importlib.metadata import PackageNotFoundError, version

from tokenwatt.errors import TokenwattError
from tokenwatt.schema import ResultFile, RunFile, Spec
from tokenwatt.schema.spec import LoadedSpec
from tokenwatt.store import load_result, load_run, load_spec, save_result, save_run

try:
    __version__ = version("tokenwatt")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

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
