"""Provenance: git commit, spec hash."""

from __future__ import annotations

import re
import subprocess

from tokenwatt import provenance


def test_git_commit_of_this_checkout(repo):
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True)
    commit = provenance.git_commit(repo)
    assert commit is not None
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", commit)
    assert commit.startswith(head.stdout.strip())


def test_no_git_outside_a_checkout(tmp_path):
    assert provenance.git_commit(tmp_path) is None
