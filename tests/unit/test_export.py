"""``tokenwatt export``: a run's and a result's evidence as tables, read back as written."""

from __future__ import annotations

import csv
import json
import math
import sys

import pytest

from tests import factories
from tests.result_factories import full_mode_result
from tokenwatt import export, store
from tokenwatt.cli import main
from tokenwatt.schema.run import (
    AccuracyItem,
    EngineSeries,
    EngineTelemetry,
    PowerGap,
    PowerSample,
    SessionStats,
)

RUN_TABLES = {
    "probes": 75,  # 27 of the probe, 4 x 6 latency statistics, 9 client, 7 engine, 3 early stop,
    # 1 ramp, 4 sessions
    "requests": 16,
    "power_samples": 7,  # 5 + one power column per GPU (two here)
    "power_gaps": 4,
    "engine_samples": 5,
    "accuracy_items": 8,
}
RESULT_TABLES = {"configs": 23, "probes": 24, "power_trace": 4}

# A quantity's column ends in its unit; what is not a quantity is listed by name.
UNITS: tuple[str, ...] = ("_ms", "_s", "_seconds", "_ns", "_rps", "_tok_s", "_w", "_kw", "_j")
UNITS += ("_pct", "_pts", "_per_joule")
COUNTS = ("_tokens", "_requests", "_count", "_index", "_preemptions", "_scrapes", "_violations")
NOT_QUANTITIES = {
    "phase",
    "status",
    "attempt",
    "repeat",
    "request",
    "started_utc",
    "failures_by_cause",
    "client_bound",
    "client_bound_reasons",
    "slo_pass",
    "workers",
    "batch_source",
    "usage_mismatches",
    "engine_dialect",
    "early_stop_outcome",
    "throttle_reasons",
    "cause",
    "seed",
    "question_id",
    "gold",
    "completion",
    "extracted",
    "correct",
    "error",
    "config_key",
    "config_label",
    "engine",
    "run_file",
    "binding_slo",
    "slo_pass_count",
    "repeats",
    "stopped_early",
    "failed_requests",
}


def evidence_run():
    """A run with every kind of per-row evidence: two probes with their window requests (the
    second with two failures), 1 Hz readings of two GPUs with one gap, engine scrapes and
    accuracy answers."""
    first = factories.probe_with_requests(
        0, 10.0, factories.request_table([20.0, 30.0, 40.0, 25.0]), phase="search"
    )
    failing = factories.request_table(
        [20.0, 30.0, 40.0, 25.0, 35.0], status=["ok", "timeout", "ok", "http_error", "ok"]
    ).model_copy(update={"session": [0, 0, 1, 1, 2], "turn": [0, 1, 0, 1, 0]})
    second = factories.probe_with_requests(
        1,
        20.0,
        failing,
        phase="confirm",
        repeat=0,
        slo_pass=False,
        failures_by_cause={"timeout": 1, "http_error": 1},
        sessions=SessionStats(
            started=3, completed=0, cut=2, unsent_turns=3, cut_causes={"timeout": 1}, mean_turns=3
        ),
        engine=EngineTelemetry(
            dialect="vllm",
            samples=3,
            running_mean=4.0,
            series=EngineSeries(
                t_s=[0.0, 5.0, 9.5],
                running=[3.0, 4.0, 5.0],
                waiting=[0.0, 1.0, None],
                kv_cache_usage_pct=[10.0, 20.0, 30.0],
            ),
        ),
    )
    samples = [
        PowerSample(
            t_ns=second.window_start_ns + i * 1_000_000_000,
            watts=600.0 + i,
            gpu_watts=[300.0, 300.0 + i],
            energy_j=1000.0 + 600.0 * i,
            throttle_reasons=["sw_power_cap"] if i == 2 else [],
        )
        for i in range(10)
    ]
    run = factories.seed_like_run(
        role="baseline",
        label="evidence",
        description="evidence",
        output_tokens=(539910,),
        ttft_p99_ms=(338.0,),
        tpot_p99_ms=(44.2,),
        mbu_pct=56.3,
        node_power_kw=0.6,
        sw_power_cap=0,
        score=50.0,
    )
    assert run.power is not None
    assert run.accuracy is not None
    power = run.power.model_copy(
        update={
            "samples": samples,
            "gaps": [PowerGap(start_ns=0, end_ns=2_500_000_000, cause="read timed out")],
        }
    )
    items = [
        AccuracyItem(
            seed=0, index=0, gold="42", completion="#### 42", extracted="42", correct=True
        ),
        AccuracyItem(
            seed=0,
            index=1,
            gold="7",
            completion=None,
            extracted=None,
            correct=False,
            error="timeout",
        ),
    ]
    return run.model_copy(
        update={
            "probes": [first, second],
            "outcome": None,
            "power": power,
            "accuracy": run.accuracy.model_copy(update={"items": items}),
        }
    )


def tables_by_name(tables):
    return {t.name: t for t in tables}


def test_run_tables_have_the_evidence_row_for_row():
    tables = tables_by_name(export.run_tables(evidence_run()))
    assert {n: len(t.columns) for n, t in tables.items()} == RUN_TABLES
    assert {n: t.rows for n, t in tables.items()} == {
        "probes": 2,
        "requests": 9,
        "power_samples": 10,
        "power_gaps": 1,
        "engine_samples": 3,
        "accuracy_items": 2,
    }
    requests = {c.name: c.values for c in tables["requests"].columns}
    assert requests["probe_index"] == [0] * 4 + [1] * 5
    assert requests["request"] == [0, 1, 2, 3, 0, 1, 2, 3, 4]
    assert requests["status"][4:] == ["ok", "timeout", "ok", "http_error", "ok"]
    assert requests["tpot_ms"][4:] == [20.0, None, 40.0, None, 35.0]
    # no reasoning streamed: TTFAT is TTFT, no token reasoned
    assert requests["ttfat_ms"] == requests["ttft_ms"]
    assert requests["reasoning_tokens"] == [0] * 9
    assert requests["session_index"] == [None] * 4 + [0, 0, 1, 1, 2]  # only the sessions probe
    assert requests["turn_index"] == [None] * 4 + [0, 1, 0, 1, 0]
    probes = {c.name: c.values for c in tables["probes"].columns}
    assert probes["ttft_p99_ms"] == [100.0, math.inf]  # failures count as +inf
    assert probes["failures_by_cause"][1] == '{"http_error": 1, "timeout": 1}'
    assert probes["sessions_cut_count"] == [None, 2]
    assert probes["sessions_unsent_turns_count"] == [None, 3]
    power = {c.name: c.values for c in tables["power_samples"].columns}
    assert power["t_s"][:3] == [0.0, 1.0, 2.0]
    assert power["gpu1_power_w"][:3] == [300.0, 301.0, 302.0]
    assert power["throttle_reasons"][2] == "sw_power_cap"
    gaps = {c.name: c.values for c in tables["power_gaps"].columns}
    assert gaps["duration_s"] == [2.5]


def test_every_quantity_names_its_unit(seed_path):
    run = export.run_tables(evidence_run())
    result = export.result_tables(full_mode_result(seed_path))
    for table in run + result:
        for column in table.columns:
            name = column.name
            assert name.endswith(UNITS + COUNTS) or name in NOT_QUANTITIES, (table.name, name)
            if column.kind == "float":
                assert name.endswith(UNITS + COUNTS), (table.name, name)


def test_result_tables(seed_path):
    result = full_mode_result(seed_path)
    tables = tables_by_name(export.result_tables(result))
    assert {n: len(t.columns) for n, t in tables.items()} == RESULT_TABLES
    assert tables["configs"].rows == len(result.configs)
    assert tables["probes"].rows == sum(len(c.probes or []) for c in result.configs)
    assert tables["power_trace"].rows == sum(
        len(c.power_trace.points) for c in result.configs if c.power_trace
    )
    configs = {c.name: c.values for c in tables["configs"].columns}
    assert configs["goodput_tok_s"] == [c.goodput_tok_s for c in result.configs]


# -- written and read back ----------------------------------------------------------------------


@pytest.fixture
def run_file(tmp_path):
    path = tmp_path / "run.json"
    store.save_run(evidence_run(), path)
    return path


def test_csv_and_jsonl_read_back_with_the_standard_library(tmp_path, run_file, capsys):
    for fmt in ("csv", "jsonl"):
        out = tmp_path / fmt
        assert main(["export", str(run_file), "--format", fmt, "--out", str(out)]) == 0
        assert f"wrote {out}/requests.{fmt}: 9 rows, 16 columns" in capsys.readouterr().out
        assert sorted(p.name for p in out.iterdir()) == sorted(f"{n}.{fmt}" for n in RUN_TABLES)
    with (tmp_path / "csv" / "requests.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 9
    assert rows[5]["status"] == "timeout"
    assert rows[5]["ttft_ms"] == ""  # null
    assert float(rows[4]["tpot_ms"]) == 20.0
    with (tmp_path / "csv" / "probes.csv").open(newline="") as handle:
        probes = list(csv.DictReader(handle))
    assert probes[1]["ttft_p99_ms"] == "inf"
    assert probes[1]["slo_pass"] == "false"
    lines = (tmp_path / "jsonl" / "probes.jsonl").read_text().splitlines()
    assert json.loads(lines[1])["ttft_p99_ms"] == "Infinity"  # JSON has no infinity
    # An empty table is its header alone (csv) or no lines (jsonl).
    empty = export.Table("t", (export.Column("x_ms", "float", []),))
    assert export.encode(empty, "csv") == b"x_ms\n"
    assert export.encode(empty, "jsonl") == b""


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_every_format_reads_back_with_pandas(tmp_path, run_file, fmt):
    pd = pytest.importorskip("pandas")
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    out = tmp_path / "out"
    assert main(["export", str(run_file), "--format", fmt, "--out", str(out)]) == 0
    read = {
        "csv": pd.read_csv,
        "jsonl": lambda p: pd.read_json(p, lines=True),
        "parquet": pd.read_parquet,
    }[fmt]
    for name, columns in RUN_TABLES.items():
        frame = read(out / f"{name}.{fmt}")
        if name == "requests" or fmt != "jsonl":  # jsonl has no header for an empty table
            assert frame.shape[1] == columns, name
    requests = read(out / f"requests.{fmt}")
    assert len(requests) == 9
    assert requests["ttft_ms"].isna().sum() == 2
    assert requests.loc[4, "tpot_ms"] == 20.0
    assert list(requests["status"][4:]) == ["ok", "timeout", "ok", "http_error", "ok"]
    probes = read(out / f"probes.{fmt}")
    assert probes.loc[1, "ttft_p99_ms"] == math.inf
    assert not probes.loc[1, "slo_pass"]
    power = read(out / f"power_samples.{fmt}")
    assert power["power_w"].mean() == pytest.approx(604.5)
    if fmt == "parquet":
        assert str(probes["probe_index"].dtype) == "int64"
        assert str(requests["ttft_ms"].dtype) == "float64"
        assert str(probes["slo_pass"].dtype) == "bool"


def test_a_result_file_exports_its_tables(tmp_path, seed_path):
    path = tmp_path / "r.json"
    store.save_result(full_mode_result(seed_path), path)
    assert main(["export", str(path), "--out", str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "configs.csv",
        "power_trace.csv",
        "probes.csv",
    ]


# -- refusals -------------------------------------------------------------------------------------


def test_parquet_without_pyarrow_names_the_extra(tmp_path, run_file, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now raises ImportError
    out = tmp_path / "out"
    assert main(["export", str(run_file), "--format", "parquet", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "pyarrow" in err
    assert "tokenwatt[parquet]" in err
    assert not out.exists()


def test_existing_tables_are_replaced_only_with_force(tmp_path, run_file, capsys):
    out = tmp_path / "out"
    assert main(["export", str(run_file), "--out", str(out)]) == 0
    (out / "probes.csv").write_text("mine")
    assert main(["export", str(run_file), "--out", str(out)]) == 2
    assert "already exist" in capsys.readouterr().err
    assert (out / "probes.csv").read_text() == "mine"
    assert main(["export", str(run_file), "--out", str(out), "--force"]) == 0
    assert (out / "probes.csv").read_text().startswith("probe_index,phase,rate_rps,")


def test_a_spec_or_a_file_as_out_is_refused(tmp_path, run_file, repo, capsys):
    spec = repo / "tests" / "data" / "tiny-sim.spec.yaml"
    assert main(["export", str(spec), "--out", str(tmp_path / "out")]) == 2
    assert "export reads run and result files" in capsys.readouterr().err
    assert main(["export", str(run_file), "--out", str(run_file)]) == 2
    assert "is not a folder" in capsys.readouterr().err
