"""``tokenwatt export`` of a huge run: 100,000 window requests, in each format.

Builds a run file through the schema models (``--probes`` probes of ``--requests`` window
requests each, 1 % failed, plus 1 Hz readings of two GPUs for two hours), saves it, then runs
``tokenwatt export`` in-process once per format into a fresh folder and prints one JSON line:
the run file's size, the time to load and validate it alone, and each format's wall time (load,
tables and writing together) and output size.

    .venv/bin/python benchmarks/export_huge.py                 # 100 probes x 1,000 requests
    .venv/bin/python benchmarks/export_huge.py --probes 10 --requests 100
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests import factories  # noqa: E402
from tokenwatt import export, store  # noqa: E402
from tokenwatt.cli import main as cli_main  # noqa: E402
from tokenwatt.schema.run import PowerEvidence, PowerSample, RequestTable, RunFile  # noqa: E402


def huge_run(probes: int, requests: int, *, seed: int = 0) -> RunFile:
    rng = random.Random(seed)
    records = []
    for i in range(probes):
        status = ["ok" if rng.random() > 0.01 else "timeout" for _ in range(requests)]
        ok = [s == "ok" for s in status]
        table = RequestTable(
            t_sched_s=sorted(rng.uniform(0, 60) for _ in range(requests)),
            send_lag_ms=[rng.expovariate(5.0) for _ in range(requests)],
            ttft_ms=[rng.lognormvariate(5.5, 0.4) if k else None for k in ok],
            tpot_ms=[rng.lognormvariate(3.3, 0.2) if k else None for k in ok],
            e2e_ms=[rng.lognormvariate(8.0, 0.3) if k else None for k in ok],
            input_tokens=[rng.randint(100, 4096) for _ in range(requests)],
            output_tokens=[rng.randint(16, 1024) if k else 0 for k in ok],
            status=status,
        )
        records.append(
            factories.probe_with_requests(
                i,
                10.0 + i * 0.1,
                table,
                window_s=60.0,
                slo_pass=False,
                failures_by_cause={"timeout": status.count("timeout")},
            )
        )
    start_ns = records[0].window_start_ns
    samples = [
        PowerSample(
            t_ns=start_ns + s * 1_000_000_000,
            watts=1200.0 + rng.uniform(-50, 50),
            gpu_watts=[600.0 + rng.uniform(-25, 25), 600.0 + rng.uniform(-25, 25)],
            energy_j=1200.0 * s,
        )
        for s in range(7200)
    ]
    power = PowerEvidence(
        source="board", description="GPU board power sum", scope="board", sampling_hz=1
    )
    return factories.run(
        probes=records, outcome=None, power=power.model_copy(update={"samples": samples})
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=100)
    parser.add_argument("--requests", type=int, default=1000, help="window requests per probe")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    run = huge_run(args.probes, args.requests)
    figures: dict[str, object] = {"requests": args.probes * args.requests, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "huge.json"
        store.save_run(run, path)
        figures["run_file_mib"] = round(path.stat().st_size / 2**20, 1)
        start = time.perf_counter()
        store.load_run(path)
        figures["load_s"] = round(time.perf_counter() - start, 2)
        for fmt in export.FORMATS:
            out = Path(tmp) / fmt
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                code = cli_main(["-q", "export", str(path), "--format", fmt, "--out", str(out)])
            wall_s = time.perf_counter() - start
            if code != 0:
                sys.exit(f"export --format {fmt} failed with exit status {code}")
            size = sum(p.stat().st_size for p in out.iterdir())
            figures[f"{fmt}_s"] = round(wall_s, 2)
            figures[f"{fmt}_mib"] = round(size / 2**20, 1)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
