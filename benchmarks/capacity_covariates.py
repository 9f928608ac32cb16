"""How much of a probe's count over the TPOT bound its own workload explains (issue 15's lead).

Runs ``--probes`` virtual-time probes of one spec at one rate, each on its own workload stream
(30 s warm-up, ``--window`` s window), and relates each probe's share of window requests over the
TPOT bound (failed ones count as over) to covariates of the requests it sent: the window's
totals (requests, prompt and output tokens) and, per bin of 2, 5 and 10 s of scheduled send
times, the largest bin and the sum of squared bins (bursts). Prints each covariate's correlation
with the share and the R^2 of least squares on the totals and on the four best covariates. An
R^2 of r means a fit adjusted for those covariates (a control variate) could cut the estimate's
variance by about that fraction.

    .venv/bin/python benchmarks/capacity_covariates.py --spec specs/demo-sim.spec.yaml --rate 11
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tokenwatt.plan import _server, engine_config  # noqa: E402
from tokenwatt.store import load_spec  # noqa: E402
from tokenwatt.sweep import ProbePlan  # noqa: E402

BINS_S = (2.0, 5.0, 10.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=REPO / "specs" / "demo-sim.spec.yaml")
    parser.add_argument("--rate", type=float, default=11.0, help="req/s")
    parser.add_argument("--window", type=float, default=60.0, help="s")
    parser.add_argument("--probes", type=int, default=80)
    args = parser.parse_args()
    loaded = load_spec(args.spec)
    config = engine_config(loaded)
    slo = loaded.spec.slo
    server = _server(loaded, config, float(loaded.spec.measurement.request_timeout_s))
    shares: list[float] = []
    rows: list[dict[str, float]] = []
    for stream in range(args.probes):
        plan = ProbePlan(phase="refine", rate_rps=args.rate, warmup_s=30.0, window_s=args.window)
        table = server.probe(plan, index=stream, slo=slo).record.requests
        values = [
            math.inf if status != "ok" else tpot
            for tpot, status in zip(table.tpot_ms, table.status, strict=True)
            if not (status == "ok" and tpot is None)
        ]
        shares.append(sum(v > slo.tpot_p99_ms for v in values) / len(values))
        sent = np.array(table.t_sched_s)
        prompt = np.array(table.input_tokens, dtype=float)
        output = np.array(table.output_tokens, dtype=float)
        row = {"requests": float(len(sent)), "prompt_tokens": prompt.sum(), "output": output.sum()}
        for width in BINS_S:
            bins = np.floor(sent / width).astype(int)
            for name, weight in (("n", np.ones_like(prompt)), ("in", prompt), ("out", output)):
                per_bin = np.bincount(bins, weights=weight)
                row[f"max_{name}_{width:g}s"] = float(per_bin.max())
                row[f"sq_{name}_{width:g}s"] = float((per_bin**2).sum())
        rows.append(row)
    q = np.array(shares)
    binomial = q.mean() * (1 - q.mean()) / np.mean([r["requests"] for r in rows])
    print(
        f"share over the TPOT bound: mean {q.mean():.4f}, sd {q.std():.4f}, "
        f"{q.var() / binomial:.1f}x the binomial variance; {args.probes} probes"
    )
    columns = {name: np.array([r[name] for r in rows]) for name in rows[0]}
    corr = {name: float(np.corrcoef(x, q)[0, 1]) for name, x in columns.items() if x.std() > 0}
    for name, rho in corr.items():
        print(f"  {name:16s} correlation {rho:+.3f}")

    def r_squared(names: list[str]) -> float:
        design = np.column_stack([np.ones_like(q)] + [columns[n] for n in names])
        beta, *_ = np.linalg.lstsq(design, q, rcond=None)
        return float(1 - (q - design @ beta).var() / q.var())

    print(f"R^2, window totals: {r_squared(['requests', 'prompt_tokens', 'output']):.3f}")
    best = sorted(corr, key=lambda n: -abs(corr[n]))[:4]
    print(f"R^2, the four best {best}: {r_squared(best):.3f}")


if __name__ == "__main__":
    main()
