"""The load generator's self-calibration on this host (tokenwatt.load.calibrate), printed as JSON.

    .venv/bin/python benchmarks/calibration.py --start-rps 20 --max-rps 2000 --output-tokens 100

Rungs x4 from --start-rps to --max-rps against the calibration server, stopping at the first
client-bound one, exactly as ``tokenwatt run`` does before its first probe.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from tests import factories
from tokenwatt.load.calibrate import calibrate, calibration_text
from tokenwatt.load.workload import build_workload


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--start-rps", type=float, default=20.0)
    p.add_argument("--max-rps", type=float, default=2000.0)
    p.add_argument("--output-tokens", type=int, default=100)
    args = p.parse_args()
    spec = factories.spec(
        workload={"input_tokens": 64, "output_tokens": args.output_tokens, "seed": 1},
        sweep={"start_rps": args.start_rps, "max_rps": args.max_rps},
    )
    work = build_workload(spec, context_tokens=4096)
    t0 = time.monotonic()
    cal = asyncio.run(
        calibrate(spec.engine, work, spec.sweep, request_timeout_s=30, max_concurrency=8192)
    )
    print(json.dumps(cal.model_dump(), indent=1))
    print(calibration_text(cal), f"(wall {time.monotonic() - t0:.1f} s)")


if __name__ == "__main__":
    main()
