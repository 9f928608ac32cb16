"""Exports for notebooks: the per-row evidence of a run or result file as flat tables.

A run file holds one table per kind of evidence: ``probes`` (one row per probe: its summary,
latency statistics, engine gauges), ``requests`` (one row per window request of every probe:
timings, tokens, status), ``power_samples``, ``power_gaps``, ``engine_samples`` (each scrape of
the engine's ``/metrics``) and ``accuracy_items`` (each question asked). A result file holds
``configs`` (one row per configuration: its headline figures), ``probes`` (the probe history of
every configuration) and ``power_trace`` (the reduced power trace the page draws).

Every column name carries its unit (``ttft_ms``, ``power_w``, ``t_ns``, ``goodput_tok_s``);
counts are named after what they count (``window_requests``, ``output_tokens``). Every table is
written, an empty one with its header only, so a notebook finds the same files for every run.

Formats: ``csv`` (empty cell = null; booleans ``true``/``false``; +inf as ``inf``), ``jsonl``
(one object per row; +inf as the string ``"Infinity"``, as in the run file, since JSON has no
infinity), ``parquet`` (typed columns, through pyarrow: the optional extra
``tokenwatt[parquet]``). A failed request has null timings (its ``status`` says why); a
latency statistic over a window with failures is +inf (failures count as +inf latency).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args

from tokenwatt import store
from tokenwatt.errors import InputError
from tokenwatt.schema.result import ConfigResult, ProbePoint, ResultFile
from tokenwatt.schema.run import LatencyStats, PowerGap, PowerSample, ProbeRecord, RunFile

__all__ = [
    "FORMATS",
    "Cell",
    "Column",
    "ColumnKind",
    "ExportFormat",
    "Table",
    "encode",
    "require_format",
    "result_tables",
    "run_tables",
    "write_tables",
]

logger = logging.getLogger(__name__)

ExportFormat = Literal["csv", "jsonl", "parquet"]
FORMATS: tuple[ExportFormat, ...] = get_args(ExportFormat)
ColumnKind = Literal["int", "float", "str", "bool"]
Cell = int | float | str | bool | None
"""One value of a table; None is null."""

PARQUET_EXTRA = "parquet"
"""The optional dependency group that installs pyarrow (``pip install 'tokenwatt[parquet]'``)."""

T = TypeVar("T")


@dataclass(frozen=True)
class Column:
    """One column: its name (with its unit), its type and its values."""

    name: str
    kind: ColumnKind
    values: list[Cell]


@dataclass(frozen=True)
class Table:
    """One table of an export (written as ``<name>.<format>``)."""

    name: str
    columns: tuple[Column, ...]

    @property
    def rows(self) -> int:
        """Number of rows."""
        return len(self.columns[0].values) if self.columns else 0


ColumnSpec = tuple[str, ColumnKind, Callable[[T], Cell]]


def _table(name: str, specs: Sequence[ColumnSpec[T]], rows: Sequence[T]) -> Table:
    return Table(
        name=name,
        columns=tuple(Column(col, kind, [get(row) for row in rows]) for col, kind, get in specs),
    )


def _joined(values: Sequence[str]) -> str:
    return "; ".join(values)


# ---------------------------------------------------------------------------------------------
# Run file


def _latency_specs(field: str) -> list[ColumnSpec[ProbeRecord]]:
    """``ttft_ms`` -> ``ttft_count``, ``ttft_mean_ms``, ``ttft_p50_ms``, ... ``ttft_p99_ms``."""
    stem = field.removesuffix("_ms")

    def stat(name: str) -> Callable[[ProbeRecord], Cell]:
        def get(p: ProbeRecord) -> Cell:
            stats: LatencyStats = getattr(p, field)
            value: float | None = getattr(stats, name)
            return value

        return get

    count: ColumnSpec[ProbeRecord] = (
        f"{stem}_count",
        "int",
        lambda p: getattr(p, field).count,
    )
    return [count] + [
        (f"{stem}_{name}_ms", "float", stat(name)) for name in ("mean", "p50", "p90", "p95", "p99")
    ]


_PROBE_COLUMNS: list[ColumnSpec[ProbeRecord]] = [
    ("probe_index", "int", lambda p: p.index),
    ("phase", "str", lambda p: p.phase),
    ("rate_rps", "float", lambda p: p.rate_rps),
    ("attempt", "int", lambda p: p.attempt),
    ("repeat", "int", lambda p: p.repeat),
    ("warmup_s", "float", lambda p: p.warmup_s),
    ("window_s", "float", lambda p: p.window_s),
    ("started_utc", "str", lambda p: p.started_utc.isoformat()),
    ("window_start_ns", "int", lambda p: p.window_start_ns),
    ("window_end_ns", "int", lambda p: p.window_end_ns),
    ("end_ns", "int", lambda p: p.end_ns),
    ("window_requests", "int", lambda p: p.window_requests),
    ("ok_requests", "int", lambda p: p.ok),
    ("failed_requests", "int", lambda p: p.failed),
    ("failures_by_cause", "str", lambda p: json.dumps(p.failures_by_cause, sort_keys=True)),
    ("output_tokens", "int", lambda p: p.output_tokens),
    ("goodput_tok_s", "float", lambda p: p.goodput_tok_s),
    ("window_emitted_tokens", "float", lambda p: p.window_emitted_tokens),
    ("achieved_rate_rps", "float", lambda p: p.achieved_rate_rps),
    ("offered_rate_rps", "float", lambda p: p.offered_rate_rps),
    ("request_throughput_rps", "float", lambda p: p.request_throughput_rps),
    ("send_lag_p99_ms", "float", lambda p: p.send_lag_p99_ms),
    ("send_lag_max_ms", "float", lambda p: p.send_lag_max_ms),
    ("slot_wait_s", "float", lambda p: p.slot_wait_s),
    ("client_bound", "bool", lambda p: p.client_bound),
    ("client_bound_reasons", "str", lambda p: _joined(p.client_bound_reasons)),
    ("slo_pass", "bool", lambda p: p.slo_pass),
    *_latency_specs("ttft_ms"),
    *_latency_specs("tpot_ms"),
    *_latency_specs("itl_ms"),
    *_latency_specs("e2e_ms"),
    ("workers", "int", lambda p: p.workers),
    ("max_in_flight_requests", "int", lambda p: p.max_in_flight),
    ("client_cpu_s", "float", lambda p: p.client_cpu_s),
    ("client_preemptions", "int", lambda p: p.client_preemptions),
    ("running_batch_mean_requests", "float", lambda p: p.running_batch_mean),
    ("batch_source", "str", lambda p: p.batch_source),
    ("output_length_violations", "int", lambda p: p.output_length_violations),
    ("usage_mismatches", "int", lambda p: p.usage_mismatches),
    ("approximate_output_tokens", "int", lambda p: p.approximate_output_tokens),
    ("engine_dialect", "str", lambda p: p.engine.dialect if p.engine else None),
    ("engine_scrapes", "int", lambda p: p.engine.samples if p.engine else None),
    (
        "engine_running_mean_requests",
        "float",
        lambda p: p.engine.running_mean if p.engine else None,
    ),
    (
        "engine_waiting_mean_requests",
        "float",
        lambda p: p.engine.waiting_mean if p.engine else None,
    ),
    (
        "engine_kv_cache_usage_mean_pct",
        "float",
        lambda p: p.engine.kv_cache_usage_mean_pct if p.engine else None,
    ),
    ("engine_preemptions", "int", lambda p: p.engine.preemptions if p.engine else None),
    (
        "engine_prefix_cache_hit_rate_pct",
        "float",
        lambda p: p.engine.prefix_cache_hit_rate_pct if p.engine else None,
    ),
    ("early_stop_outcome", "str", lambda p: p.early_stop.outcome if p.early_stop else None),
    (
        "early_stop_cut_requests",
        "int",
        lambda p: p.early_stop.cut_window_requests if p.early_stop else None,
    ),
    ("ramp_carried_requests", "int", lambda p: p.ramp.carried_requests if p.ramp else None),
    (
        "early_stop_unsent_requests",
        "int",
        lambda p: p.early_stop.unsent_window_requests if p.early_stop else None,
    ),
    ("sessions_started_count", "int", lambda p: p.sessions.started if p.sessions else None),
    ("sessions_completed_count", "int", lambda p: p.sessions.completed if p.sessions else None),
    ("sessions_cut_count", "int", lambda p: p.sessions.cut if p.sessions else None),
    (
        "sessions_unsent_turns_count",
        "int",
        lambda p: p.sessions.unsent_turns if p.sessions else None,
    ),
]

_REQUEST_COLUMNS: tuple[tuple[str, ColumnKind], ...] = (
    ("probe_index", "int"),
    ("phase", "str"),
    ("rate_rps", "float"),
    ("request", "int"),
    ("session_index", "int"),
    ("turn_index", "int"),
    ("t_sched_s", "float"),
    ("send_lag_ms", "float"),
    ("ttft_ms", "float"),
    ("ttfat_ms", "float"),
    ("tpot_ms", "float"),
    ("e2e_ms", "float"),
    ("input_tokens", "int"),
    ("output_tokens", "int"),
    ("reasoning_tokens", "int"),
    ("status", "str"),
)


def _requests(probes: Sequence[ProbeRecord]) -> Table:
    """Every window request of every probe, built column by column (a run holds 100k+)."""
    cols: dict[str, list[Cell]] = {name: [] for name, _ in _REQUEST_COLUMNS}
    for p in probes:
        table = p.requests
        if table is None:
            continue
        n = len(table.status)
        cols["probe_index"] += [p.index] * n
        cols["phase"] += [p.phase] * n
        cols["rate_rps"] += [p.rate_rps] * n
        cols["request"] += list(range(n))
        # Multi-turn sessions only: which session and turn each row is (null without).
        cols["session_index"] += table.session if table.session is not None else [None] * n
        cols["turn_index"] += table.turn if table.turn is not None else [None] * n
        for name in ("t_sched_s", "send_lag_ms", "ttft_ms", "tpot_ms", "e2e_ms"):
            cols[name] += getattr(table, name)
        # No reasoning column: the probe streamed none, so TTFAT is TTFT and no token reasoned.
        cols["ttfat_ms"] += table.ttfat_ms if table.ttfat_ms is not None else table.ttft_ms
        cols["input_tokens"] += table.input_tokens
        cols["output_tokens"] += table.output_tokens
        cols["reasoning_tokens"] += table.reasoning_tokens or [0] * n
        cols["status"] += table.status
    return Table("requests", tuple(Column(n, k, cols[n]) for n, k in _REQUEST_COLUMNS))


def _power_samples(samples: Sequence[PowerSample]) -> Table:
    gpus = max((len(s.gpu_watts or ()) for s in samples), default=0)
    first = samples[0].t_ns if samples else 0
    specs: list[ColumnSpec[PowerSample]] = [
        ("t_ns", "int", lambda s: s.t_ns),
        ("t_s", "float", lambda s: (s.t_ns - first) / 1e9),
        ("power_w", "float", lambda s: s.watts),
        ("energy_j", "float", lambda s: s.energy_j),
        ("throttle_reasons", "str", lambda s: _joined(s.throttle_reasons)),
    ]

    def gpu(i: int) -> Callable[[PowerSample], Cell]:
        return lambda s: s.gpu_watts[i] if s.gpu_watts and i < len(s.gpu_watts) else None

    specs += [(f"gpu{i}_power_w", "float", gpu(i)) for i in range(gpus)]
    return _table("power_samples", specs, samples)


_GAP_COLUMNS: list[ColumnSpec[PowerGap]] = [
    ("start_ns", "int", lambda g: g.start_ns),
    ("end_ns", "int", lambda g: g.end_ns),
    ("duration_s", "float", lambda g: (g.end_ns - g.start_ns) / 1e9),
    ("cause", "str", lambda g: g.cause),
]


def _engine_samples(probes: Sequence[ProbeRecord]) -> Table:
    names: tuple[tuple[str, ColumnKind], ...] = (
        ("probe_index", "int"),
        ("t_s", "float"),
        ("running_requests", "float"),
        ("waiting_requests", "float"),
        ("kv_cache_usage_pct", "float"),
    )
    cols: dict[str, list[Cell]] = {name: [] for name, _ in names}
    for p in probes:
        series = p.engine.series if p.engine is not None else None
        if series is None:
            continue
        cols["probe_index"] += [p.index] * len(series.t_s)
        cols["t_s"] += series.t_s
        cols["running_requests"] += series.running
        cols["waiting_requests"] += series.waiting
        cols["kv_cache_usage_pct"] += series.kv_cache_usage_pct
    return Table("engine_samples", tuple(Column(n, k, cols[n]) for n, k in names))


def run_tables(run: RunFile) -> list[Table]:
    """The tables of a run file: probes, requests, power samples and gaps, engine, accuracy."""
    power = run.power
    items = run.accuracy.items if run.accuracy is not None else []
    return [
        _table("probes", _PROBE_COLUMNS, run.probes),
        _requests(run.probes),
        _power_samples(power.samples if power is not None else []),
        _table("power_gaps", _GAP_COLUMNS, power.gaps if power is not None else []),
        _engine_samples(run.probes),
        _table(
            "accuracy_items",
            [
                ("seed", "int", lambda a: a.seed),
                ("question_index", "int", lambda a: a.index),
                ("question_id", "str", lambda a: a.id),
                ("gold", "str", lambda a: a.gold),
                ("completion", "str", lambda a: a.completion),
                ("extracted", "str", lambda a: a.extracted),
                ("correct", "bool", lambda a: a.correct),
                ("error", "str", lambda a: a.error),
            ],
            items,
        ),
    ]


# ---------------------------------------------------------------------------------------------
# Result file

_CONFIG_COLUMNS: list[ColumnSpec[ConfigResult]] = [
    ("config_key", "str", lambda c: c.key),
    ("config_label", "str", lambda c: c.label),
    ("engine", "str", lambda c: c.engine),
    ("run_file", "str", lambda c: c.run_file),
    ("confirmed_rate_rps", "float", lambda c: c.confirmed_rate_rps),
    ("slo_capacity_rps", "float", lambda c: c.slo_capacity_rps),
    (
        "slo_capacity_ci_low_rps",
        "float",
        lambda c: c.slo_capacity_ci_rps[0] if c.slo_capacity_ci_rps else None,
    ),
    (
        "slo_capacity_ci_high_rps",
        "float",
        lambda c: c.slo_capacity_ci_rps[1] if c.slo_capacity_ci_rps else None,
    ),
    ("binding_slo", "str", lambda c: c.binding_slo),
    ("goodput_tok_s", "float", lambda c: c.goodput_tok_s),
    ("goodput_delta_pct", "float", lambda c: c.goodput_delta_pct),
    ("ttft_p99_ms", "float", lambda c: c.ttft_p99_ms),
    ("tpot_p99_ms", "float", lambda c: c.tpot_p99_ms),
    ("slo_pass_count", "int", lambda c: c.slo_pass_count),
    ("repeats", "int", lambda c: c.repeats),
    ("node_power_kw", "float", lambda c: c.node_power_kw),
    ("energy_j", "float", lambda c: c.energy_j),
    ("tokens_per_joule", "float", lambda c: c.tokens_per_joule),
    ("mbu_pct", "float", lambda c: c.mbu_pct),
    ("probe_seconds", "float", lambda c: c.probe_seconds),
    ("prefix_expected_hit_rate_pct", "float", lambda c: c.prefix_expected_hit_rate_pct),
    ("accuracy_score_pct", "float", lambda c: c.accuracy.score if c.accuracy else None),
    ("accuracy_delta_pts", "float", lambda c: c.accuracy.delta_pts if c.accuracy else None),
]

_POINT_COLUMNS: list[ColumnSpec[tuple[ConfigResult, ProbePoint]]] = [
    ("config_key", "str", lambda cp: cp[0].key),
    ("config_label", "str", lambda cp: cp[0].label),
    ("phase", "str", lambda cp: cp[1].phase),
    ("rate_rps", "float", lambda cp: cp[1].rate_rps),
    ("window_s", "float", lambda cp: cp[1].window_s),
    ("ttft_p50_ms", "float", lambda cp: cp[1].ttft_p50_ms),
    ("ttft_p99_ms", "float", lambda cp: cp[1].ttft_p99_ms),
    ("tpot_p50_ms", "float", lambda cp: cp[1].tpot_p50_ms),
    ("tpot_p99_ms", "float", lambda cp: cp[1].tpot_p99_ms),
    ("goodput_tok_s", "float", lambda cp: cp[1].goodput_tok_s),
    ("failed_requests", "int", lambda cp: cp[1].failed),
    ("slo_pass", "bool", lambda cp: cp[1].slo_pass),
    ("client_bound", "bool", lambda cp: cp[1].client_bound),
    ("send_lag_p99_ms", "float", lambda cp: cp[1].send_lag_p99_ms),
    ("stopped_early", "bool", lambda cp: cp[1].stopped_early),
    ("cut_requests", "int", lambda cp: cp[1].cut_requests),
    ("carried_requests", "int", lambda cp: cp[1].carried_requests),
    ("ttft_over_pct", "float", lambda cp: cp[1].ttft_over_pct),
    ("tpot_over_pct", "float", lambda cp: cp[1].tpot_over_pct),
    ("engine_running_mean_requests", "float", lambda cp: cp[1].running_mean),
    ("engine_waiting_mean_requests", "float", lambda cp: cp[1].waiting_mean),
    ("engine_kv_cache_usage_mean_pct", "float", lambda cp: cp[1].kv_cache_usage_mean_pct),
    ("engine_preemptions", "int", lambda cp: cp[1].preemptions),
    ("engine_prefix_cache_hit_rate_pct", "float", lambda cp: cp[1].prefix_cache_hit_rate_pct),
]


def result_tables(result: ResultFile) -> list[Table]:
    """The tables of a result file: configs, their probe histories and power traces."""
    points = [(c, p) for c in result.configs for p in c.probes or []]
    trace = [
        (c, t.t_s, t.watts)
        for c in result.configs
        if c.power_trace is not None
        for t in c.power_trace.points
    ]
    trace_specs: list[ColumnSpec[tuple[ConfigResult, float, float]]] = [
        ("config_key", "str", lambda r: r[0].key),
        ("config_label", "str", lambda r: r[0].label),
        ("t_s", "float", lambda r: r[1]),
        ("power_w", "float", lambda r: r[2]),
    ]
    return [
        _table("configs", _CONFIG_COLUMNS, result.configs),
        _table("probes", _POINT_COLUMNS, points),
        _table("power_trace", trace_specs, trace),
    ]


# ---------------------------------------------------------------------------------------------
# Writing


def require_format(fmt: ExportFormat) -> None:
    """Check that the format can be written here, before anything is read or written.

    Raises:
        InputError: parquet was asked for and pyarrow is not installed; the message names the
            extra that installs it.
    """
    if fmt != "parquet":
        return
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise InputError(
            "--format parquet needs pyarrow, which is not installed: install the optional"
            f" extra '{PARQUET_EXTRA}' (pip install 'tokenwatt[{PARQUET_EXTRA}]'), or use"
            " --format csv or jsonl"
        ) from None


def _json_cell(value: Cell) -> Cell:
    if isinstance(value, float) and math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _csv_cell(value: Cell) -> Cell:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def _csv(table: Table) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([c.name for c in table.columns])
    bools = [i for i, c in enumerate(table.columns) if c.kind == "bool"]
    rows: Any = zip(*(c.values for c in table.columns), strict=True)
    if bools:
        rows = ([_csv_cell(v) for v in row] for row in rows)
    writer.writerows(rows)
    return buffer.getvalue().encode("utf-8")


def _jsonl(table: Table) -> bytes:
    names = [c.name for c in table.columns]
    floats = [i for i, c in enumerate(table.columns) if c.kind == "float"]
    dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
    lines: list[str] = []
    for row in zip(*(c.values for c in table.columns), strict=True):
        values = list(row)
        for i in floats:
            values[i] = _json_cell(values[i])
        lines.append(dumps(dict(zip(names, values, strict=True))))
    return ("\n".join(lines) + "\n" if lines else "").encode("utf-8")


def _parquet(table: Table) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {"int": pa.int64(), "float": pa.float64(), "str": pa.string(), "bool": pa.bool_()}
    arrays = [pa.array(c.values, type=types[c.kind]) for c in table.columns]
    arrow = pa.Table.from_arrays(arrays, names=[c.name for c in table.columns])
    sink = pa.BufferOutputStream()
    pq.write_table(arrow, sink)
    data: bytes = sink.getvalue().to_pybytes()
    return data


_ENCODERS: dict[ExportFormat, Callable[[Table], bytes]] = {
    "csv": _csv,
    "jsonl": _jsonl,
    "parquet": _parquet,
}


def encode(table: Table, fmt: ExportFormat) -> bytes:
    """The bytes of one table in one format."""
    return _ENCODERS[fmt](table)


def write_tables(
    tables: Sequence[Table], out_dir: Path, fmt: ExportFormat, *, force: bool
) -> list[Path]:
    """Write each table as ``out_dir/<name>.<fmt>`` (atomically); returns the paths written.

    Raises:
        InputError: ``out_dir`` is a file, or a table's file exists and ``force`` is not set
            (checked for every table before any is written).
        WriteError: a file cannot be written.
    """
    require_format(fmt)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir}: is not a folder; --out names the folder to write into")
    paths = [out_dir / f"{t.name}.{fmt}" for t in tables]
    existing = [str(p) for p in paths if p.exists() or p.is_symlink()]
    if existing and not force:
        raise InputError(
            f"{', '.join(existing)}: already exist(s); choose another --out, or pass --force to"
            " replace them"
        )
    for table, path in zip(tables, paths, strict=True):
        store.atomic_write_bytes(path, encode(table, fmt))
        logger.info("%s: %d rows, %d columns", path, table.rows, len(table.columns))
    return paths
