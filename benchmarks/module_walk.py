"""Which tokenwatt modules one quick measurement passes through, in the order it enters them.

Profiles ``tokenwatt run --quick`` on the tiny simulator spec in this process (the load workers
and the simulator are other processes and are not followed), collapses consecutive calls within
one module, and prints how many modules it entered, how many module-to-module transitions it
made, and from where it came back to ``tokenwatt.store`` (issue 14's "a house a newcomer can
walk": a spec resolved once at the edge, the run written once at the end).

    .venv/bin/python benchmarks/module_walk.py
"""

from __future__ import annotations

import collections
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tokenwatt.cli import main  # noqa: E402

SPEC = REPO / "tests" / "data" / "tiny-sim.spec.yaml"


def walk() -> list[str]:
    seq: list[str] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        module = frame.f_globals.get("__name__") or ""
        if not module.startswith("tokenwatt") or module.startswith("tokenwatt.cli"):
            return
        if not seq or seq[-1] != module:
            seq.append(module)

    with tempfile.TemporaryDirectory() as tmp:
        argv = ["run", "--spec", str(SPEC), "--label", "walk", "--role", "baseline", "--quick"]
        argv += ["--out", str(Path(tmp) / "run.json")]
        sys.setprofile(profile)
        threading.setprofile(profile)
        try:
            rc = main(argv)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
    if rc != 0:
        raise SystemExit(f"tokenwatt run exited {rc}")
    return seq


def report(seq: list[str]) -> None:
    short = [m.removeprefix("tokenwatt.") for m in seq]
    visits = collections.Counter(short)
    print(f"modules entered: {len(visits)}; transitions between modules: {len(short)}")
    print("first entries, in order:", " > ".join(dict.fromkeys(short)))
    print("most entered:", ", ".join(f"{m} {n}" for m, n in visits.most_common(8)))
    print(f"store entered {visits['store']} times:")
    for i, m in enumerate(short):
        if m == "store":
            before = short[i - 1] if i else "-"
            after = short[i + 1] if i + 1 < len(short) else "-"
            print(f"  from {before}, on to {after}")


if __name__ == "__main__":
    report(walk())
