"""benchmarks/nvml_probe.py --analyse: how far the power reading trails the energy counter.

On an H200 (driver 580, 2026-12-04) NVML's power reading is a moving average of about a second
that trails the energy counter by ~0.5 s; the probe measures that shift. Here the readings of a
known lag are written as a saved probe and the script is run on them as a user would.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def true_watts(t_s: float) -> float:
    """A load that steps up at 5 s and down at 15 s, with a slow ripple while loaded."""
    if 5.0 <= t_s < 15.0:
        return 600.0 + 40.0 * ((t_s * 10) % 7) / 7
    return 100.0


def saved_probe(path: Path, *, average_s: float, hz: float = 50.0, seconds: float = 20.0) -> None:
    """Readings at ``hz``: the energy counter exact and updated every 100 ms, the power reading
    the mean of the true power over the last ``average_s`` (so it trails by average_s / 2)."""
    fine_s = 0.001
    energy_j, t_s, counter = 0.0, 0.0, 0.0
    cumulative: list[float] = []
    while t_s <= seconds + 1e-9:
        cumulative.append(energy_j)
        energy_j += true_watts(t_s) * fine_s
        t_s += fine_s
    samples = []
    for i in range(int(seconds * hz) + 1):
        t = i / hz
        k = round(t / fine_s)
        counter_t = int(t * 10) / 10  # the counter moves every 100 ms
        counter = cumulative[round(counter_t / fine_s)]
        back = max(0, k - round(average_s / fine_s))
        watts = (cumulative[k] - cumulative[back]) / ((k - back) * fine_s) if k > back else 100.0
        samples.append(
            {"t_ns": int(t * 1e9), "watts": watts, "gpu_watts": [watts], "energy_j": counter}
        )
    evidence = {
        "source": "board",
        "description": "synthetic",
        "scope": "board",
        "sampling_hz": hz,
        "samples": samples,
    }
    path.write_text(json.dumps({"evidence": evidence}))


@pytest.mark.parametrize("average_s", [0.0, 1.0])
def test_the_probe_reads_the_lag_of_an_averaged_reading(tmp_path: Path, average_s: float) -> None:
    probe = tmp_path / "probe.json"
    saved_probe(probe, average_s=average_s)
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "nvml_probe.py"), "--analyse", str(probe)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    assert "energy counter changes every 100.0 ms (median)" in out
    lag = json.loads(out.split("reading vs counter: ", 1)[1].splitlines()[0])
    # the counter's power sits at the midpoint of its 100 ms steps: +-50 ms of slack
    assert abs(lag["lag_ms"] - 1000 * average_s / 2) <= 60
    if average_s:
        # the shift takes out the delay, not the smoothing of the steps (about half the rms)
        assert lag["rms_w"] < 0.75 * lag["rms_unshifted_w"]
