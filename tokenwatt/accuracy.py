"""The accuracy gate: gsm8k-style suites, few-shot prompts, the numeric scorer and the runner.

Suites are JSONL files, one question per line::

    {"id": "gsm8k-test-0042", "question": "...", "answer": "18", "solution": "... #### 18"}

``answer`` is the gold final answer as text; ``solution`` (optional) the worked solution.
"""

from __future__ import annotations

import json
import logging
import random
import re
from pathlib import Path

from pydantic import Field, ValidationError

from tokenwatt.errors import InputError
from tokenwatt.schema.base import StrictModel

__all__ = [
    "SuiteItem",
    "final_answer_of_solution",
    "import_gsm8k",
    "load_suite",
    "write_suite",
]

logger = logging.getLogger(__name__)


class SuiteItem(StrictModel):
    """One question of a suite."""

    id: str = Field(min_length=1)
    question: str = Field(min_length=1)
    answer: str = Field(min_length=1, description="Gold final answer")
    solution: str | None = Field(default=None, description="Worked solution, if known")


_GSM8K_FINAL = re.compile(r"####\s*(.+?)\s*$", re.MULTILINE)


def final_answer_of_solution(solution: str) -> str:
    """The gold answer of a GSM8K solution: the text after its ``####`` line, commas removed."""
    match = _GSM8K_FINAL.search(solution)
    if match is None:
        raise ValueError("no '#### <answer>' line")
    return match.group(1).replace(",", "").strip()


def _read_gsm8k(path: Path) -> list[SuiteItem]:
    items: list[SuiteItem] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            solution = str(row["answer"])
            items.append(
                SuiteItem(
                    id=f"gsm8k-{path.stem}-{number - 1:04d}",
                    question=str(row["question"]),
                    answer=final_answer_of_solution(solution),
                    solution=solution,
                )
            )
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{path}: line {number}: not a GSM8K row: {exc}") from None
    return items


def import_gsm8k(source: Path, *, count: int, seed: int = 0) -> list[SuiteItem]:
    """Choose ``count`` questions of an official GSM8K JSONL file, reproducibly.

    The choice is ``random.Random(seed).sample`` over the file's rows, kept in sampled order, so
    the first N of a suite are themselves a random sample (``limit`` takes a prefix).
    """
    rows = _read_gsm8k(source)
    if not 1 <= count <= len(rows):
        raise InputError(f"{source}: asked for {count} questions, the file has {len(rows)}")
    chosen = random.Random(seed).sample(range(len(rows)), count)
    return [rows[i] for i in chosen]


def write_suite(items: list[SuiteItem], path: Path) -> None:
    """Write a suite as JSONL, atomically."""
    from tokenwatt.store import atomic_write_text

    text = "".join(json.dumps(i.model_dump(), ensure_ascii=False) + "\n" for i in items)
    atomic_write_text(path, text)


def load_suite(path: Path) -> list[SuiteItem]:
    """Read a suite file; every bad line is an :class:`InputError` naming file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: suite file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read suite: {exc}") from None
    items: list[SuiteItem] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append(SuiteItem.model_validate_json(line))
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"]) or "line"
            raise InputError(f"{path}: line {number}: {where}: {first['msg']}") from None
    if not items:
        raise InputError(f"{path}: suite has no questions")
    return items
