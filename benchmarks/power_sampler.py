"""Power sampler and energy figures: timing accuracy, cost, and per-read latency of real peers.

    .venv/bin/python benchmarks/power_sampler.py            # everything (~40 s)
    .venv/bin/python benchmarks/power_sampler.py --no-peers # without starting the peers

1. Tick accuracy of PowerSampler on a ReplaySource at 1, 10, 50 and 200 Hz: readings per
   second achieved, deviation of the read times from the ideal grid (p50/p99), CPU used.
2. Cost of a long run: building the PowerEvidence of 360,000 readings (50 Hz for 2 h) and
   computing window_figures over three 120 s windows, with peak memory (tracemalloc).
3. Latency of one read from each real peer (../shared/peers): sushy-tools Redfish over HTTPS,
   nginx Redfish with a session token, ipmi_sim DCMI via ipmitool, node-exporter, a command.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tokenwatt import energy
from tokenwatt.power import (
    CommandSource,
    IpmiSource,
    PowerSampler,
    PowerSource,
    PrometheusSource,
    Reading,
    RedfishSource,
    ReplaySource,
)
from tokenwatt.schema.run import PowerEvidence, PowerSample

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TOKENWATT_SHARED", REPO.parent / "shared"))
PEERS = Path(os.environ.get("TOKENWATT_PEERS_DIR", Path(tempfile.gettempdir()) / "tokenwatt-peers"))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def tick_accuracy() -> None:
    print("## 1. sampler tick accuracy (ReplaySource)")
    print("| Hz | seconds | readings/s | grid offset p50 ms | p99 ms | CPU % of one core |")
    print("| --- | --- | --- | --- | --- | --- |")
    for hz, seconds in ((1, 5.0), (10, 3.0), (50, 3.0), (200, 2.0)):
        sampler = PowerSampler(ReplaySource([Reading(100.0)]), sampling_hz=hz)
        cpu0 = time.process_time()
        sampler.start()
        time.sleep(seconds)
        ev = sampler.stop()
        cpu_pct = 100 * (time.process_time() - cpu0) / seconds
        period = 1e9 / hz
        t0 = ev.samples[0].t_ns
        offsets = [
            abs((s.t_ns - t0) - round((s.t_ns - t0) / period) * period) / 1e6 for s in ev.samples
        ]
        rate = (len(ev.samples) - 1) / ((ev.samples[-1].t_ns - t0) / 1e9)
        print(
            f"| {hz} | {seconds:g} | {rate:.2f} | {statistics.median(offsets):.3f} |"
            f" {pct(offsets, 0.99):.3f} | {cpu_pct:.1f} |"
        )


def long_run() -> None:
    print("\n## 2. a 2 h run at 50 Hz (360,000 readings)")
    n = 360_000
    tracemalloc.start()
    t = time.perf_counter()
    samples = [
        PowerSample(
            t_ns=i * 20_000_000,
            watts=600.0 + (i % 50),
            gpu_watts=[300.0, 300.0 + (i % 50)],
            energy_j=i * 12.5,
            throttle_reasons=["sw_power_cap"] if i % 7 == 0 else [],
        )
        for i in range(n)
    ]
    ev = PowerEvidence(
        source="board", description="bench", scope="board", sampling_hz=50, samples=samples
    )
    build_s = time.perf_counter() - t
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    windows = [(k * 2_000_000_000_000, k * 2_000_000_000_000 + 120_000_000_000) for k in (1, 2, 3)]
    t = time.perf_counter()
    figures = energy.window_figures(ev, windows, output_tokens=1_000_000)
    figures_s = time.perf_counter() - t
    t = time.perf_counter()
    text = ev.model_dump_json()
    dump_s = time.perf_counter() - t
    print(f"- build PowerEvidence: {build_s:.2f} s, peak memory {peak / 2**20:.0f} MiB")
    print(f"- window_figures over 3 windows: {figures_s:.2f} s ({figures.energy_method})")
    print(f"- model_dump_json: {dump_s:.2f} s, {len(text) / 2**20:.0f} MiB of JSON")


def latency(name: str, source: PowerSource, reads: int = 20) -> None:
    with source:
        times = []
        for _ in range(reads):
            t = time.perf_counter()
            source.read()
            times.append((time.perf_counter() - t) * 1000)
    print(f"| {name} | {statistics.median(times):.1f} | {pct(times, 0.95):.1f} |")


def script(name: str, *args: str, env: dict[str, str]) -> str:
    proc = subprocess.run(
        ["bash", str(SHARED / "peers" / name), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.strip()


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def peers() -> None:
    print("\n## 3. one read from each real peer (20 reads, loopback)")
    print("| source | median ms | p95 ms |")
    print("| --- | --- | --- |")
    PEERS.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-", dir=PEERS))
    work.chmod(0o755)
    started: list[tuple[str, dict[str, str]]] = []
    try:
        sushy = {"REDFISH_DIR": str(work / "sushy")}
        (work / "sushy").mkdir()
        (work / "sushy" / "venv").symlink_to(PEERS / "sushy-venv")
        port = free_port()
        script("start-redfish.sh", str(port), env=sushy)
        started.append(("start-redfish.sh", sushy))
        latency(
            "redfish (sushy-static, HTTPS, basic)", RedfishSource(url=f"https://127.0.0.1:{port}")
        )

        nginx = {
            "REDFISH_DIR": str(work / "nginx"),
            "REDFISH_SERVER": "nginx",
            "REDFISH_PASS": "pw",
        }
        port = free_port()
        script("start-redfish.sh", str(port), env=nginx)
        started.append(("start-redfish.sh", nginx))
        latency(
            "redfish (nginx, HTTPS, session token)",
            RedfishSource(url=f"https://127.0.0.1:{port}", username="admin", password="pw"),
        )

        ipmi = {"IPMI_DIR": str(work / "ipmi")}
        port = free_port()
        script("start-ipmi.sh", str(port), env=ipmi)
        started.append(("start-ipmi.sh", ipmi))
        latency(
            "ipmi (ipmi_sim, ipmitool dcmi)",
            IpmiSource(host=f"127.0.0.1:{port}", username="admin", password="password"),
        )

        textfile = work / "textfile"
        textfile.mkdir()
        (textfile / "dcgm.prom").write_text(
            "".join(f'DCGM_FI_DEV_POWER_USAGE{{gpu="{i}"}} 400\n' for i in range(8))
        )
        port = free_port()
        exporter = subprocess.Popen(
            [
                "prometheus-node-exporter",
                f"--web.listen-address=127.0.0.1:{port}",
                "--collector.disable-defaults",
                "--collector.textfile",
                f"--collector.textfile.directory={textfile}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(1.0)
            latency(
                "prometheus (node-exporter, 8 GPUs)",
                PrometheusSource(url=f"http://127.0.0.1:{port}/metrics"),
            )
        finally:
            exporter.terminate()
            exporter.wait()
        latency("command (`echo 412.5`)", CommandSource(command="echo 412.5"))
    finally:
        for name, env in started:
            script(name, "stop", env=env)
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-peers", action="store_true")
    args = parser.parse_args()
    tick_accuracy()
    long_run()
    if not args.no_peers:
        peers()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
