"""gsm8k suites, few-shot prompts and the numeric scorer, on the real GSM8K data."""

from __future__ import annotations

import json

import pytest

from tokenwatt.accuracy import (
    SuiteItem,
    build_prompt,
    draw_exemplars,
    extract_answer,
    final_answer_of_solution,
    import_gsm8k,
    is_correct,
    load_suite,
    write_suite,
)
from tokenwatt.errors import InputError


@pytest.fixture(scope="module")
def train_rows(shared):
    path = shared / "data" / "gsm8k" / "train.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_every_train_solution_scores_correct_from_its_hash_line(train_rows):
    assert len(train_rows) == 7473
    for row in train_rows:
        gold = final_answer_of_solution(row["answer"])
        assert is_correct(extract_answer(row["answer"]), gold), row["answer"][-60:]


def test_last_number_rule_on_solution_bodies(train_rows):
    # Without the #### line the scorer falls back to the last number. On GSM8K's own worked
    # solutions that is the answer 7,264 times of 7,473 (97.2%); the misses end with another
    # number ("... 5 hours to read 120 pages.").
    hits = sum(
        is_correct(
            extract_answer(r["answer"].rsplit("####", 1)[0]), final_answer_of_solution(r["answer"])
        )
        for r in train_rows
    )
    assert hits == 7264


@pytest.mark.parametrize(
    ("completion", "extracted"),
    [
        ("She has 5 apples.\n#### 18", "18"),
        ("#### 1,234", "1234"),
        ("The answer is $1,234.50.", "1234.5"),
        ("#### $70.", "70"),
        ("It costs 12 dollars, so 3 * 4 = 12. Total: 42.", "42"),
        ("So 50% of them", "50"),
        ("#### -7", "-7"),
        ("#### 3.0", "3"),
        ("First 10 then #### 20 then 30", "20"),
        ("no number here", None),
        ("#### none\nbut 9 later", "9"),
        ("The total is 1,000,000 dollars.", "1000000"),
        ("Answer: 0.25", "0.25"),
        ("£5 and €6", "6"),
    ],
)
def test_tricky_formats(completion, extracted):
    assert extract_answer(completion) == extracted


def test_comparison_exact_for_integers_and_tolerant_for_decimals():
    assert is_correct("18", "18")
    assert not is_correct("18.000001", "18")
    assert is_correct("0.3333335", "0.333333")  # 5e-7 apart
    assert not is_correct("0.33", "0.333333")
    assert not is_correct(None, "1")


def test_prompt_is_deterministic_per_seed_and_never_uses_the_question(shared):
    suite = import_gsm8k(
        shared / "data" / "gsm8k" / "test.jsonl",
        count=20,
        seed=3,
        train=shared / "data" / "gsm8k" / "train.jsonl",
        exemplar_pool=10,
    )
    pool = [i for i in suite if i.split == "train"]
    q = next(i for i in suite if i.split == "test")
    a = build_prompt(
        draw_exemplars(pool, shots=5, seed=0, exclude_questions={q.question}), q.question
    )
    b = build_prompt(
        draw_exemplars(pool, shots=5, seed=0, exclude_questions={q.question}), q.question
    )
    c = build_prompt(
        draw_exemplars(pool, shots=5, seed=1, exclude_questions={q.question}), q.question
    )
    assert a == b
    assert a != c
    assert a.count("Question: ") == 6
    assert a.endswith(f"Question: {q.question}\nAnswer:")
    # an exemplar that is the question itself is never drawn
    clash = SuiteItem(id="x", split="train", question=q.question, answer="1", solution="#### 1")
    for seed in range(20):
        drawn = draw_exemplars(
            [clash, *pool[:5]], shots=5, seed=seed, exclude_questions={q.question}
        )
        assert clash not in drawn
    with pytest.raises(InputError, match="usable exemplars"):
        draw_exemplars([clash], shots=1, seed=0, exclude_questions={q.question})


def test_import_is_reproducible_and_round_trips(shared, tmp_path):
    test = shared / "data" / "gsm8k" / "test.jsonl"
    one = import_gsm8k(test, count=30, seed=0)
    assert one == import_gsm8k(test, count=30, seed=0)
    assert one != import_gsm8k(test, count=30, seed=1)
    path = tmp_path / "s.jsonl"
    write_suite(one, path)
    assert load_suite(path) == one
    with pytest.raises(InputError, match="asked for 99999"):
        import_gsm8k(test, count=99999)


def test_repo_suite_matches_its_recipe(shared, repo):
    made = import_gsm8k(
        shared / "data" / "gsm8k" / "test.jsonl",
        count=200,
        seed=0,
        train=shared / "data" / "gsm8k" / "train.jsonl",
        exemplar_pool=64,
    )
    assert load_suite(repo / "specs" / "suites" / "gsm8k-200.jsonl") == made


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ('{"id": "a", "question": "q"}\n', "line 1: answer"),
        ("not json\n", "line 1"),
        ('{"id": "a", "split": "train", "question": "q", "answer": "1"}\n', "no test questions"),
    ],
)
def test_bad_suites_name_file_and_line(tmp_path, content, needle):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(InputError, match=needle):
        load_suite(path)
