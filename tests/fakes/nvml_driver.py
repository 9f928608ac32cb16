"""Runs inside a subprocess whose loader finds the fake libnvidia-ml.so.1 (see nvml.py).

argv[1] is a JSON action; the result is printed as JSON on stdout:
  {"action": "sample", "gpus": [..] | null, "hz": 20, "steps": [[delay_s, {"key": value}], ...]}
      run a PowerSampler on the board source; after each delay, merge the keys into the state
      file (what a GPU would do on its own); then stop and print the evidence.
  {"action": "open", "gpus": [..] | null}      open the board source; print the error, if any.
  {"action": "inventory", "hardware": {...}, "gpus_in_use": N | null}
      print read_inventory(HardwareSpec(...), gpus_in_use=N).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import pynvml

from tokenwatt.errors import PowerError
from tokenwatt.inventory import read_inventory
from tokenwatt.power import PowerSampler, build_source
from tokenwatt.schema.spec import HardwareSpec, PowerSpec


def emit(result: object) -> None:
    sys.stdout.write(json.dumps(result) + "\n")


def merge_state(updates: dict[str, object]) -> None:
    path = Path(os.environ["FAKE_NVML_STATE"])
    lines = path.read_text().splitlines() if path.exists() else []
    keys = {k for k in updates}
    kept = [ln for ln in lines if ln.split("=", 1)[0] not in keys]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(kept + [f"{k}={v}" for k, v in updates.items()]) + "\n")
    tmp.replace(path)


def loaded_library() -> str:
    """The file the process mapped for libnvidia-ml.so.1 (proves the fake was loaded)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        if line.endswith("libnvidia-ml.so.1"):
            return line.split()[-1]
    return ""


def binding_facts() -> dict[str, object]:
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    try:
        pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
        event_api = "present"
    except pynvml.NVMLError_FunctionNotFound:
        event_api = "FunctionNotFound"
    pynvml.nvmlShutdown()
    return {
        "binding_file": pynvml.__file__,
        "library": loaded_library(),
        "event_api": event_api,
    }


def main() -> None:
    action = json.loads(sys.argv[1])
    kind = action["action"]
    if kind == "sample":
        source = build_source(PowerSpec(source="board"), gpu_indices=action.get("gpus"))
        sampler = PowerSampler(source, sampling_hz=action.get("hz", 20))
        sampler.start()
        for delay_s, updates in action.get("steps", []):
            time.sleep(delay_s)
            merge_state(updates)
        time.sleep(action.get("tail_s", 0.25))
        evidence = sampler.stop()
        emit(
            {
                "evidence": evidence.model_dump(mode="json"),
                "has_energy_counter": source.has_energy_counter,
                "gpu_indices": getattr(source, "gpu_indices", None),
                **binding_facts(),
            }
        )
    elif kind == "open":
        source = build_source(PowerSpec(source="board"), gpu_indices=action.get("gpus"))
        try:
            source.open()
        except PowerError as exc:
            emit({"error": str(exc)})
            return
        source.close()
        emit({"error": None})
    elif kind == "inventory":
        try:
            inv = read_inventory(
                HardwareSpec(**action["hardware"]),
                strict=action.get("strict", False),
                gpus_in_use=action.get("gpus_in_use"),
            )
        except PowerError as exc:
            emit({"error": str(exc)})
            return
        data = dataclasses.asdict(inv)
        data["gpus"] = [g.model_dump(mode="json") for g in inv.gpus]
        data["rated_bw_tbs_total"] = inv.rated_bw_tbs_total
        emit(data)
    else:
        raise SystemExit(f"unknown action {kind!r}")


if __name__ == "__main__":
    main()
