"""The fault-and-forgery battery: bad specs, runs, results, arguments and traces (issue 16).

Every case runs the real command line (``tokenwatt.cli.main`` in this process, or
``python -m tokenwatt`` where a broken build could hang: FIFOs, devices) on real files, and
asserts three things: exit status 2, exactly one message that names the file or argument, the
field and the problem, and that nothing in the working folder was written, replaced or lost
(every file's bytes are compared before and after; the recovery folder stays empty).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import factories
from tokenwatt import store
from tokenwatt.cli import main

REPO = Path(__file__).resolve().parents[2]
TINY_SIM = REPO / "tests" / "data" / "tiny-sim.spec.yaml"
CONFIG_8B = REPO / "specs" / "models" / "Qwen__Qwen3-8B" / "config.json"
SUITE = REPO / "specs" / "suites" / "gsm8k-200.jsonl"
BMC_PASSWORD = "Tw-b4ttery-s3cret"


# -- building the inputs ------------------------------------------------------------------------


def sim_spec(**changes: Any) -> dict[str, Any]:
    """The tiny simulator spec with absolute paths, then ``changes`` ("a.b": value) applied."""
    data: dict[str, Any] = yaml.safe_load(TINY_SIM.read_text(encoding="utf-8"))
    data["model"]["config"] = str(CONFIG_8B)
    data["accuracy"]["suite"] = str(SUITE)
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return data


def write(work: Path, name: str, content: str | bytes | dict[str, Any]) -> Path:
    path = work / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, dict):
        if name.endswith((".yaml", ".yml")):
            path.write_text(yaml.safe_dump(content, sort_keys=False), encoding="utf-8")
        else:
            path.write_text(json.dumps(content), encoding="utf-8")
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def spec_text(**changes: Any) -> str:
    return yaml.safe_dump(sim_spec(**changes), sort_keys=False)


def with_trace(work: Path, name: str, content: str) -> Path:
    trace = write(work, name, content)
    return write(work, "s.yaml", sim_spec(**{"workload.trace": str(trace)}))


def fifo(work: Path, name: str) -> Path:
    path = work / name
    os.mkfifo(path)
    return path


def run_files(work: Path) -> list[Path]:
    """The seed's three runs (baseline, tuned, repeat), written as a user's runs/ folder."""
    paths = []
    for run in factories.seed_runs():
        path = work / "runs" / f"{run.label}.json"
        store.save_run(run, path)
        paths.append(path)
    return paths


def edit_json(path: Path, change: Callable[[dict[str, Any]], object]) -> Path:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def raw_replace(path: Path, old: str, new: str) -> Path:
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


def report(*runs: Path | str, title: str = "T", extra: tuple[str, ...] = ()) -> list[str]:
    return ["report", *map(str, runs), "--title", title, *extra]


def measure(spec: Path | str, out: Path | str, *extra: str, label: str = "a") -> list[str]:
    argv = ["run", "--spec", str(spec), "--label", label, "--role", "baseline", "--out", str(out)]
    return [*argv, *extra]


def seed_result(work: Path, change: Callable[[dict[str, Any]], object] | None = None) -> Path:
    data = json.loads(factories_seed_path().read_text(encoding="utf-8"))
    if change is not None:
        change(data)
    return write(work, "result.json", data)


def factories_seed_path() -> Path:
    from tests.conftest import SEED

    return SEED


def deep(n: int) -> str:
    return "[" * n + "]" * n


def alias_bomb() -> str:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 8)]
    return (
        "\n".join(lines)
        + "\n"
        + spec_text(**{"engine.extra_body": {}}).replace(
            "extra_body: {}", "extra_body: {bomb: *a7}"
        )
    )


# -- the cases -----------------------------------------------------------------------------------


@dataclass
class Case:
    """One bad input: ``make`` builds it in the work folder and returns the command line."""

    id: str
    make: Callable[[Path], list[str]]
    needles: list[str]
    subprocess: bool = False
    absent: list[str] = field(default_factory=list)
    """Strings that must not appear anywhere in the output (secrets)."""


def _validate(name: str, content: str | bytes | dict[str, Any]) -> Callable[[Path], list[str]]:
    return lambda w: ["validate", str(write(w, name, content))]


SPEC_CASES = [
    Case(
        "spec-bool-window",
        _validate("s.yaml", spec_text(**{"measurement.window_s": True})),
        ["s.yaml", "measurement.window_s", "not a boolean"],
    ),
    Case(
        "spec-bool-repeats",
        _validate("s.yaml", spec_text(**{"measurement.repeats": False})),
        ["measurement.repeats", "not a boolean"],
    ),
    Case(
        "spec-bool-slo",
        _validate("s.yaml", spec_text(**{"slo.ttft_p99_ms": True})),
        ["slo.ttft_p99_ms", "not a boolean"],
    ),
    Case(
        "spec-bool-rate",
        _validate("s.yaml", spec_text(**{"sweep.rates": [True, 4]})),
        ["sweep.rates[0]", "not a boolean"],
    ),
    Case(
        "spec-bool-sampling",
        _validate("s.yaml", spec_text(**{"power.sampling_hz": True})),
        ["power.sampling_hz", "not a boolean"],
    ),
    Case(
        "spec-bool-seed",
        _validate("s.yaml", spec_text(**{"workload.seed": True})),
        ["workload.seed", "not a boolean"],
    ),
    Case(
        "spec-bool-tokens",
        _validate("s.yaml", spec_text(**{"workload.output_tokens": True})),
        ["workload.output_tokens"],
    ),
    Case(
        "spec-string-number",
        _validate("s.yaml", spec_text(**{"measurement.warmup_s": "45"})),
        ["measurement.warmup_s", "'45'"],
    ),
    Case(
        "spec-float-count",
        _validate("s.yaml", spec_text(**{"measurement.repeats": 3.0})),
        ["measurement.repeats", "valid integer", "3.0"],
    ),
    Case(
        "spec-int-for-bool",
        _validate("s.yaml", spec_text(**{"sweep.early_stop": 1})),
        ["sweep.early_stop", "valid boolean"],
    ),
    Case(
        "spec-extra-body-nan",
        _validate("s.yaml", spec_text(**{"engine.extra_body": {"top_p": float("nan")}})),
        ["engine.extra_body", "top_p is NaN or infinite"],
    ),
    Case(
        "spec-extra-body-inf",
        _validate("s.yaml", spec_text(**{"engine.extra_body": {"a": [1, float("inf")]}})),
        ["engine.extra_body", "a[1] is NaN or infinite"],
    ),
    Case(
        # A bare YAML date is a date, not a string: refused before the run, not by a
        # TypeError when the first request is written.
        "spec-extra-body-date",
        _validate(
            "s.yaml", spec_text(**{"engine.extra_body": {"since": datetime.date(2026, 1, 2)}})
        ),
        ["engine.extra_body", "since is a date", "quote it"],
    ),
    Case(
        "spec-endpoint-password",
        _validate(
            "s.yaml",
            spec_text(**{"engine.endpoint": f"http://u:{BMC_PASSWORD}@h/v1", "engine.sim": None}),
        ),
        ["engine.endpoint", "must not carry a user name or password", "api_key_env"],
        absent=[BMC_PASSWORD],
    ),
    Case(
        "spec-endpoint-token",
        _validate(
            "s.yaml",
            spec_text(**{"engine.endpoint": "https://sk-abc123xyz@h:8000/v1", "engine.sim": None}),
        ),
        ["engine.endpoint", "must not carry"],
        absent=["sk-abc123xyz"],
    ),
    Case(
        "spec-redfish-url-password",
        _validate(
            "s.yaml",
            spec_text(power={"source": "redfish", "url": f"https://root:{BMC_PASSWORD}@bmc"}),
        ),
        ["power.url", "must not carry", "password_env"],
        absent=[BMC_PASSWORD],
    ),
    Case(
        "spec-prometheus-url-password",
        _validate(
            "s.yaml",
            spec_text(power={"source": "prometheus", "url": "http://a:b-secret-1@dcgm/metrics"}),
        ),
        ["power.url", "must not carry"],
        absent=["b-secret-1"],
    ),
    Case(
        "spec-5000-digit-int",
        _validate("s.yaml", spec_text().replace("seed: 0", "seed: " + "9" * 5000)),
        ["s.yaml", "an integer of 5,000 digits", "line"],
    ),
    Case(
        "spec-deep-nesting",
        _validate("s.yaml", spec_text() + "not_covered: " + deep(20_000) + "\n"),
        ["s.yaml", "nested deeper than 64 levels"],
    ),
    Case(
        "spec-alias-bomb",
        _validate("s.yaml", alias_bomb()),
        ["s.yaml", "aliases expand to more than 1,000,000 values"],
    ),
    Case(
        "spec-recursive-alias",
        _validate("s.yaml", spec_text() + "hardware: &h {host: *h}\n"),
        ["s.yaml", "YAML"],
    ),
    Case(
        "spec-json-deep",
        _validate("s.json", '{"name": ' + deep(5000) + "}"),
        ["s.json", "nested deeper than 64 levels"],
    ),
    Case("spec-a-folder", lambda w: ["validate", str(w)], ["is a folder"]),
    Case(
        "spec-dev-zero",
        lambda w: ["validate", "/dev/zero"],
        ["/dev/zero", "character device", "not a regular file"],
        subprocess=True,
    ),
    Case(
        "spec-fifo",
        lambda w: ["validate", str(fifo(w, "s.yaml"))],
        ["s.yaml", "FIFO", "not a regular file"],
        subprocess=True,
    ),
    Case(
        "measure-spec-fifo",
        lambda w: measure(fifo(w, "s.yaml"), w / "out" / "a.json"),
        ["s.yaml", "FIFO"],
        subprocess=True,
    ),
    Case(
        "measure-spec-dev-zero",
        lambda w: measure("/dev/zero", w / "out" / "a.json"),
        ["/dev/zero", "character device"],
        subprocess=True,
    ),
    Case(
        "spec-config-fifo",
        lambda w: [
            "validate",
            str(write(w, "s.yaml", sim_spec(**{"model.config": str(fifo(w, "config.json"))}))),
        ],
        ["model.config", "not a regular file", "config.json"],
        subprocess=True,
    ),
    Case(
        "spec-config-deep",
        lambda w: [
            "validate",
            str(
                write(
                    w,
                    "s.yaml",
                    sim_spec(
                        **{"model.config": str(write(w, "c.json", '{"a": ' + deep(3000) + "}"))}
                    ),
                )
            ),
        ],
        ["c.json", "nested deeper than 64 levels"],
    ),
    Case(
        "spec-config-huge-int",
        lambda w: [
            "validate",
            str(
                write(
                    w,
                    "s.yaml",
                    sim_spec(
                        **{"model.config": str(write(w, "c.json", '{"a": ' + "7" * 5000 + "}"))}
                    ),
                )
            ),
        ],
        ["c.json", "an integer of 5,000 digits"],
    ),
    Case(
        "spec-suite-dev-zero",
        lambda w: [
            "validate",
            str(write(w, "s.yaml", sim_spec(**{"accuracy.suite": "/dev/zero"}))),
        ],
        ["/dev/zero", "not a regular file"],
    ),
    Case(
        "spec-suite-huge-int",
        lambda w: [
            "validate",
            str(
                write(
                    w,
                    "s.yaml",
                    sim_spec(
                        **{
                            "accuracy.suite": str(
                                write(w, "suite.jsonl", '{"id": ' + "1" * 200 + "}\n")
                            )
                        }
                    ),
                )
            ),
        ],
        ["suite.jsonl", "line 1"],
    ),
]

TRACE_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
TRACE_CASES = [
    Case(
        "trace-csv-nan-timestamp",
        lambda w: ["validate", str(with_trace(w, "t.csv", TRACE_HEAD + "0,10,5\nnan,10,5\n"))],
        ["t.csv:3", "TIMESTAMP is not a finite number", "'nan'"],
    ),
    Case(
        "trace-csv-inf-timestamp",
        lambda w: ["validate", str(with_trace(w, "t.csv", TRACE_HEAD + "inf,10,5\n"))],
        ["t.csv:2", "TIMESTAMP is not a finite number"],
    ),
    Case(
        "trace-csv-huge-field",
        lambda w: [
            "validate",
            str(with_trace(w, "t.csv", TRACE_HEAD + '0,10,"' + "9" * 200_000 + '"\n')),
        ],
        ["t.csv", "not a readable CSV trace", "field larger than field limit"],
    ),
    Case(
        "trace-jsonl-nan",
        lambda w: [
            "validate",
            str(with_trace(w, "t.jsonl", '{"t_s": NaN, "input_tokens": 1, "output_tokens": 2}\n')),
        ],
        ["t.jsonl:1", "NaN is not a number JSON allows"],
    ),
    Case(
        "trace-jsonl-huge-int",
        lambda w: [
            "validate",
            str(
                with_trace(
                    w, "t.jsonl", '{"input_tokens": 1' + "0" * 300 + ', "output_tokens": 2}\n'
                )
            ),
        ],
        ["t.jsonl:1", "an integer of 301 digits"],
    ),
    Case(
        "trace-jsonl-deep",
        lambda w: [
            "validate",
            str(
                with_trace(
                    w,
                    "t.jsonl",
                    '{"input_tokens": 1, "output_tokens": 2, "x": ' + deep(200) + "}\n",
                )
            ),
        ],
        ["t.jsonl:1", "nested deeper than 64 levels"],
    ),
    Case(
        "trace-fifo",
        lambda w: [
            "validate",
            str(write(w, "s.yaml", sim_spec(**{"workload.trace": str(fifo(w, "t.csv"))}))),
        ],
        ["workload.trace", "not a regular file", "t.csv"],
        subprocess=True,
    ),
    Case(
        "trace-measure-nan",
        lambda w: measure(with_trace(w, "t.csv", TRACE_HEAD + "nan,10,5\n"), w / "o" / "a.json"),
        ["t.csv:2", "TIMESTAMP is not a finite number"],
    ),
]


def _forged_run(change: Callable[[dict[str, Any]], object]) -> Callable[[Path], list[str]]:
    """The baseline run edited, reported on its own (a mismatch with the others would be
    found first)."""

    def make(w: Path) -> list[str]:
        base = run_files(w)[0]
        edit_json(base, change)
        return report(base, extra=("--out", str(w / "res" / "r.json")))

    return make


def _raw_run(old: str, new: str) -> Callable[[Path], list[str]]:
    def make(w: Path) -> list[str]:
        base, tuned, other = run_files(w)
        raw_replace(tuned, old, new)
        return report(base, tuned, other, extra=("--out", str(w / "res" / "r.json")))

    return make


def _twice_by_another_path(w: Path) -> list[str]:
    return report(*run_files(w), w / "runs" / ".." / "runs" / "moe-default-2.json")


def _twice_by_hard_link(w: Path) -> list[str]:
    paths = run_files(w)
    os.link(paths[2], w / "copy.json")
    return report(*paths, w / "copy.json")


def _copied_under_another_role(w: Path) -> list[str]:
    paths = run_files(w)
    copy = w / "again.json"
    copy.write_bytes(paths[0].read_bytes())
    edit_json(copy, lambda d: d.update(role="other"))
    return report(*paths, copy)


def _sim_endpoint(d: dict[str, Any]) -> None:
    d["spec"]["engine"]["endpoint"] = "sim"
    d["simulated"] = False


RUN_CASES = [
    Case(
        "run-deep-nesting",
        _raw_run('"probes": [', '"nest": ' + deep(5000) + ', "probes": ['),
        ["moe-tuned.json", "nested deeper than 64 levels"],
    ),
    Case(
        "run-huge-int",
        _raw_run('"role": "tuned"', '"role": "tuned", "n": ' + "1" * 5000),
        ["moe-tuned.json", "an integer of 5,000 digits"],
    ),
    Case(
        "run-nan",
        _raw_run('"role": "tuned"', '"role": "tuned", "n": NaN'),
        ["moe-tuned.json", "NaN is not a number JSON allows"],
    ),
    Case(
        "run-duplicate-key",
        _raw_run('"role": "tuned"', '"role": "tuned", "role": "baseline"'),
        ["moe-tuned.json", "duplicate key 'role'"],
    ),
    Case(
        "run-sim-endpoint-marked-real",
        _forged_run(_sim_endpoint),
        ["moe-default.json", "simulated is false", "engine.endpoint is 'sim'"],
    ),
    Case(
        "run-sim-engine-marked-real",
        _forged_run(lambda d: d["environment"].update(engine_version="tokenwatt-sim 0.1.0")),
        ["moe-default.json", "simulated is false", "identified itself as 'tokenwatt-sim"],
    ),
    Case(
        "run-simulated-gpu-marked-real",
        _forged_run(
            lambda d: d["environment"].update(
                gpus=[{"index": 0, "name": "NVIDIA H100 (simulated)"}]
            )
        ),
        ["moe-default.json", "simulated is false", "GPUs are simulated"],
    ),
    Case(
        "run-quick-hidden",
        _forged_run(
            lambda d: d.update(quick=False) or d["spec"]["measurement"].update(window_s=300)
        ),
        ["moe-default.json", "quick is false", "effective"],
    ),
    Case(
        "run-forged-slo-pass",
        _forged_run(lambda d: d["probes"][-1].update(slo_pass=not d["probes"][-1]["slo_pass"])),
        ["moe-default.json", "outcome.confirmed_rate_rps", "confirmation repeat failed"],
    ),
    Case(
        "run-spec-bool-number",
        _forged_run(lambda d: d["spec"]["measurement"].update(window_s=True)),
        ["moe-default.json", "spec.measurement.window_s", "not a boolean"],
    ),
    Case(
        "run-spec-endpoint-credentials",
        _forged_run(
            lambda d: d["spec"]["engine"].update(endpoint=f"http://admin:{BMC_PASSWORD}@h/v1")
        ),
        ["moe-default.json", "spec.engine.endpoint", "must not carry"],
        absent=[BMC_PASSWORD],
    ),
    Case(
        "run-given-twice",
        lambda w: report(*run_files(w)[:2], w / "runs" / "moe-tuned.json"),
        ["moe-tuned.json", "the same run file as"],
    ),
    Case(
        "run-given-twice-by-another-path",
        _twice_by_another_path,
        ["moe-default-2.json", "the same run file as"],
    ),
    Case(
        "run-given-twice-by-hard-link", _twice_by_hard_link, ["copy.json", "the same run file as"]
    ),
    Case(
        "run-copied-under-another-role",
        _copied_under_another_role,
        ["again.json", "holds the same measurement as", "identical probes"],
    ),
    Case("run-fifo", lambda w: report(fifo(w, "a.json")), ["a.json", "FIFO"], subprocess=True),
    Case(
        "run-dev-zero",
        lambda w: report("/dev/zero"),
        ["/dev/zero", "character device"],
        subprocess=True,
    ),
]

RESULT_CASES = [
    Case(
        "result-deep-nesting",
        lambda w: [
            "validate",
            str(
                raw_replace(seed_result(w), '"configs": [', '"x": ' + deep(2000) + ', "configs": [')
            ),
        ],
        ["result.json", "nested deeper than 64 levels"],
    ),
    Case(
        "result-huge-int",
        lambda w: [
            "validate",
            str(
                raw_replace(seed_result(w), '"configs": [', '"x": ' + "4" * 5000 + ', "configs": [')
            ),
        ],
        ["result.json", "an integer of 5,000 digits"],
    ),
    Case(
        "result-spec-bool-number",
        lambda w: [
            "validate",
            str(seed_result(w, lambda d: d["spec"]["measurement"].update(repeats=True))),
        ],
        ["result.json", "spec.measurement.repeats", "not a boolean"],
    ),
    Case(
        "result-spec-credentials",
        lambda w: [
            "validate",
            str(
                seed_result(
                    w,
                    lambda d: d["spec"]["engine"].update(endpoint=f"http://u:{BMC_PASSWORD}@h/v1"),
                )
            ),
        ],
        ["result.json", "spec.engine.endpoint", "must not carry"],
        absent=[BMC_PASSWORD],
    ),
    Case(
        "result-id-with-path",
        lambda w: ["validate", str(seed_result(w, lambda d: d.update(id="../../etc/x")))],
        ["result.json", "id", "should match pattern"],
    ),
    Case(
        "result-special-file",
        lambda w: ["validate", "/dev/urandom"],
        ["/dev/urandom", "character device"],
        subprocess=True,
    ),
]


def _existing(name: str, content: Callable[[Path], str]) -> Callable[[Path], Path]:
    return lambda w: write(w, name, content(w))


def _run_text(w: Path) -> str:
    return json.dumps(store.dump_run(factories.run()))


def _result_text(w: Path) -> str:
    return factories_seed_path().read_text(encoding="utf-8")


ARG_CASES = [
    Case(
        "arg-label-empty",
        lambda w: measure(TINY_SIM, w / "a.json", label=""),
        ["argument --label", "must not be empty"],
    ),
    Case(
        "arg-label-blank",
        lambda w: measure(TINY_SIM, w / "a.json", label="   "),
        ["argument --label", "must not be empty"],
    ),
    Case(
        "arg-label-newline",
        lambda w: measure(TINY_SIM, w / "a.json", label="a\nb"),
        ["argument --label", "one line"],
    ),
    Case(
        "arg-label-too-long",
        lambda w: measure(TINY_SIM, w / "a.json", label="x" * 501),
        ["argument --label", "at most 500"],
    ),
    Case(
        "arg-description-empty",
        lambda w: measure(TINY_SIM, w / "a.json", "--description", ""),
        ["argument --description", "must not be empty"],
    ),
    Case(
        "arg-title-empty",
        lambda w: report(*run_files(w), title=""),
        ["argument --title", "must not be empty"],
    ),
    Case(
        "arg-title-control",
        lambda w: report(*run_files(w), title="a\x1b[31m"),
        ["argument --title", "one line"],
    ),
    Case(
        "arg-id-parent-path",
        lambda w: report(*run_files(w), extra=("--id", "../evil")),
        ["argument --id", "'../evil' is not a result id"],
    ),
    Case(
        "arg-id-absolute-path",
        lambda w: report(*run_files(w), extra=("--id", "/tmp/x")),
        ["argument --id", "is not a result id"],
    ),
    Case(
        "arg-id-subfolder",
        lambda w: report(*run_files(w), extra=("--id", "a/b")),
        ["argument --id", "is not a result id"],
    ),
    Case(
        "arg-id-upper-case",
        lambda w: report(*run_files(w), extra=("--id", "Result")),
        ["argument --id", "is not a result id"],
    ),
    Case(
        "arg-measure-out-exists",
        lambda w: measure(TINY_SIM, _existing("runs/a.json", _run_text)(w)),
        ["runs/a.json", "already exists", "--force"],
    ),
    Case(
        "arg-measure-out-is-result-force",
        lambda w: measure(TINY_SIM, _existing("results/r.json", _result_text)(w), "--force"),
        ["results/r.json", "is a result file", "--force replaces only a run file"],
    ),
    Case(
        "arg-measure-out-is-spec-force",
        lambda w: measure(
            TINY_SIM, _existing("s.json", lambda w: json.dumps(sim_spec()))(w), "--force"
        ),
        ["s.json", "is a spec file", "only a run file"],
    ),
    Case(
        "arg-measure-out-not-tokenwatt-force",
        lambda w: measure(TINY_SIM, _existing("notes.json", lambda w: "my notes")(w), "--force"),
        ["notes.json", "is not a tokenwatt file"],
    ),
    Case(
        "arg-measure-out-folder",
        lambda w: measure(TINY_SIM, w),
        ["is a folder", "--out must name a file"],
    ),
    Case(
        "arg-report-out-exists",
        lambda w: report(
            *run_files(w), extra=("--out", str(_existing("results/r.json", _result_text)(w)))
        ),
        ["results/r.json", "already exists", "--force"],
    ),
    Case(
        "arg-report-out-is-run-force",
        lambda w: report(*(p := run_files(w)), extra=("--out", str(p[0]), "--force")),
        ["moe-default.json", "is a run file", "--force replaces only a result file"],
    ),
    Case(
        "arg-report-out-folder",
        lambda w: report(*run_files(w), extra=("--out", str(w / "runs"))),
        ["runs", "is a folder"],
    ),
    Case(
        "arg-report-run-missing", lambda w: report(w / "nope.json"), ["nope.json", "file not found"]
    ),
]

CASES = SPEC_CASES + TRACE_CASES + RUN_CASES + RESULT_CASES + ARG_CASES


def test_the_battery_is_large_and_every_case_is_named_once():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 60 + 10  # issue 16: at least 60 beyond what there was


# -- running a case --------------------------------------------------------------------------------


def snapshot(folder: Path) -> dict[str, str]:
    """Every entry under ``folder`` with its type, and a regular file's bytes' hash."""
    found: dict[str, str] = {}
    for path in sorted(folder.rglob("*")):
        mode = path.lstat().st_mode
        if stat.S_ISREG(mode):
            found[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[str(path.relative_to(folder))] = stat.filemode(mode)
    return found


def messages(err: str) -> list[str]:
    """The error lines: ``XError: ...``, ``invalid FILE: ...`` (validate), argparse's ``error:``."""
    lines = []
    for line in err.splitlines():
        head = line.split(":", 1)[0]
        if (
            (head.endswith("Error") and " " not in head)
            or line.startswith("invalid ")
            or ": error: " in line
        ):
            lines.append(line)
    return lines


def run_cli(argv: list[str], *, cwd: Path, in_process: bool, capsys) -> tuple[int, str]:
    if not in_process:
        done = subprocess.run(
            [sys.executable, "-m", "tokenwatt", *argv],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return done.returncode, done.stdout + done.stderr
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse refuses an argument: status 2, its one message
        rc = int(exc.code or 0)
    captured = capsys.readouterr()
    return rc, captured.out + captured.err


@pytest.fixture
def _logging_restored():
    """The CLI sets up logging as a process would; put the test session's back afterwards."""
    import logging

    root, ours = logging.getLogger(), logging.getLogger("tokenwatt")
    handlers, levels = list(root.handlers), (root.level, ours.level)
    yield
    root.handlers[:] = handlers
    root.setLevel(levels[0])
    ours.setLevel(levels[1])


@pytest.mark.usefixtures("_logging_restored")
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_exit_2_one_message_and_nothing_written(case, tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    cache = tmp_path / "cache"
    monkeypatch.setenv("TOKENWATT_CACHE", str(cache))
    monkeypatch.chdir(work)
    argv = case.make(work)
    before = snapshot(work)
    rc, output = run_cli(argv, cwd=work, in_process=not case.subprocess, capsys=capsys)
    flat = " ".join(output.split())
    assert rc == 2, output[-3000:]
    assert "Traceback" not in output
    found = messages(output)
    assert len(found) == 1, found
    for needle in case.needles:
        assert needle in flat, f"{needle!r} not in {flat[-2000:]!r}"
    for secret in case.absent:
        assert secret not in output
    assert snapshot(work) == before  # nothing written, replaced or lost
    assert not cache.exists()  # and nothing needed recovering
