"""Real-GPU check of the ``board`` power source: NVML power, energy counter and clock-event
reasons sampled for 30 s under a matrix-multiply load, through tokenwatt's own code.

Read-only: it never changes clocks, power limits, application clocks or persistence mode; the
only NVML calls are queries (power, energy, reasons, limits, names, clocks).

    python benchmarks/nvml_probe.py [--seconds 30] [--hz 10] [--gpus 0] [--out probe.json]
    python benchmarks/nvml_probe.py --analyse probe.json     # the figures of a saved run again

Phases: idle 5 s, load (seconds - 10) s, idle 5 s. The load is a bf16 8192^3 matrix product in
a loop on every GPU in use, through PyTorch if it imports, else CuPy; with neither, the run is
idle throughout and says so (install torch, or run ``gpu-burn``/any CUDA load in another shell
during the middle phase). Needs tokenwatt's dependencies (pydantic, nvidia-ml-py, httpx,
pyyaml); see benchmarks/README.md for carrying them to a machine without a network.

Prints, per phase: samples, mean/max board power (sum over the GPUs in use), throttle counts;
for the load phase energy by counter difference and by integral of power and how far apart they
are; the enforced power limit; how often the power reading and the energy counter change; how
far the power reading trails the counter (the shift that best aligns the reading with the
counter's own power, its differences between the readings where it changed); and the inventory
(names, driver, memory, bus width, max memory clock, rated bandwidth and its source).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

# CUDA's default device order is "fastest first"; NVML's is PCI bus order. Align them before any
# CUDA library loads, so the GPUs loaded are the GPUs measured.
os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tokenwatt import energy
from tokenwatt.inventory import read_inventory
from tokenwatt.power import PowerSampler, build_source
from tokenwatt.schema.spec import HardwareSpec, PowerSpec

IDLE_S = 5.0
N = 8192


def start_load(gpus: list[int], stop: threading.Event) -> tuple[str, list[threading.Thread], dict]:
    """Start one matmul loop per GPU; returns the library used, the threads and a counter."""
    done = {"matmuls": 0}
    lock = threading.Lock()
    try:
        import torch

        def loop(index: int) -> None:
            device = torch.device(f"cuda:{index}")
            a = torch.randn(N, N, device=device, dtype=torch.bfloat16)
            b = torch.randn(N, N, device=device, dtype=torch.bfloat16)
            while not stop.is_set():
                for _ in range(10):
                    a @ b
                torch.cuda.synchronize(device)
                with lock:
                    done["matmuls"] += 10

        library = f"torch {torch.__version__}"
    except ImportError:
        try:
            import cupy

            def loop(index: int) -> None:
                with cupy.cuda.Device(index):
                    a = cupy.random.standard_normal((N, N), dtype=cupy.float32).astype(cupy.float16)
                    b = cupy.random.standard_normal((N, N), dtype=cupy.float32).astype(cupy.float16)
                    while not stop.is_set():
                        for _ in range(10):
                            a @ b
                        cupy.cuda.Device(index).synchronize()
                        with lock:
                            done["matmuls"] += 10

            library = f"cupy {cupy.__version__} (fp16)"
        except ImportError:
            return "none (no torch or cupy: idle throughout)", [], done
    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in gpus]
    for thread in threads:
        thread.start()
    return library, threads, done


def change_interval_ms(samples) -> float | None:
    """Median time between readings whose watts changed (NVML's own update period, roughly)."""
    changes = [
        (b.t_ns - a.t_ns) / 1e6
        for a, b in zip(samples, samples[1:], strict=False)
        if b.watts != a.watts
    ]
    return statistics.median(changes) if changes else None


def counter_update_ms(samples) -> float | None:
    """Median time between readings whose energy counter changed (the counter's update period).

    The readings where it changed are the energy module's own (its counter method uses only
    those), less the first reading, which is kept there as the counter's start.
    """
    changed = [a.t_ns for a in energy._counter_anchors(samples)[0][1:]]
    steps = [(b - a) / 1e6 for a, b in zip(changed, changed[1:], strict=False)]
    return statistics.median(steps) if steps else None


def reading_lag(samples, *, max_s: float = 2.0, step_s: float = 0.02) -> dict | None:
    """How far the power reading trails the energy counter.

    The counter's power is its difference over the time between consecutive readings where it
    changed (the energy module's, resets unwrapped), placed at their midpoint; the reading,
    interpolated at that midpoint plus a shift,
    is compared with it. Returns the shift (0 to ``max_s``) with the least rms difference, that
    rms and the rms with no shift; None without a counter that changes at least three times.
    """
    import numpy as np

    if any(s.energy_j is None for s in samples):
        return None
    t = np.array([s.t_ns for s in samples], dtype=float) / 1e9
    watts = np.array([s.watts for s in samples])
    anchors, _ = energy._counter_anchors(samples)
    if len(anchors) < 4:
        return None
    t_a = np.array([a.t_ns for a in anchors], dtype=float) / 1e9
    e_a = np.array([a.cumulative_j for a in anchors])
    mid = (t_a[1:] + t_a[:-1]) / 2
    counter_w = np.diff(e_a) / np.diff(t_a)

    def rms(shift: float) -> float:
        inside = mid + shift <= t[-1]
        return float(
            np.sqrt(np.mean((np.interp(mid[inside] + shift, t, watts) - counter_w[inside]) ** 2))
        )

    shifts = np.arange(0.0, max_s + step_s / 2, step_s)
    errors = [rms(float(shift)) for shift in shifts]
    best = int(np.argmin(errors))
    return {
        "lag_ms": 1000 * float(shifts[best]),
        "rms_w": errors[best],
        "rms_unshifted_w": errors[0],
    }


def analyse(path: Path) -> int:
    """Print the lag and update figures of a probe saved with --out."""
    from tokenwatt.schema.run import PowerEvidence

    report = json.loads(path.read_text())
    evidence = PowerEvidence.model_validate(report["evidence"])
    samples = sorted(evidence.samples, key=lambda s: s.t_ns)
    print(f"{path}: {len(samples)} readings at {evidence.sampling_hz} Hz")
    print(f"reading changes every {change_interval_ms(samples)} ms (median)")
    print(f"energy counter changes every {counter_update_ms(samples)} ms (median)")
    print(f"reading vs counter: {json.dumps(reading_lag(samples))}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--hz", type=float, default=10.0)
    parser.add_argument("--gpus", type=int, nargs="*", default=[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--analyse", type=Path, default=None, metavar="PROBE_JSON")
    args = parser.parse_args()
    if args.analyse is not None:
        return analyse(args.analyse)
    load_s = max(1.0, args.seconds - 2 * IDLE_S)

    inventory = read_inventory(HardwareSpec(gpus=args.gpus), strict=True)
    print(f"driver {inventory.driver}")
    for gpu in inventory.gpus:
        print(
            f"GPU {gpu.index}: {gpu.name}, {gpu.memory_total_mib:.0f} MiB,"
            f" limit {gpu.power_limit_w} W,"
            f" bus {gpu.memory_bus_width_bits} bit, max mem clock {gpu.max_memory_clock_mhz} MHz"
        )
    print(
        f"rated bandwidth {inventory.rated_bw_tbs_per_gpu} TB/s per GPU"
        f" ({inventory.rated_bw_source}); notes: {inventory.notes}"
    )

    source = build_source(PowerSpec(source="board", sampling_hz=args.hz), gpu_indices=args.gpus)
    sampler = PowerSampler(source, sampling_hz=args.hz)
    sampler.start()
    print(
        f"sampling {source.description} at {args.hz} Hz; energy counter:"
        f" {source.has_energy_counter}; reasons: {source.throttle_monitored};"
        f" enforced limit {source.power_limit_w} W"
    )
    t0 = time.monotonic_ns()
    time.sleep(IDLE_S)
    stop = threading.Event()
    t_load = time.monotonic_ns()
    library, threads, done = start_load(args.gpus, stop)
    time.sleep(load_s)
    stop.set()
    for thread in threads:
        thread.join()
    t_idle = time.monotonic_ns()
    time.sleep(IDLE_S)
    t_end = time.monotonic_ns()
    evidence = sampler.stop()

    phases = {"idle_before": (t0, t_load), "load": (t_load, t_idle), "idle_after": (t_idle, t_end)}
    report: dict[str, object] = {
        "load": library,
        "matmul_tflops": 2 * N**3 * done["matmuls"] / ((t_idle - t_load) / 1e9) / 1e12,
        "samples": len(evidence.samples),
        "gaps": [g.model_dump() for g in evidence.gaps],
        "power_limit_w": evidence.power_limit_w,
        "reading_change_interval_ms": change_interval_ms(evidence.samples),
        "counter_update_ms": counter_update_ms(evidence.samples),
        "reading_lag": reading_lag(sorted(evidence.samples, key=lambda s: s.t_ns)),
        "phases": {},
    }
    print(f"load: {library}; {report['matmul_tflops']:.0f} TFLOP/s")
    for name, window in phases.items():
        figures = energy.window_figures(evidence, [window], output_tokens=0)
        inside = energy.samples_in_windows(evidence.samples, [window])
        integral = energy.integral_energy_j(evidence.samples, window)
        counter = energy.counter_energy_j(evidence.samples, window)
        phase = {
            "seconds": (window[1] - window[0]) / 1e9,
            "samples": len(inside),
            "mean_w": figures.node_power_kw * 1000 if figures.node_power_kw else None,
            "max_w": max((s.watts for s in inside), default=None),
            "energy_counter_j": counter,
            "energy_integral_j": integral,
            "counter_vs_integral_pct": 100 * (counter - integral) / integral
            if counter is not None and integral
            else None,
            "throttle_counts": figures.throttle_counts,
            "max_gap_fraction": figures.max_gap_fraction,
        }
        report["phases"][name] = phase  # type: ignore[index]
        print(f"{name}: {json.dumps(phase)}")
    print(f"reading changes every {report['reading_change_interval_ms']} ms (median)")
    print(f"energy counter changes every {report['counter_update_ms']} ms (median)")
    print(f"reading vs counter: {json.dumps(report['reading_lag'])}")
    if args.out is not None:
        args.out.write_text(
            json.dumps({**report, "evidence": evidence.model_dump(mode="json")}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
