"""Build the fake libnvidia-ml.so.1 (fake_nvml.c) and run code against it in a subprocess.

The library has to be found by the dynamic loader when the real nvidia-ml-py calls
``CDLL("libnvidia-ml.so.1")``, so each scenario runs in a fresh Python with ``LD_LIBRARY_PATH``
pointing at the built library and ``FAKE_NVML_STATE`` at its state file
(``tests/fakes/nvml_driver.py`` is what runs there).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).with_name("fake_nvml.c")
DRIVER = Path(__file__).with_name("nvml_driver.py")
REPO = Path(__file__).resolve().parents[2]


def build(out_dir: Path) -> dict[str, Path]:
    """Compile the current (R535+) and the old (no ClocksEvent symbol) variants."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise RuntimeError("gcc is not installed: run scripts/setup.d/30-power-peers.sh")
    variants = {"current": [], "old": ["-DNO_CLOCKS_EVENT_API"]}
    built: dict[str, Path] = {}
    for name, flags in variants.items():
        folder = out_dir / name
        folder.mkdir(parents=True, exist_ok=True)
        lib = folder / "libnvidia-ml.so.1"
        subprocess.run(
            [
                gcc,
                "-shared",
                "-fPIC",
                "-O2",
                "-Wall",
                "-Werror",
                *flags,
                "-Wl,-soname,libnvidia-ml.so.1",
                "-o",
                str(lib),
                str(SOURCE),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        built[name] = folder
    return built


@dataclass
class FakeNvml:
    """Runs driver actions against one built variant with a state file."""

    libs: dict[str, Path]
    state_file: Path

    def set_state(self, **values: Any) -> None:
        lines = [f"{k.replace('__', '.')}={v}" for k, v in values.items()]
        self.state_file.write_text("\n".join(lines) + "\n")

    def run(
        self, action: dict[str, Any], *, variant: str = "current", timeout_s: float = 60
    ) -> Any:
        env = {
            **os.environ,
            "LD_LIBRARY_PATH": str(self.libs[variant]),
            "FAKE_NVML_STATE": str(self.state_file),
            "PYTHONPATH": str(REPO),
        }
        proc = subprocess.run(
            [sys.executable, str(DRIVER), json.dumps(action)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"nvml driver failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        return json.loads(proc.stdout)
