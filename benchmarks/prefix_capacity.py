"""SLO capacity of the simulator with 0 %, 50 % and 90 % of every prompt in a shared prefix.

The spec's engine, model and SLO, with fixed prompt and answer lengths (``--input``, ``--output``)
whose first ``share x input`` tokens are one of ``--groups`` shared prefixes
(``workload.prefix``; 0 % = unique prompts). For each share: the engine's steady-state capacity
(``tokenwatt.plan.true_capacity``, the bisection ``tokenwatt plan`` compares its estimates with,
here with ``--window`` s windows and ``--seeds`` seeds), the prefix-cache hit rate the workload's
construction predicts (``tokenwatt.load.prefix.expected_hit_rate``) and the one the simulator's
counters measured in a window at that capacity, and p99 TTFT / TPOT there. All in virtual time.

    .venv/bin/python benchmarks/prefix_capacity.py --spec specs/sim-seed-full.spec.yaml
    .venv/bin/python benchmarks/prefix_capacity.py --spec specs/demo-sim.spec.yaml --output 64
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tokenwatt.load.prefix import expected_hit_rate  # noqa: E402
from tokenwatt.plan import _server, engine_config, true_capacity, with_spec  # noqa: E402
from tokenwatt.schema.spec import LoadedSpec, PrefixSpec  # noqa: E402
from tokenwatt.store import load_spec  # noqa: E402
from tokenwatt.sweep import ProbePlan  # noqa: E402


def shared_spec(
    loaded: LoadedSpec, *, share: float, input_tokens: int, output_tokens: int, groups: int
) -> LoadedSpec:
    """The spec with fixed lengths and ``share`` of each prompt in one of ``groups`` prefixes."""
    shared = round(share * input_tokens)
    spec = loaded.spec
    workload = spec.workload.model_copy(
        update={
            "input_tokens": input_tokens - shared,  # the own part; the prefix comes before it
            "output_tokens": output_tokens,
            "prefix": PrefixSpec(groups=groups, shared_tokens=shared) if shared else None,
        }
    )
    return with_spec(loaded, spec.model_copy(update={"workload": workload}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, default=REPO / "specs/sim-seed-full.spec.yaml")
    ap.add_argument("--input", type=int, default=2048, help="prompt tokens, prefix included")
    ap.add_argument("--output", type=int, default=256, help="answer tokens")
    ap.add_argument("--groups", type=int, default=8, help="distinct shared prefixes")
    ap.add_argument("--shares", default="0,0.5,0.9", help="shared fractions of the prompt")
    ap.add_argument("--window", type=float, default=120.0, help="truth window, s")
    ap.add_argument("--warmup", type=float, default=30.0, help="truth warm-up, s")
    ap.add_argument("--seeds", type=int, default=3, help="truth seeds (their windows pooled)")
    ap.add_argument("--tolerance", type=float, default=0.01, help="truth bisection precision")
    args = ap.parse_args()
    base = load_spec(args.spec)
    print(
        f"{base.spec.name}: {args.input} prompt tokens, {args.output} output tokens,"
        f" {args.groups} prefix groups; truth: {args.window:g} s windows after"
        f" {args.warmup:g} s, {args.seeds} seeds, to {args.tolerance:.0%}"
    )
    print()
    print(
        "| shared | prefix + own tokens | expected hit rate | measured hit rate | SLO capacity"
        " | vs unique | p99 TTFT | p99 TPOT | CPU s |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    first: float | None = None
    bracket = (1.0, 2.0)
    for share in (float(s) for s in args.shares.split(",")):
        loaded = shared_spec(
            base,
            share=share,
            input_tokens=args.input,
            output_tokens=args.output,
            groups=args.groups,
        )
        spec = loaded.spec
        config = engine_config(loaded)
        started = time.process_time()
        truth = true_capacity(
            loaded,
            config,
            bracket_rps=bracket,
            window_s=args.window,
            warmup_s=args.warmup,
            seeds=args.seeds,
            tolerance=args.tolerance,
        )
        capacity = truth.true_capacity_rps
        bracket = (capacity, capacity * 1.25)  # more sharing: at least as much capacity
        server = _server(loaded, config, float(spec.measurement.request_timeout_s))
        plan = ProbePlan(
            phase="search", rate_rps=capacity, warmup_s=args.warmup, window_s=args.window
        )
        record = server.probe(plan, index=0, slo=spec.slo).record
        cpu_s = time.process_time() - started
        prefix = spec.workload.prefix
        expected = 0.0
        if prefix is not None:
            expected = expected_hit_rate(
                groups=prefix.groups,
                shared_tokens=prefix.shared_tokens,
                own_tokens_mean=args.input - prefix.shared_tokens,
                block_tokens=config.block_size,
                warmup_requests=capacity * args.warmup,
                window_requests=capacity * args.window,
            )
        measured = record.engine.prefix_cache_hit_rate_pct if record.engine else None
        first = first or capacity
        shared_tokens = prefix.shared_tokens if prefix else 0
        print(
            f"| {share:.0%} | {shared_tokens:,} + {args.input - shared_tokens:,}"
            f" | {expected:.1%} | {'n/a' if measured is None else f'{measured:.1f}%'}"
            f" | {capacity:.2f} req/s | {capacity / first - 1:+.0%}"
            f" | {record.ttft_ms.p99:.0f} ms | {record.tpot_ms.p99:.1f} ms | {cpu_s:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
