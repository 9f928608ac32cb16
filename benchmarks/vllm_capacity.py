"""SLO capacity with its interval against real vLLM (CPU build): issue 15's "a quick run against
real vLLM gives capacity with an interval".

Starts vLLM (the tiny random-weight Llama, prefix caching off) and confines every thread of it
to the CPU its worker pins itself to, so the load generator has the other CPU to itself (on two
shared cores, unconfined, vLLM's bursts delay the generator's sends by 100-200 ms and every probe
is rightly client-bound). Then `tokenwatt run` with the adaptive sweep (`--quick`, or the spec's
own windows and budget with `--full`) and `tokenwatt report` on the run: the capacity, its 95 %
interval, the binding SLO and the probes. The spec is `tests/data/vllm-tiny.spec.yaml` with an
SLO that binds on this server (p99 TTFT 200 ms, p99 TPOT 20 ms), 64-token prompts and 32-token
answers.

    .venv/bin/python benchmarks/vllm_capacity.py            # quick, ~3 min once vLLM is up
    .venv/bin/python benchmarks/vllm_capacity.py --full     # 300 probe-seconds, ~7 min
    .venv/bin/python benchmarks/vllm_capacity.py --full --budget 900
    .venv/bin/python benchmarks/vllm_capacity.py --tpot-ms 100 --max-concurrency 1024  # TTFT binds
    # a larger random Llama, so a decode step's time grows with the batch (see --model-dir)
    .venv/bin/python benchmarks/vllm_capacity.py --model-dir /tmp/peers/models/small-llama/hf
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml
from loadgen_common import PEERS, REPO, conditions, start_vllm
from loadgen_vs_vllm_bench import confine_server

from tests.peers import Peer, free_port
from tokenwatt.capacity import probe_counts
from tokenwatt.schema.run import RunFile
from tokenwatt.store import load_run

SPEC = REPO / "tests" / "data" / "vllm-tiny.spec.yaml"
TOKENWATT = Path(sys.executable).with_name("tokenwatt")


def start_vllm_model(model_dir: Path, timeout_s: float = 600.0) -> Peer:
    """vLLM (CPU) serving ``model_dir`` as "tiny", as ``start-vllm-cpu.sh`` starts the tiny one.

    The peer's script always serves the tiny model; this starts the same server, with the same
    environment and arguments, on another model folder (``make-tiny-model.py --hidden ...``).
    """
    port = free_port()
    env = {
        **os.environ,
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        "VLLM_HOST_IP": "127.0.0.1",
        "VLLM_LOOPBACK_IP": "127.0.0.1",
    }
    log_path = Path(f"/tmp/peers/logs/vllm-cpu-{port}.log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    argv = [str(PEERS / "vllm-cli.sh"), "serve", str(model_dir), "--served-model-name", "tiny"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--dtype", "float32"]
    argv += ["--max-model-len", "4096", "--no-enable-prefix-caching"]
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    peer = Peer("vllm-cpu", port, proc.pid, group=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM exited ({proc.returncode}); see {log_path}")
        try:
            with urllib.request.urlopen(f"{peer.base_url}/health", timeout=2):
                return peer
        except OSError:
            time.sleep(1)
    peer.stop()
    raise RuntimeError(f"vLLM not healthy after {timeout_s:.0f} s; see {log_path}")


def write_spec(
    path: Path,
    base_url: str,
    budget_s: float,
    ttft_ms: float = 200.0,
    tpot_ms: float = 20.0,
    max_concurrency: int = 64,
    model_dir: Path | None = None,
) -> None:
    data = yaml.safe_load(SPEC.read_text())
    if model_dir is not None:
        config = json.loads((model_dir / "config.json").read_text())
        geometry = data["model"]["geometry"]
        for key in geometry:
            if key in config:
                geometry[key] = config[key]
        geometry["head_dim"] = config.get(
            "head_dim", config["hidden_size"] // config["num_attention_heads"]
        )
        data["model"]["name"] = f"{model_dir.parent.name} (random weights)"
    data["engine"]["endpoint"] = f"{base_url}/v1"
    data["accuracy"]["suite"] = str((SPEC.parent / data["accuracy"]["suite"]).resolve())
    data["workload"].update(input_tokens=64, output_tokens=32)
    data["slo"] = {"ttft_p99_ms": ttft_ms, "tpot_p99_ms": tpot_ms}
    data["measurement"].update(
        warmup_s=5, window_s=20, search_window_s=10, max_concurrency=max_concurrency
    )
    data["sweep"] = {
        "strategy": "adaptive",
        "budget_s": budget_s,
        "precision_pct": 5,
        "start_rps": 4,
        "growth": 1.5,
        "max_rps": 200,
        "ramp": True,
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def show(run: RunFile, config: dict[str, object]) -> None:
    """Each probe's window requests over each bound (what the fit pools), then the estimate."""
    counts = probe_counts(run.probes, run.spec.slo)
    names = sorted(counts)
    print(f"\nprobes: rate, phase, window requests over the bound ({', '.join(names)}), SLO")
    by_index = {name: {c.index: c for c in counts[name]} for name in names}
    for p in run.probes:
        over = [by_index[n].get(p.index) for n in names]
        cells = " ".join(f"{c.exceeding:4d}/{c.requests:<4d}" if c else "   -     " for c in over)
        stopped = " (stopped early)" if p.early_stop is not None else ""
        bound = " client-bound" if p.client_bound else ""
        verdict = "pass" if p.slo_pass else "FAIL"
        print(f"  {p.rate_rps:7.2f} req/s {p.phase:8s} {cells} {verdict}{bound}{stopped}")
    print(
        f"\nSLO capacity {config.get('slo_capacity_rps')} req/s, 95 % CI"
        f" {config.get('slo_capacity_ci_rps')}, binding {config.get('binding_slo')};"
        f" confirmed {config.get('confirmed_rate_rps')} req/s;"
        f" {run.outcome.probe_seconds if run.outcome else 0:.0f} probe-seconds"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--full", action="store_true", help="the spec's windows, not --quick")
    parser.add_argument(
        "--budget", type=float, default=300.0, help="sweep.budget_s (probe-seconds; --full)"
    )
    parser.add_argument("--ttft-ms", type=float, default=200.0, help="slo.ttft_p99_ms")
    parser.add_argument("--tpot-ms", type=float, default=20.0, help="slo.tpot_p99_ms")
    parser.add_argument(
        "--max-concurrency", type=int, default=64, help="measurement.max_concurrency"
    )
    parser.add_argument(
        "--model-dir",
        type=Path,
        help="serve this HF model folder instead of the tiny one (make-tiny-model.py with a"
        " larger --hidden/--layers: a decode step's time then grows with the batch)",
    )
    parser.add_argument("--keep", type=Path, help="copy the run and result files here")
    parser.add_argument(
        "--show", type=Path, metavar="DIR", help="only print what --keep wrote to DIR"
    )
    args = parser.parse_args()
    if args.show is not None:
        show(
            load_run(args.show / "run.json"),
            json.loads((args.show / "r.json").read_text())["configs"][0],
        )
        return
    print(f"conditions at start: {conditions()}", flush=True)
    vllm = start_vllm() if args.model_dir is None else start_vllm_model(args.model_dir)
    try:
        server, clients = confine_server(vllm.pid)
        print(f"vLLM on CPU {sorted(server)}, tokenwatt on CPU {sorted(clients)}", flush=True)
        with tempfile.TemporaryDirectory(prefix="tw-vllm-cap-") as tmp:
            spec, run, result = Path(tmp, "spec.yaml"), Path(tmp, "run.json"), Path(tmp, "r.json")
            write_spec(
                spec,
                vllm.base_url,
                args.budget,
                args.ttft_ms,
                args.tpot_ms,
                args.max_concurrency,
                args.model_dir,
            )
            argv = [str(TOKENWATT), "run", "--spec", str(spec), "--label", "vllm-cpu"]
            argv += ["--role", "baseline", "--out", str(run), "--no-accuracy"]
            if not args.full:
                argv.append("--quick")
            subprocess.run(argv, check=True)
            subprocess.run(
                [str(TOKENWATT), "report", "--title", "vLLM CPU capacity", "--out", str(result)]
                + [str(run)],
                check=True,
            )
            loaded = load_run(run)
            config = json.loads(result.read_text())["configs"][0]
            if args.keep:
                args.keep.mkdir(parents=True, exist_ok=True)
                for f in (spec, run, result):
                    (args.keep / f.name).write_bytes(f.read_bytes())
    finally:
        vllm.stop()
    show(loaded, config)
    print(f"conditions at end: {conditions()}")


if __name__ == "__main__":
    main()
