"""``tokenwatt validate`` on good and bad files: one clear message, exit 2, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import factories
from tokenwatt.cli import main
from tokenwatt.store import dump_run


def write_yaml(path: Path, data: object) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def seed_with(seed_path: Path, change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(seed_path.read_text(encoding="utf-8"))
    change(data)
    return data


def good_run() -> dict[str, Any]:
    return dump_run(factories.run())


def _set(data: dict[str, Any], dotted: str, value: object) -> dict[str, Any]:
    node = data
    *parents, last = dotted.split(".")
    for key in parents:
        node = node[key]
    node[last] = value
    return data


def _del(data: dict[str, Any], dotted: str) -> dict[str, Any]:
    node = data
    *parents, last = dotted.split(".")
    for key in parents:
        node = node[key]
    del node[last]
    return data


# (case id, file name, content maker, strings the message must contain)
# Content is bytes, or a dict/list dumped as YAML for .yaml and JSON for .json.
BAD_INPUTS = [
    (
        "wrong-type",
        "s.yaml",
        lambda s: _set(factories.spec_dict(), "slo", {"ttft_p99_ms": "fast", "tpot_p99_ms": 50}),
        ["slo.ttft_p99_ms", "valid number", "'fast'"],
    ),
    (
        "missing-section",
        "s.yaml",
        lambda s: _del(factories.spec_dict(), "engine"),
        ["engine", "Field required"],
    ),
    (
        "negative-rate",
        "s.yaml",
        lambda s: _set(factories.spec_dict(), "sweep", {"start_rps": -2}),
        ["sweep.start_rps", "greater than 0", "-2"],
    ),
    (
        "zero-rate",
        "s.yaml",
        lambda s: _set(factories.spec_dict(), "sweep", {"rates": [4, 0]}),
        ["sweep.rates[1]", "greater than 0"],
    ),
    (
        "growth-le-1",
        "s.yaml",
        lambda s: _set(factories.spec_dict(), "sweep", {"growth": 0.8}),
        ["sweep.growth", "greater than 1"],
    ),
    (
        "backoff-above-1",
        "s.yaml",
        lambda s: _set(factories.spec_dict(), "sweep", {"backoff": 1.2}),
        ["sweep.backoff", "less than 1"],
    ),
    (
        "backoff-zero",
        "s.yaml",
        lambda s: _set(factories.spec_dict(), "sweep", {"backoff": 0}),
        ["sweep.backoff", "greater than 0"],
    ),
    (
        "unknown-power-source",
        "s.yaml",
        lambda s: _set(factories.spec_dict(), "power", {"source": "wattmeter"}),
        ["power.source", "'board'", "'wattmeter'"],
    ),
    (
        "redfish-without-url",
        "s.yaml",
        lambda s: _set(factories.spec_dict(), "power", {"source": "redfish"}),
        ["power", "needs 'url'"],
    ),
    (
        "secret-instead-of-name",
        "s.yaml",
        lambda s: _set(
            factories.spec_dict(), "engine", {"model": "m", "api_key_env": "sk-proj-12345"}
        ),
        ["engine.api_key_env", "name of an environment variable"],
    ),
    (
        "typo-field",
        "s.yaml",
        lambda s: _set(factories.spec_dict(), "sweep", {"growht": 2}),
        ["sweep.growht", "unknown field"],
    ),
    (
        "huge-number",
        "s.yaml",
        lambda s: _set(factories.spec_dict(), "sweep", {"max_rps": 1e300}),
        ["sweep.max_rps", "less than or equal to 1000000"],
    ),
    ("empty-file", "s.yaml", lambda s: b"", ["file is empty"]),
    ("whitespace-only", "s.json", lambda s: b"  \n\n", ["file is empty"]),
    ("json-list", "r.json", lambda s: [1, 2, 3], ["top level must be a mapping", "a list"]),
    (
        "yaml-scalar",
        "s.yaml",
        lambda s: b"just a string\n",
        ["top level must be a mapping", "a string"],
    ),
    ("non-utf8", "s.yaml", lambda s: b"name: caf\xe9\n", ["not UTF-8", "0xe9", "offset 9"]),
    (
        "yaml-syntax",
        "s.yaml",
        lambda s: b"name: x\nengine: {model: m\nslo: [\n",
        ["YAML syntax error", "line"],
    ),
    (
        "yaml-duplicate-key",
        "s.yaml",
        lambda s: b"name: a\nname: b\n",
        ["duplicate key 'name'", "line 2"],
    ),
    (
        "json-syntax",
        "r.json",
        lambda s: b'{"id": "x",,}',
        ["JSON syntax error", "line 1, column 12"],
    ),
    ("json-nan", "r.json", lambda s: b'{"configs": NaN}', ["NaN is not a number JSON allows"]),
    (
        "json-infinite-number",
        "r.json",
        lambda s: (
            json.dumps(seed_with(s, lambda d: d["configs"][0].update(goodput_tok_s=1)))
            .replace('"goodput_tok_s": 1', '"goodput_tok_s": 1e400')
            .encode()
        ),
        ["configs[0].goodput_tok_s", "finite number"],
    ),
    (
        "unknown-role",
        "r.json",
        lambda s: _set(good_run(), "role", "candidate"),
        ["role", "'baseline'", "'candidate'"],
    ),
    (
        "result-unknown-config-key",
        "r.json",
        lambda s: seed_with(s, lambda d: d["configs"][1].update(key="challenger")),
        ["configs[1].key"],
    ),
    (
        "result-empty-configs",
        "r.json",
        lambda s: seed_with(s, lambda d: d.update(configs=[])),
        ["configs", "at least 1 item"],
    ),
    (
        "result-negative-goodput",
        "r.json",
        lambda s: seed_with(s, lambda d: d["configs"][2].update(goodput_tok_s=-1.0)),
        ["configs[2].goodput_tok_s", "greater than or equal to 0"],
    ),
    (
        "result-bad-date",
        "r.json",
        lambda s: seed_with(s, lambda d: d.update(published="yesterday")),
        ["published", "date"],
    ),
    (
        "result-spec-bad-growth",
        "r.json",
        lambda s: seed_with(s, lambda d: d["spec"]["sweep"].update(growth=1)),
        ["spec.sweep.growth", "greater than 1"],
    ),
    (
        "run-schema-version",
        "r.json",
        lambda s: _set(good_run(), "schema_version", 2),
        ["schema_version 2", "reads 1"],
    ),
    ("run-missing-spec", "r.json", lambda s: _del(good_run(), "spec"), ["spec", "Field required"]),
    (
        "run-probe-count-mismatch",
        "r.json",
        lambda s: _set(good_run(), "probes", [{**good_run()["probes"][0], "ok": 3}]),
        ["probes[0]", "window_requests"],
    ),
    ("unknown-kind", "x.json", lambda s: {"hello": "world"}, ["cannot tell what this is"]),
    (
        "spec-missing-config-file",
        "s.yaml",
        lambda s: _set(
            factories.spec_dict(),
            "model",
            {"name": "m", "vocab_size": 10, "config": "nope/config.json"},
        ),
        ["model.config", "file not found", "nope/config.json"],
    ),
    (
        "lognormal-p90-below-median",
        "s.yaml",
        lambda s: _set(
            factories.spec_dict(),
            "workload",
            {"input_tokens": {"dist": "lognormal", "median": 900, "p90": 100}},
        ),
        ["workload.input_tokens", "p90"],
    ),
    (
        "distribution-unknown",
        "s.yaml",
        lambda s: _set(
            factories.spec_dict(), "workload", {"output_tokens": {"dist": "zipf", "s": 1}}
        ),
        ["workload.output_tokens"],
    ),
]


def materialise(tmp_path: Path, name: str, content: object) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif name.endswith(".yaml"):
        write_yaml(path, content)
    else:
        path.write_text(json.dumps(content), encoding="utf-8")
    return path


def test_there_are_at_least_twenty_distinct_bad_inputs():
    assert len({case[0] for case in BAD_INPUTS}) >= 20


@pytest.mark.parametrize(
    ("case", "name", "make", "needles"), BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS]
)
def test_bad_input_is_one_clear_message_and_exit_2(
    tmp_path, capsys, seed_path, case, name, make, needles
):
    path = materialise(tmp_path, name, make(seed_path))
    before = sorted(p.name for p in tmp_path.iterdir())
    rc = main(["validate", str(path)])
    captured = capsys.readouterr()
    message = " ".join(captured.err.split())
    assert rc == 2, captured
    assert str(path) in message
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    assert "Traceback" not in captured.err + captured.out
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_good_files_validate(capsys, seed_path, repo):
    files = [
        seed_path,
        *sorted((repo / "results").glob("*.json")),
        *sorted((repo / "specs").glob("*.yaml")),
    ]
    assert main(["validate", *map(str, files)]) == 0
    out = capsys.readouterr().out
    assert out.count("ok ") == len(files)


def test_a_spec_with_shared_prefixes_states_the_hit_rate_they_should_give(capsys, repo):
    assert main(["validate", str(repo / "tests/data/prefix-sim.spec.yaml")]) == 0
    out = capsys.readouterr().out
    # 4 prefixes of 450 tokens, 64 own: 28 whole 16-token blocks = 448 of 514 tokens
    assert "expected prefix-cache hit rate 87.2 % at 16-token blocks" in out
    assert "engine.sim.block_size" in out
    assert main(["validate", str(repo / "specs/demo-sim.spec.yaml")]) == 0
    assert "prefix-cache" not in capsys.readouterr().out  # unique prompts: nothing to expect


def test_run_file_validates(tmp_path, capsys):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(good_run()), encoding="utf-8")
    assert main(["validate", str(path)]) == 0
    assert "(run)" in capsys.readouterr().out


def test_publish_rejects_the_seed_and_names_each_rule(capsys, seed_path):
    rc = main(["validate", "--publish", str(seed_path)])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 1
    assert "not publishable" in err
    for needle in (
        "window_s",
        "120 s",
        "300 s",
        "warmup_s",
        "45 s",
        "60 s",
        "repeats",
        "is 2",
        "minimum is 3",
        "accuracy_questions",
        "is 50",
        "minimum is 200",
    ):
        assert needle in err


def test_one_bad_file_among_good_ones_still_exits_2_and_checks_the_rest(
    tmp_path, capsys, seed_path
):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [\n")
    assert main(["validate", str(seed_path), str(bad)]) == 2
    captured = capsys.readouterr()
    assert "ok " in captured.out
    assert "bad.yaml" in captured.err


@pytest.mark.parametrize("kind", ["spec", "run", "result", "comparison"])
def test_schema_command_prints_json_schema(capsys, kind):
    assert main(["schema", kind]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["type"] == "object"
    assert "properties" in schema


def test_console_script_exit_status_and_no_traceback(tmp_path, seed_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    proc = subprocess.run(
        [sys.executable, "-m", "tokenwatt", "validate", str(bad)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "top level must be a mapping" in proc.stderr
    assert "Traceback" not in proc.stderr
    ok = subprocess.run(
        [sys.executable, "-m", "tokenwatt", "validate", str(seed_path)],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
