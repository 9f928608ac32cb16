"""Build a site of N generated results with `mkdocs build --strict`; report wall time per result.

    .venv/bin/python benchmarks/site_build.py            # 500 results
    .venv/bin/python benchmarks/site_build.py --results 50 --keep /tmp/bench-site

The results are the full-mode test result (every chart: goodput, p99 TTFT and TPOT against rate,
power over time, tokens per joule) with varied ids and numbers; one in five is the quick-mode
seed and one in ten simulated, so all three index sections fill; each result's config labels name
it, so no two results share a chart. The site is built twice on one fresh chart cache (its own
temporary folder, never the user's): cold (every chart drawn), then warm (the same results
again: every chart read back). Prints one JSON line.
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
            # Every chart names its configs: each result's charts are its own, as measured
            # results' are, so a cold build draws every one of them.
            config["label"] = f"{config['label']} (result {i})"
        if i % 10 == 9:
            data["simulated"] = True
        results[f"bench-{i:04d}.json"] = data
    return results


def build(tmp: Path, results: dict[str, dict], *, cache: Path, times: int = 1) -> list[float]:
    """Wall time of each of ``times`` builds of the same site on one chart cache."""
    folder = write_results(tmp / "results", results)
    config = write_config(tmp, folder)
    walls: list[float] = []
    for _ in range(times):
        start = time.perf_counter()
        done = mkdocs_build(config, env={"TOKENWATT_CACHE": str(cache)})
        walls.append(time.perf_counter() - start)
        if done.returncode != 0:
            sys.exit(f"build failed:\n{done.stderr}")
    return walls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=int, default=500)
    parser.add_argument("--keep", type=Path, help="build here and keep the site")
    args = parser.parse_args()
    results = generate(args.results)
    with tempfile.TemporaryDirectory() as empty_dir:
        [empty_s] = build(Path(empty_dir), {}, cache=Path(empty_dir) / "cache")
    with tempfile.TemporaryDirectory() as cache:
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            cold_s, warm_s = build(args.keep, results, cache=Path(cache), times=2)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                cold_s, warm_s = build(Path(tmp), results, cache=Path(cache), times=2)
        entries = sum(1 for _ in (Path(cache) / "charts").iterdir())
    n = args.results
    print(
        json.dumps(
            {
                "results": n,
                "cold_wall_s": round(cold_s, 2),
                "cold_per_result_s": round(cold_s / n, 3),
                "warm_wall_s": round(warm_s, 2),
                "warm_per_result_s": round(warm_s / n, 3),
                "empty_site_s": round(empty_s, 2),
                "cold_marginal_per_result_s": round((cold_s - empty_s) / n, 3),
                "warm_marginal_per_result_s": round((warm_s - empty_s) / n, 3),
                "cached_charts": entries,
                "cpus": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
