"""Atomic writes, secrets kept out of files, and spec path resolution."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests import factories
from tests.measure_cli import write_spec
from tokenwatt import store
from tokenwatt.errors import InputError, SpecError, WriteError
from tokenwatt.schema.spec import Spec


def test_save_and_load_run_round_trip(tmp_path):
    run = factories.run()
    path = tmp_path / "runs" / "a.json"
    store.save_run(run, path)
    assert store.load_run(path) == run
    assert [p.name for p in path.parent.iterdir()] == ["a.json"]


def test_written_files_get_the_umask_mode_not_0600(tmp_path):
    old = os.umask(0o022)
    try:
        path = tmp_path / "a.json"
        store.save_run(factories.run(), path)
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


def test_infinite_latency_survives_json(tmp_path):
    probe = factories.probe(ttft_ms=factories.stats(float("inf")), slo_pass=False)
    run = factories.run(probes=[probe])
    path = tmp_path / "a.json"
    store.save_run(run, path)
    text = path.read_text()
    assert '"p99": "Infinity"' in text
    assert store.load_run(path).probes[0].ttft_ms.p99 == float("inf")


def test_a_crash_mid_write_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "a.json"
    path.write_text('{"old": true}')

    def boom(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(KeyboardInterrupt):
        store.save_run(factories.run(), path)
    assert json.loads(path.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_a_secret_value_is_redacted_and_the_run_still_written(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TW_TEST_KEY", "sk-very-secret-123")
    spec = factories.spec(
        engine={
            "model": "m",
            "api_key_env": "TW_TEST_KEY",
            "extra_body": {"oops": "key sk-very-secret-123 here"},
        }
    )
    path = tmp_path / "a.json"
    store.save_run(factories.run(spec=spec), path)
    text = path.read_text()
    assert "sk-very-secret-123" not in text
    assert '"oops": "key REDACTED here"' in text
    assert store.load_run(path).spec.engine.extra_body == {"oops": "key REDACTED here"}
    assert "$TW_TEST_KEY" in caplog.text
    assert "sk-very-secret-123" not in caplog.text


@pytest.mark.parametrize("value", ["none", "1000", "aaaaaaaaaaaa", "abab"])
def test_short_or_uniform_secret_values_are_not_matched(tmp_path, monkeypatch, value):
    """A password such as ``none`` would otherwise match every "none" and 1000 in the run."""
    monkeypatch.setenv("TW_TEST_PW", value)
    spec = factories.spec(
        engine={"model": "m", "extra_body": {"mode": "none", "n": 1000, "s": "aaaaaaaaaaaa"}},
        power={"source": "ipmi", "host": "bmc", "username": "u", "password_env": "TW_TEST_PW"},
    )
    run = factories.run(spec=spec)
    path = tmp_path / "a.json"
    store.save_run(run, path)
    assert store.load_run(path) == run


def test_numbers_are_never_redacted(tmp_path, monkeypatch):
    monkeypatch.setenv("TW_TEST_PW", "1234567890")
    spec = factories.spec(
        engine={"model": "m", "extra_body": {"seed": 1234567890}},
        power={"source": "ipmi", "host": "bmc", "username": "u", "password_env": "TW_TEST_PW"},
    )
    path = tmp_path / "a.json"
    store.save_run(factories.run(spec=spec), path)
    assert store.load_run(path).spec.engine.extra_body == {"seed": 1234567890}


def test_the_name_of_a_secret_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("TW_TEST_KEY", "sk-very-secret-123")
    spec = factories.spec(engine={"model": "m", "api_key_env": "TW_TEST_KEY"})
    path = tmp_path / "a.json"
    store.save_run(factories.run(spec=spec), path)
    text = path.read_text()
    assert "TW_TEST_KEY" in text
    assert "sk-very-secret-123" not in text


def test_unwritable_folder_is_an_input_error_and_the_run_is_recovered(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENWATT_CACHE", str(tmp_path / "cache"))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    run = factories.run()
    with pytest.raises(WriteError, match="cannot write") as info:
        store.save_run(run, blocker / "a.json")
    assert isinstance(info.value, InputError)
    (recovered,) = (tmp_path / "cache" / "recovery").iterdir()
    assert str(recovered) in str(info.value)
    assert "move it into place" in str(info.value)
    assert store.load_run(recovered) == run


def test_a_full_disk_is_one_message_and_the_run_is_recovered(tmp_path, monkeypatch):
    """``/dev/full`` is a real device that answers every write with ENOSPC."""
    monkeypatch.setenv("TOKENWATT_CACHE", str(tmp_path / "cache"))
    real_fdopen = os.fdopen
    out = tmp_path / "runs"
    out.mkdir()

    def full_disk(fd: int, *args, **kwargs):
        handle = real_fdopen(fd, *args, **kwargs)
        if Path(f"/proc/self/fd/{fd}").readlink().parent == out:
            full = os.open("/dev/full", os.O_WRONLY)
            os.dup2(full, fd)
            os.close(full)
        return handle

    monkeypatch.setattr(os, "fdopen", full_disk)
    run = factories.run()
    with pytest.raises(WriteError, match="no space left on the device") as info:
        store.save_run(run, out / "a.json")
    assert list(out.iterdir()) == []  # no half-written file, no temporary file
    (recovered,) = (tmp_path / "cache" / "recovery").iterdir()
    assert str(recovered) in str(info.value)
    assert store.load_run(recovered) == run


def test_a_folder_as_the_output_is_one_message(tmp_path):
    with pytest.raises(WriteError, match="is a folder; name a file to write"):
        store.atomic_write_text(tmp_path, "x")


def test_bare_spec_name_is_found_in_specs(tmp_path, monkeypatch, repo):
    monkeypatch.chdir(repo)
    found = store.resolve_spec_path("lambda-qwen3-30b-a3b-fp8-tp1-dp1.spec.yaml")
    assert found.as_posix() == "specs/lambda-qwen3-30b-a3b-fp8-tp1-dp1.spec.yaml"
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError, match="not found"):
        store.resolve_spec_path("lambda-qwen3-30b-a3b-fp8-tp1-dp1.spec.yaml")


def test_relative_paths_resolve_from_the_spec_folder_then_cwd(tmp_path, monkeypatch):
    spec_dir = tmp_path / "specs"
    spec_dir.mkdir()
    (spec_dir / "a.txt").write_text("x")
    (tmp_path / "b.txt").write_text("x")
    monkeypatch.chdir(tmp_path)
    spec_path = spec_dir / "s.yaml"
    assert store.resolve_relative(spec_path, "a.txt") == spec_dir / "a.txt"
    assert store.resolve_relative(spec_path, "b.txt").resolve() == tmp_path / "b.txt"
    assert store.resolve_relative(spec_path, "c.txt") == spec_dir / "c.txt"
    assert store.resolve_relative(spec_path, "/abs/c.txt").as_posix() == "/abs/c.txt"


def test_filled_marks_defaults_as_set():
    spec = factories.spec()
    assert "sweep" not in spec.model_dump(exclude_unset=True)
    assert "sweep" in store.filled(spec).model_dump(exclude_unset=True)


def test_load_spec_resolves_every_named_file_and_keeps_the_spec_as_written(tmp_path, monkeypatch):
    spec_dir = tmp_path / "specs"
    (spec_dir / "models").mkdir(parents=True)
    (spec_dir / "models" / "config.json").write_text("{}")
    (tmp_path / "suite.jsonl").write_text("{}\n")  # not beside the spec: from the current folder
    (spec_dir / "t.jsonl").write_text('{"input_tokens": 1, "output_tokens": 1}\n')
    data = factories.spec_dict(
        model={"name": "m", "vocab_size": 10, "config": "models/config.json"},
        workload={"trace": "t.jsonl"},
        accuracy={"suite": "suite.jsonl"},
    )
    path = write_spec(spec_dir / "s.spec.yaml", data)
    monkeypatch.chdir(tmp_path)
    loaded = store.load_spec(path)
    assert loaded.path == path
    assert loaded.config_file == spec_dir / "models" / "config.json"
    assert loaded.trace_file == spec_dir / "t.jsonl"
    assert loaded.suite_file is not None
    assert loaded.suite_file.resolve() == tmp_path / "suite.jsonl"
    assert loaded.spec == Spec.model_validate(data)
    assert loaded.spec.model.config == "models/config.json"
    builtin = store.load_spec(write_spec(tmp_path / "b.spec.yaml", factories.spec_dict()))
    assert (builtin.config_file, builtin.trace_file, builtin.suite_file) == (None, None, None)


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"model": {"name": "m", "vocab_size": 10, "config": "no/config.json"}}, "model.config"),
        ({"workload": {"trace": "no/trace.csv"}}, "workload.trace"),
        ({"accuracy": {"suite": "no-suite.jsonl"}}, "accuracy.suite"),
    ],
)
def test_a_missing_named_file_is_a_spec_error_naming_the_field(tmp_path, section, field):
    path = write_spec(tmp_path / "s.spec.yaml", factories.spec_dict(**section))
    with pytest.raises(SpecError, match=f"s.spec.yaml: invalid spec: {field}: file not found"):
        store.load_spec(path)


def test_the_spec_hash_is_of_the_bytes_loaded_not_of_the_file_later(tmp_path, repo):
    import hashlib

    spec = tmp_path / "s.yaml"
    raw = (repo / "tests" / "data" / "tiny-sim.spec.yaml").read_bytes()
    spec.write_bytes(raw.replace(b"../../", str(repo).encode() + b"/"))
    first = spec.read_bytes()
    loaded = store.load_spec(spec)
    assert loaded.sha256 == hashlib.sha256(first).hexdigest()
    # edited during an hour-long run, or deleted: the run still records what was measured
    spec.write_bytes(first + b"\n# edited\n")
    assert loaded.sha256 == hashlib.sha256(first).hexdigest()
    assert store.load_spec(spec).sha256 == hashlib.sha256(first + b"\n# edited\n").hexdigest()


def test_the_state_folder_follows_the_xdg_rule_and_the_override(tmp_path, monkeypatch):
    monkeypatch.delenv("TOKENWATT_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert store.state_dir() == tmp_path / "xdg" / "tokenwatt"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/path")  # the XDG rule: ignored
    assert store.state_dir() == Path.home() / ".local" / "state" / "tokenwatt"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert store.state_dir() == Path.home() / ".local" / "state" / "tokenwatt"
    monkeypatch.setenv("TOKENWATT_STATE_DIR", str(tmp_path / "mine"))
    assert store.state_dir() == tmp_path / "mine"


def test_the_test_suite_never_uses_the_users_state_folder(tmp_path_factory):
    # tests/conftest.py points every test (and every process it starts) at a temporary folder.
    assert store.state_dir().is_relative_to(tmp_path_factory.getbasetemp())
