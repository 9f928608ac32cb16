"""A spec whose engine.launch holds a secret: `tokenwatt validate` and `run` exit 2 naming it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SPEC = """\
name: leaky
hardware: {adapter: none}
engine:
  model: tiny
  launch: "vllm serve tiny --max-model-len 4096 --api-key s3cr3t-value"
model: {name: tiny, vocab_size: 32000}
power: {source: none}
"""


@pytest.mark.parametrize("command", ["validate", "run"])
def test_secret_in_launch_is_a_usage_error_naming_the_field(command, repo, tmp_path: Path):
    spec = tmp_path / "leaky.spec.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    argv = [sys.executable, "-m", "tokenwatt", command]
    argv += (
        [str(spec)]
        if command == "validate"
        else ["--spec", str(spec), "--label", "a", "--role", "baseline"]
    )
    argv += [] if command == "validate" else ["--out", str(tmp_path / "run.json")]
    done = subprocess.run(argv, cwd=repo, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert "engine.launch looks like it holds a secret (--api-key VALUE)" in done.stderr
    assert "s3cr3t-value" not in done.stdout + done.stderr
    assert not (tmp_path / "run.json").exists()
