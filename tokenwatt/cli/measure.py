"""``tokenwatt measure`` (alias ``run``): sweep to the SLO boundary and write a run file.

The terminal shows the phase, the probe in progress (rate, workers, time left in it) and a table
of finished probes with their p99 TTFT and TPOT against the SLO; without a terminal it logs one
line per event, and ``--json-log`` writes one JSON object per event to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shlex
import signal
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar, get_args

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text
from typing_extensions import override

from tokenwatt import redact, store
from tokenwatt.cli._common import (
    err_console,
    escape,
    out_console,
    progress_replaces_info_log,
    text_arg,
)
from tokenwatt.measure import TERMINATED, MeasureOptions, Progress, measure
from tokenwatt.report import quote_arg
from tokenwatt.schema.base import Role
from tokenwatt.schema.run import ProbeRecord
from tokenwatt.schema.spec import SloSpec
from tokenwatt.sweep import ProbePlan

__all__ = [
    "JsonProgress",
    "LogProgress",
    "TerminalProgress",
    "command_line",
    "register",
    "run",
    "run_until_signal",
]

T = TypeVar("T")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``measure`` and its alias ``run``."""
    p = sub.add_parser(
        "measure",
        aliases=["run"],
        help="measure one configuration: sweep to the SLO boundary, write runs/*.json",
        description="Pre-flight checks, the accuracy gate, then the rate sweep (grow, bisect,"
        " confirm, back off); power and MBU over the confirmed windows. Ctrl-C writes what was"
        " measured, marked incomplete.",
    )
    p.add_argument(
        "--spec", required=True, help="spec file (a bare name is also looked up in specs/)"
    )
    p.add_argument("--label", required=True, type=text_arg, help="name of this configuration")
    p.add_argument("--role", required=True, choices=get_args(Role))
    p.add_argument("--out", required=True, type=Path, help="run file to write")
    p.add_argument(
        "--description", type=text_arg, help="label shown on the page (default: --label)"
    )
    p.add_argument(
        "--quick", action="store_true", help="short windows, one repeat: validation only"
    )
    p.add_argument("--no-accuracy", action="store_true", help="skip the accuracy check")
    p.add_argument("--json-log", action="store_true", help="one JSON object per event on stderr")
    p.add_argument(
        "--force", action="store_true", help="replace an existing run file at --out (only a run)"
    )
    p.add_argument(
        "--ray",
        nargs="?",
        const="auto",
        metavar="ADDRESS",
        help="run the load workers as actors on this Ray cluster ('auto', HOST:PORT or"
        " ray://HOST:PORT; default auto: the cluster this host joined); replaces"
        " load.cluster.address. Needs pip install 'tokenwatt[ray]'",
    )
    p.add_argument(
        "--resume",
        type=Path,
        metavar="RUN",
        help="continue this incomplete run file (same spec, seeds, label and role): its probes"
        " are replayed into the sweep and only the rest is measured; --out may name it",
    )
    p.set_defaults(handler=run)


def command_line(args: argparse.Namespace) -> str:
    """The command as it will appear in the reproduce block (free text always single-quoted)."""
    parts = [
        "tokenwatt",
        args.command,
        "--spec",
        shlex.quote(args.spec),
        "--label",
        quote_arg(args.label),
        "--role",
        args.role,
        "--out",
        shlex.quote(str(args.out)),
    ]
    if args.description:
        parts += ["--description", quote_arg(args.description)]
    if args.quick:
        parts.append("--quick")
    if args.no_accuracy:
        parts.append("--no-accuracy")
    if args.ray is not None:
        parts += ["--ray", shlex.quote(args.ray)]
    return " ".join(parts)


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    if value == float("inf"):
        return "inf"
    return f"{value:,.1f}"


class _Base(Progress):
    def __init__(self, slo: SloSpec, *, rate_unit: str = "req/s") -> None:
        self.slo = slo
        self.rate_unit = rate_unit
        """What a rate counts: requests, or sessions with ``workload.sessions``."""
        self.t0 = time.monotonic()
        self.probe_seconds = 0.0
        self._probe_t0: float | None = None

    def elapsed(self) -> str:
        seconds = int(time.monotonic() - self.t0)
        return f"{seconds // 60}m{seconds % 60:02d}s"


class LogProgress(_Base):
    """One log line per event (no terminal)."""

    def __init__(self, slo: SloSpec, console: Console, *, rate_unit: str = "req/s") -> None:
        super().__init__(slo, rate_unit=rate_unit)
        self.console = console

    @override
    def phase(self, name: str, detail: str = "") -> None:
        self.console.print(f"[{self.elapsed()}] {name}: {escape(detail)}")

    @override
    def accuracy(self, done: int, total: int) -> None:
        if done == total or done % max(1, total // 5) == 0:
            self.console.print(f"[{self.elapsed()}] accuracy: {done}/{total} answers")

    @override
    def probe_started(self, plan: ProbePlan, index: int, workers: int) -> None:
        self._probe_t0 = time.monotonic()
        self.console.print(
            f"[{self.elapsed()}] probe {index} ({plan.phase}): {plan.rate_rps:.3f}"
            f" {self.rate_unit}, {plan.warmup_s:g} s warm-up + {plan.window_s:g} s window,"
            f" {workers} worker(s)"
        )

    @override
    def probe_finished(self, record: ProbeRecord) -> None:
        if self._probe_t0 is not None:
            self.probe_seconds += time.monotonic() - self._probe_t0
        verdict = "PASS" if record.slo_pass else "FAIL"
        bound = " CLIENT-BOUND" if record.client_bound else ""
        causes = dict(record.failures_by_cause)
        cut = record.early_stop.cut_window_requests if record.early_stop is not None else 0
        if cut:
            causes["cancelled"] = causes.get("cancelled", 0) - cut
        causes = {cause: n for cause, n in causes.items() if n > 0}
        failed = f"{sum(causes.values())} failed"
        if causes:
            failed += " (" + ", ".join(f"{n} {cause}" for cause, n in sorted(causes.items())) + ")"
        if record.early_stop is not None:
            proven = "within" if record.early_stop.outcome == "pass" else "over"
            bound += f" (stopped early: provably {proven} the SLO)"
            failed += f", {cut} cut at the stop"
        first = self.slo.first_token
        self.console.print(
            f"[{self.elapsed()}] probe {record.index}: {verdict}{bound}  p99 {first.upper()}"
            f" {_ms(record.first_token_ms(first).p99)}/{self.slo.first_token_p99_ms:g} ms, p99 TPOT"
            f" {_ms(record.tpot_ms.p99)}/{self.slo.tpot_p99_ms:g} ms, goodput"
            f" {record.goodput_tok_s:,.1f} tok/s, {failed}"
        )


class JsonLogFormatter(logging.Formatter):
    """A log record as one ``--json-log`` event: ``{"event": "log", "level", "logger", ...}``."""

    @override
    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "event": "log",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        return json.dumps(payload)


class JsonProgress(_Base):
    """One JSON object per event on stderr (``--json-log``)."""

    def _emit(self, event: str, **fields: Any) -> None:
        payload = {"event": event, "elapsed_s": round(time.monotonic() - self.t0, 3), **fields}
        sys.stderr.write(json.dumps(payload) + "\n")
        sys.stderr.flush()

    @override
    def phase(self, name: str, detail: str = "") -> None:
        self._emit("phase", phase=name, detail=detail)

    @override
    def accuracy(self, done: int, total: int) -> None:
        self._emit("accuracy", done=done, total=total)

    @override
    def probe_started(self, plan: ProbePlan, index: int, workers: int) -> None:
        self._emit(
            "probe_started",
            index=index,
            phase=plan.phase,
            rate_rps=plan.rate_rps,
            warmup_s=plan.warmup_s,
            window_s=plan.window_s,
            workers=workers,
        )

    @override
    def probe_finished(self, record: ProbeRecord) -> None:
        def finite(v: float | None) -> float | None:
            return None if v is None or v == float("inf") else v

        self._emit(
            "probe_finished",
            index=record.index,
            phase=record.phase,
            rate_rps=record.rate_rps,
            slo_pass=record.slo_pass,
            client_bound=record.client_bound,
            ttft_p99_ms=finite(record.ttft_ms.p99),
            tpot_p99_ms=finite(record.tpot_ms.p99),
            goodput_tok_s=record.goodput_tok_s,
            failed=record.failed,
            send_lag_p99_ms=record.send_lag_p99_ms,
            stopped_early=record.early_stop is not None,
        )


class TerminalProgress(_Base):
    """A live rich display: phase, the probe in progress, finished probes against the SLO."""

    def __init__(self, slo: SloSpec, console: Console, *, rate_unit: str = "req/s") -> None:
        super().__init__(slo, rate_unit=rate_unit)
        self.console = console
        self.status = "starting"
        self.current: tuple[ProbePlan, int, int] | None = None
        self.rows: list[ProbeRecord] = []
        self.live = Live(console=console, refresh_per_second=4, get_renderable=self._render)

    def __enter__(self) -> TerminalProgress:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(None, None, None)

    def _render(self) -> Group:
        head = Text(f"{self.elapsed()}  {self.status}", style="bold")
        parts: list[Any] = [head]
        if self.current is not None and self._probe_t0 is not None:
            plan, index, workers = self.current
            spent = time.monotonic() - self._probe_t0
            planned = plan.warmup_s + plan.window_s
            left = max(0.0, planned - spent)
            stage = "warm-up" if spent < plan.warmup_s else "window" if left > 0 else "drain"
            parts.append(
                Text(
                    f"probe {index} ({plan.phase}) at {plan.rate_rps:.3f} {self.rate_unit},"
                    f" {workers} worker(s): {stage}, ~{left:.0f} s left (+ drain)"
                )
            )
        table = Table(box=None, header_style="bold")
        for column in (
            "#",
            "phase",
            self.rate_unit,
            f"p99 {self.slo.first_token.upper()} ms",
            "p99 TPOT ms",
            "tok/s",
            "failed",
            "",
        ):
            table.add_column(column, justify="right" if column not in ("phase", "") else "left")
        for r in self.rows[-15:]:
            first = r.first_token_ms(self.slo.first_token)
            ttft_ok = first.p99 is not None and first.p99 <= self.slo.first_token_p99_ms
            tpot_ok = r.tpot_ms.p99 is not None and r.tpot_ms.p99 <= self.slo.tpot_p99_ms
            table.add_row(
                str(r.index),
                r.phase,
                f"{r.rate_rps:.3f}",
                Text(_ms(first.p99), style="green" if ttft_ok else "red"),
                Text(_ms(r.tpot_ms.p99), style="green" if tpot_ok else "red"),
                f"{r.goodput_tok_s:,.0f}",
                str(r.failed),
                Text(
                    ("pass" if r.slo_pass else "FAIL")
                    + (" client-bound" if r.client_bound else "")
                    + (" stopped early" if r.early_stop is not None else ""),
                    style="green" if r.slo_pass else "red",
                ),
            )
        parts.append(table)
        parts.append(
            Text(
                f"SLO: p99 {self.slo.first_token.upper()} <= {self.slo.first_token_p99_ms:g} ms,"
                " p99 TPOT <="
                f" {self.slo.tpot_p99_ms:g} ms · probe time so far {self.probe_seconds:.0f} s",
                style="dim",
            )
        )
        return Group(*parts)

    @override
    def phase(self, name: str, detail: str = "") -> None:
        self.status = f"{name}: {detail}"

    @override
    def accuracy(self, done: int, total: int) -> None:
        self.status = f"accuracy: {done}/{total} answers"

    @override
    def probe_started(self, plan: ProbePlan, index: int, workers: int) -> None:
        self._probe_t0 = time.monotonic()
        self.current = (plan, index, workers)
        self.status = "sweep"

    @override
    def probe_finished(self, record: ProbeRecord) -> None:
        if self._probe_t0 is not None:
            self.probe_seconds += time.monotonic() - self._probe_t0
        self.current = None
        self.rows.append(record)


async def run_until_signal(work: Awaitable[T]) -> T:
    """Await ``work``; SIGTERM, like Ctrl-C, cancels it (measure then writes the partial run)."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, task.cancel, TERMINATED)
    try:
        return await work
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def run(args: argparse.Namespace) -> int:
    """Load the spec, measure, print where the run file is."""
    loaded = store.load_spec(store.resolve_spec_path(args.spec))
    spec = loaded.spec
    opts = MeasureOptions(
        spec=loaded,
        spec_arg=args.spec,
        label=args.label,
        role=args.role,
        out=args.out,
        command=command_line(args),
        description=args.description,
        quick=args.quick,
        no_accuracy=args.no_accuracy,
        force=args.force,
        resume=args.resume,
        ray_address=args.ray,
    )
    err = err_console()
    progress_replaces_info_log(args)  # the progress display, or the JSON events
    progress: Progress
    rate_unit = "sessions/s" if spec.workload.sessions is not None else "req/s"
    if args.json_log:
        # stderr carries one JSON object per line, log records included: a plain stream
        # handler even on a terminal (the rich one would frame each record with columns).
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonLogFormatter())
        redact.guard_handlers([handler])
        logging.getLogger().handlers[:] = [handler]
        progress = JsonProgress(spec.slo, rate_unit=rate_unit)
    elif err.is_terminal:
        progress = TerminalProgress(spec.slo, err, rate_unit=rate_unit)
    else:
        progress = LogProgress(spec.slo, err, rate_unit=rate_unit)
    # The spec's secrets are known now: no log line may carry them (e.g. in a URL or a header).
    redact.guard_handlers(logging.getLogger().handlers, redact.spec_secrets(spec, os.environ))
    with progress if isinstance(progress, TerminalProgress) else contextlib.nullcontext():
        result = asyncio.run(run_until_signal(measure(opts, progress)))
    out = out_console()
    outcome = result.outcome
    out.print(f"wrote {escape(str(args.out))}")
    if outcome is not None:
        rate = (
            f"{outcome.confirmed_rate_rps:.3f} {rate_unit}"
            if outcome.confirmed_rate_rps is not None
            else "none (no rate met the SLO)"
        )
        out.print(
            f"confirmed rate {rate}; SLO goodput {outcome.goodput_tok_s:,.1f} tok/s;"
            f" {len(result.probes)} probes, {outcome.probe_seconds:,.0f} probe-seconds"
            f" ({outcome.search_probe_seconds:,.0f} s searching)"
        )
    if args.resume is not None and result.resumed:
        last = result.resumed[-1]
        out.print(
            f"resumed {escape(str(args.resume))}: {last.reused_probes} recorded probe(s) reused,"
            f" {last.saved_probe_seconds:,.0f} probe-seconds saved"
        )
    if result.quick:
        out.print("[yellow]quick mode: validation only, not for publishing[/yellow]")
    return 0
