"""The load generator's self-calibration on this host (tokenwatt.load.calibrate), printed as JSON.

    .venv/bin/python benchmarks/calibration.py --start-rps 20 --max-rps 2000 --output-tokens 100
    .venv/bin/python benchmarks/calibration.py --start-rps 400 --max-rps 400 --output-tokens 256 \
        --itl-ms 10 --repeat 3       # issue 19's 1,000 streams x 100 tok/s, three times

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
    p.add_argument(
        "--itl-ms", type=float, default=None, help="the server's token gap (default: 1 s / tokens)"
    )
    p.add_argument("--repeat", type=int, default=1, help="calibrations one after the other")
    args = p.parse_args()
    spec = factories.spec(
        workload={"input_tokens": 64, "output_tokens": args.output_tokens, "seed": 1},
        sweep={"start_rps": args.start_rps, "max_rps": args.max_rps},
    )
    work = build_workload(spec, context_tokens=4096)
    for _ in range(args.repeat):
        t0 = time.monotonic()
        cal = asyncio.run(
            calibrate(
                spec.engine,
                work,
                spec.sweep,
                request_timeout_s=30,
                max_concurrency=8192,
                itl_ms=args.itl_ms,
            )
        )
        print(json.dumps(cal.model_dump(), indent=1))
        print(calibration_text(cal), f"(wall {time.monotonic() - t0:.1f} s)")


if __name__ == "__main__":
    main()
