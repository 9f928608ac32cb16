"""Build a site of N generated results with `mkdocs build --strict`; report wall time per result.

    .venv/bin/python benchmarks/site_build.py            # 500 results
    .venv/bin/python benchmarks/site_build.py --results 50 --keep /tmp/bench-site

The results are the full-mode test result (every chart: goodput, p99 TTFT and TPOT against rate,
power over time, tokens per joule) with varied ids and numbers; one in five is the quick-mode
seed and one in ten simulated, so all three index sections fill. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.result_factories import full_mode_data, seed_data  # noqa: E402
from tests.site_build import mkdocs_build, write_config, write_results  # noqa: E402

SEED = Path(os.environ.get("TOKENWATT_SHARED", REPO.parent / "shared")) / (
    "seeds/000_0589a44b1fa57eff.json"
)


def generate(count: int) -> dict[str, dict]:
    full = full_mode_data(SEED)
    seed = seed_data(SEED)
    results: dict[str, dict] = {}
    for i in range(count):
        data = copy.deepcopy(seed if i % 5 == 4 else full)
        data["id"] = f"bench-{i:04d}"
        data["title"] = f"Benchmark result {i}: {data['title']}"
        data["published"] = f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}"
        scale = 1 + (i % 37) / 100
        for config in data["configs"]:
            config["goodput_tok_s"] = round(config["goodput_tok_s"] * scale, 1)
        if i % 10 == 9:
            data["simulated"] = True
        results[f"bench-{i:04d}.json"] = data
    return results


def build(tmp: Path, results: dict[str, dict]) -> float:
    folder = write_results(tmp / "results", results)
    config = write_config(tmp, folder)
    start = time.perf_counter()
    done = mkdocs_build(config)
    wall_s = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"build failed:\n{done.stderr}")
    return wall_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=int, default=500)
    parser.add_argument("--keep", type=Path, help="build here and keep the site")
    args = parser.parse_args()
    results = generate(args.results)
    with tempfile.TemporaryDirectory() as empty_dir:
        empty_s = build(Path(empty_dir), {})
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        wall_s = build(args.keep, results)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            wall_s = build(Path(tmp), results)
    print(
        json.dumps(
            {
                "results": args.results,
                "wall_s": round(wall_s, 2),
                "per_result_s": round(wall_s / args.results, 3),
                "empty_site_s": round(empty_s, 2),
                "marginal_per_result_s": round((wall_s - empty_s) / args.results, 3),
                "cpus": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
