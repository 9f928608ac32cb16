"""The accuracy gate: gsm8k 5-shot, so a faster config with worse answers never wins.

**Suite.** A JSONL file, one item per line, ``split`` telling test questions from the few-shot
exemplar pool::

    {"id": "gsm8k-test-0042", "split": "test", "question": "...", "answer": "18",
     "solution": "... #### 18"}

``tokenwatt suite gsm8k`` writes one from the official GSM8K files: N test questions chosen with
``random.Random(seed).sample`` (kept in sampled order, so the first ``limit`` are themselves a
random sample) and a pool of train items for exemplars.

**Prompt.** For each seed, ``shots`` exemplars are drawn from the suite's train pool with
``random.Random(seed)`` (never an item whose question is the one being asked); every question of
that seed gets the same exemplars::

    Question: <exemplar question>
    Answer: <exemplar solution, verbatim, ending in "#### <answer>">

    ... (one block per exemplar) ...

    Question: <test question>
    Answer:

sent to the completions API with temperature 0, ``max_tokens`` and the ``stop`` strings.

**Numeric scorer.** The number after the first ``####`` of the completion if there is one, else
the last number in it; thousands separators, currency signs, a trailing dot and a percent sign
are ignored. Correct when it equals the gold answer exactly (an integer gold) or within 1e-6. A
question whose request failed counts as wrong.

**Score and gate.** ``score`` = % correct of the ``limit`` questions, the mean over ``seeds``
draws; ``spread_pts`` = max − min over seeds; ``delta_pts`` = score − baseline score. A config
whose delta is below −``max_drop_pts`` fails the gate and is never reported as an improvement.
Against the embedded simulator the answers are not a model's: accuracy is recorded as not
meaningful and the gate ignores it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
from collections.abc import Awaitable, Callable, Sequence
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Literal, Protocol

from pydantic import Field, ValidationError

from tokenwatt import bounded
from tokenwatt.errors import InputError
from tokenwatt.schema.base import StrictModel
from tokenwatt.schema.run import AccuracyEvidence, AccuracyItem, AccuracySeedScore
from tokenwatt.schema.spec import AccuracySpec

__all__ = [
    "Completion",
    "SuiteItem",
    "TextCompleter",
    "accuracy_evidence",
    "build_prompt",
    "check_evidence",
    "draw_exemplars",
    "extract_answer",
    "final_answer_of_solution",
    "import_gsm8k",
    "is_correct",
    "load_suite",
    "run_accuracy",
    "seed_scores",
    "write_suite",
]

logger = logging.getLogger(__name__)

TOLERANCE = Decimal("1e-6")


class SuiteItem(StrictModel):
    """One item of a suite: a test question or a train exemplar."""

    id: str = Field(min_length=1)
    split: Literal["test", "train"] = "test"
    question: str = Field(min_length=1)
    answer: str = Field(min_length=1, description="Gold final answer")
    solution: str | None = Field(default=None, description="Worked solution, if known")


# ---------------------------------------------------------------------------------------------
# Suites

_GSM8K_FINAL = re.compile(r"####\s*(.+?)\s*$", re.MULTILINE)


def final_answer_of_solution(solution: str) -> str:
    """The gold answer of a GSM8K solution: the text after its ``####`` line, commas removed."""
    match = _GSM8K_FINAL.search(solution)
    if match is None:
        raise ValueError("no '#### <answer>' line")
    return match.group(1).replace(",", "").strip()


def _read_gsm8k(path: Path, split: Literal["test", "train"]) -> list[SuiteItem]:
    items: list[SuiteItem] = []
    lines = bounded.read_text(path, max_bytes=bounded.MAX_TABLE_BYTES).splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = bounded.parse_json_line(line)
            solution = str(row["answer"])
            items.append(
                SuiteItem(
                    id=f"gsm8k-{split}-{number - 1:04d}",
                    split=split,
                    question=str(row["question"]),
                    answer=final_answer_of_solution(solution),
                    solution=solution,
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{path}: line {number}: not a GSM8K row: {exc}") from None
    return items


def import_gsm8k(
    test: Path, *, count: int, seed: int = 0, train: Path | None = None, exemplar_pool: int = 64
) -> list[SuiteItem]:
    """Choose ``count`` test questions (and an exemplar pool from ``train``), reproducibly.

    Both draws are ``random.Random(seed).sample`` over the file's rows, in sampled order.

    Raises:
        InputError: a file that cannot be read or a count larger than the file.
    """
    rows = _read_gsm8k(test, "test")
    if not 1 <= count <= len(rows):
        raise InputError(f"{test}: asked for {count} questions, the file has {len(rows)}")
    rng = random.Random(seed)
    items = [rows[i] for i in rng.sample(range(len(rows)), count)]
    if train is not None:
        pool = _read_gsm8k(train, "train")
        if not 1 <= exemplar_pool <= len(pool):
            raise InputError(f"{train}: asked for {exemplar_pool} exemplars, it has {len(pool)}")
        items += [pool[i] for i in rng.sample(range(len(pool)), exemplar_pool)]
    return items


def write_suite(items: Sequence[SuiteItem], path: Path) -> None:
    """Write a suite as JSONL, atomically."""
    from tokenwatt.store import atomic_write_text

    text = "".join(json.dumps(i.model_dump(), ensure_ascii=False) + "\n" for i in items)
    atomic_write_text(path, text)


def load_suite(path: Path) -> list[SuiteItem]:
    """Read a suite file.

    Raises:
        InputError: naming the file and line of the first bad item, or an empty suite.
    """
    text = bounded.read_text(path, max_bytes=bounded.MAX_TABLE_BYTES)
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
    if not any(i.split == "test" for i in items):
        raise InputError(f"{path}: suite has no test questions")
    return items


# ---------------------------------------------------------------------------------------------
# Prompts


def draw_exemplars(
    pool: Sequence[SuiteItem], *, shots: int, seed: int, exclude_questions: set[str]
) -> list[SuiteItem]:
    """``shots`` exemplars drawn from the pool with ``random.Random(seed)``, never an excluded one.

    Raises:
        InputError: when the pool is too small.
    """
    usable = [item for item in pool if item.question not in exclude_questions]
    if shots > len(usable):
        raise InputError(
            f"the suite's train pool has {len(usable)} usable exemplars, {shots} shots asked"
        )
    return random.Random(seed).sample(usable, shots)


def build_prompt(exemplars: Sequence[SuiteItem], question: str) -> str:
    """The few-shot prompt: exemplar blocks, then the question and ``Answer:``."""
    blocks = [f"Question: {e.question}\nAnswer: {e.solution or e.answer}" for e in exemplars]
    blocks.append(f"Question: {question}\nAnswer:")
    return "\n\n".join(blocks)


# ---------------------------------------------------------------------------------------------
# Scoring

_NUMBER = re.compile(r"-?[$€£]?\s?\d[\d,]*(?:\.\d+)?")


def _to_decimal(text: str) -> Decimal | None:
    cleaned = re.sub(r"[$€£,\s%]", "", text).rstrip(".")
    try:
        return Decimal(cleaned)
    except InvalidOperation:
        return None


def extract_answer(completion: str) -> str | None:
    """The answer the numeric scorer reads from a completion (see the module docstring)."""
    marker = completion.find("####")
    if marker >= 0:
        match = _NUMBER.search(completion, marker + 4)
        if match is not None:
            value = _to_decimal(match.group(0))
            return None if value is None else _canonical(value)
    numbers = _NUMBER.findall(completion)
    for raw in reversed(numbers):
        value = _to_decimal(raw)
        if value is not None:
            return _canonical(value)
    return None


def _canonical(value: Decimal) -> str:
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def is_correct(extracted: str | None, gold: str) -> bool:
    """Exact equality when the gold answer is an integer, else within 1e-6."""
    if extracted is None:
        return False
    got, want = _to_decimal(extracted), _to_decimal(gold)
    if got is None or want is None:
        return False
    if want == want.to_integral_value():
        return got == want
    return abs(got - want) <= TOLERANCE


# ---------------------------------------------------------------------------------------------
# Running


class Completion(Protocol):
    """What a text completion returns: the text, or an error."""

    @property
    def text(self) -> str | None: ...  # noqa: D102

    @property
    def error(self) -> str | None: ...  # noqa: D102


class TextCompleter(Protocol):
    """The client call the runner needs (``tokenwatt.client.openai.OpenAIClient``)."""

    def complete_text(  # noqa: D102
        self, prompt: str, *, max_tokens: int, stop: list[str], temperature: float = 0.0
    ) -> Awaitable[Completion]: ...


async def run_accuracy(
    completer: TextCompleter,
    spec: AccuracySpec,
    suite: Sequence[SuiteItem],
    *,
    suite_path: str,
    meaningful: bool = True,
    progress: Callable[[int, int], None] | None = None,
    answers: list[AccuracyItem] | None = None,
) -> AccuracyEvidence:
    """Ask the first ``limit`` test questions once per seed and score every answer.

    Args:
        completer: the endpoint's client.
        spec: the spec's accuracy section.
        suite: the suite's items (test questions and train exemplars).
        suite_path: the suite path to record.
        meaningful: False against the simulator.
        progress: called with (answered so far, total) as answers come back.
        answers: receives each answer as it comes back, so that a check cut short (Ctrl-C,
            SIGTERM, a failing endpoint) keeps what it got (:func:`accuracy_evidence`).

    Raises:
        InputError: a suite with fewer test questions than ``limit`` or too few exemplars.
    """
    questions = [i for i in suite if i.split == "test"]
    pool = [i for i in suite if i.split == "train"]
    if len(questions) < spec.limit:
        raise InputError(
            f"{suite_path}: accuracy.limit is {spec.limit} but the suite has"
            f" {len(questions)} test questions"
        )
    questions = questions[: spec.limit]
    asked = {q.question for q in questions}
    total = spec.limit * spec.seeds
    done = 0
    gate = asyncio.Semaphore(spec.concurrency)

    answers = [] if answers is None else answers

    async def ask(seed: int, index: int, item: SuiteItem, prompt: str) -> None:
        nonlocal done
        async with gate:
            result = await completer.complete_text(
                prompt, max_tokens=spec.max_tokens, stop=list(spec.stop), temperature=0.0
            )
        done += 1
        if progress is not None:
            progress(done, total)
        extracted = extract_answer(result.text) if result.text is not None else None
        answer = AccuracyItem(
            seed=seed,
            index=index,
            id=item.id,
            gold=item.answer,
            completion=result.text,
            extracted=extracted,
            correct=result.error is None and is_correct(extracted, item.answer),
            error=result.error,
        )
        answers.append(answer)

    for seed in range(spec.seeds):
        exemplars = draw_exemplars(pool, shots=spec.shots, seed=seed, exclude_questions=asked)
        await asyncio.gather(
            *(ask(seed, i, q, build_prompt(exemplars, q.question)) for i, q in enumerate(questions))
        )
    return accuracy_evidence(spec, answers, suite_path=suite_path, meaningful=meaningful)


def seed_scores(items: Sequence[AccuracyItem]) -> list[AccuracySeedScore]:
    """Each seed's score: % of its questions (answered or failed) whose answer is correct."""
    out: list[AccuracySeedScore] = []
    for seed in sorted({a.seed for a in items}):
        mine = [a for a in items if a.seed == seed]
        correct = sum(1 for a in mine if a.correct)
        failed = sum(1 for a in mine if a.error is not None)
        out.append(
            AccuracySeedScore(
                seed=seed,
                score=correct / len(mine) * 100.0,
                correct=correct,
                answered=len(mine) - failed,
                failed=failed,
            )
        )
    return out


def check_evidence(evidence: AccuracyEvidence) -> str | None:
    """What in a run file's accuracy section disagrees with its own answers (None: nothing).

    Every answer is scored again (:func:`extract_answer`, :func:`is_correct`), the seeds'
    scores recomputed from them and the mean and spread from those; without answers, each
    seed's score must still be its own correct / questions.
    """
    for i, item in enumerate(evidence.items):
        extracted = extract_answer(item.completion) if item.completion is not None else None
        if item.extracted != extracted:
            return f"items[{i}].extracted is {item.extracted!r}, its completion gives {extracted!r}"
        correct = item.error is None and is_correct(extracted, item.gold)
        if item.correct != correct:
            return f"items[{i}].correct is {item.correct}, scoring its answer gives {correct}"
    per_seed = seed_scores(evidence.items) if evidence.items else evidence.per_seed
    for j, s in enumerate(per_seed):
        asked = s.answered + s.failed
        if asked > evidence.limit or (asked and abs(s.score - s.correct / asked * 100) > 1e-6):
            return f"per_seed[{j}] does not add up ({s.correct} correct of {asked} asked)"
    if evidence.items and [s.model_dump() for s in per_seed] != [
        s.model_dump() for s in evidence.per_seed
    ]:
        return "per_seed differs from the scores of its items"
    scores = [s.score for s in per_seed] or [0.0]
    if abs(evidence.score - sum(scores) / len(scores)) > 1e-6:
        return f"score is {evidence.score}, its seeds' scores give {sum(scores) / len(scores)}"
    if abs(evidence.spread_pts - (max(scores) - min(scores))) > 1e-6:
        return f"spread_pts is {evidence.spread_pts}, its seeds give {max(scores) - min(scores)}"
    return None


def accuracy_evidence(
    spec: AccuracySpec, answers: Sequence[AccuracyItem], *, suite_path: str, meaningful: bool
) -> AccuracyEvidence:
    """Score answers per seed: % correct of the seed's questions answered (or failed) so far.

    A complete check has ``limit`` answers per seed, so each score is % correct of ``limit``; an
    interrupted one scores what came back, and the run says it is incomplete.
    """
    items = sorted(answers, key=lambda a: (a.seed, a.index))
    per_seed = seed_scores(items)
    for s in per_seed:
        logger.info(
            "accuracy seed %d: %d/%d correct, %d failed",
            s.seed,
            s.correct,
            s.answered + s.failed,
            s.failed,
        )
    scores = [s.score for s in per_seed] or [0.0]
    return AccuracyEvidence(
        suite=suite_path,
        name=spec.name,
        scorer=spec.scorer,
        limit=spec.limit,
        shots=spec.shots,
        score=sum(scores) / len(scores),
        spread_pts=max(scores) - min(scores),
        per_seed=per_seed,
        items=items,
        meaningful=meaningful,
    )
