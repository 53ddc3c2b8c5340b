"""The SmolLM2 reasoner: its data split, its word problems, its adapter checks, and (slow) that the
built model closes its think block on held-out prompts."""

import json
import random

import pytest

from ssr_sglang.models.smollm2_reasoner import classeval, data, distill, word_problems
from ssr_sglang.models.smollm2_reasoner.build import ADAPTER, BuildError, check_adapter, sha256


def test_code_split_is_disjoint_and_complete():
    train = {t["id"] for t in data.code_tasks("train")}
    held = {t["id"] for t in data.code_tasks("heldout")}
    assert not train & held and len(train | held) == 164 and len(held) == 55


def test_committed_data_has_no_held_out_prompt():
    held = {t["id"] for t in data.code_tasks("heldout")} | {t["id"] for t in data.word_tasks("heldout", 1000)}
    rows = [json.loads(l) for l in (ADAPTER.parent / "distill.jsonl").read_text().splitlines() if l.strip()]
    assert rows and not {r["id"] for r in rows} & held
    classeval_ids = [r["id"] for r in rows if r["id"].startswith("ClassEval_")]
    assert classeval_ids and not [i for i in classeval_ids if classeval.is_held_out(i)]


CLASSEVAL_ROW = {
    "task_id": "ClassEval_7", "class_name": "Counter", "fields": ["self.n"], "solution_code": "class Counter: ...",
    "class_description": '    """\n    A counter that\n    counts.\n    """\n', "skeleton": "class Counter:\n    pass",
    "class_constructor": 'class Counter:\n    def __init__(self, start):\n        """\n        :param start: int, the first '
                         'value.\n        """\n        self.n = start\n',
    "methods_info": [{"method_description": 'def add(self, k):\n        """\n        Adds k to the count.\n        '
                                            ':param k: int, how much.\n        :return: int, the new count.\n        '
                                            '>>> Counter(1).add(2)\n        3\n        """'},
                     {"method_description": '@staticmethod\n    def zero():\n        """\n        The zero count.\n'
                                            '        """'}]}


def test_classeval_split_is_by_task_number_and_plans_read_the_docstrings():
    assert classeval.is_held_out("ClassEval_0") and classeval.is_held_out("ClassEval_99")
    assert not classeval.is_held_out("ClassEval_7")
    rows = [CLASSEVAL_ROW, {**CLASSEVAL_ROW, "task_id": "ClassEval_9"}]
    assert [t["id"] for t in classeval.tasks(rows, "train")] == ["ClassEval_7"]
    assert [t["id"] for t in classeval.tasks(rows, "heldout")] == ["ClassEval_9"]
    plan = classeval.plan(CLASSEVAL_ROW)
    assert plan == (distill.TEACHER_LEAD + "A counter that counts.\nI need to write 2 methods:\n"
                    "1. `add`: Adds k to the count.\n2. `zero`: The zero count.\n"
                    "So I write the whole class with every method.")
    assert "```" not in plan and "Counter(1)" not in plan  # no code in the reasoning


def test_classeval_data_missing_is_one_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="ClassEval_data.json"):
        classeval.load(tmp_path / "absent.json")


def test_word_problem_is_seeded_and_consistent():
    a, b = word_problems.make_problem(random.Random(5)), word_problems.make_problem(random.Random(5))
    assert a == b
    for s in range(200):
        p = word_problems.make_problem(random.Random(s))
        assert p["final"] >= 0 and word_problems.parse_answer(p["answer"]) == p["final"]
        assert f"= {p['final']} dollars" in p["reasoning"]


def test_clean_reasoning_drops_code_repeats_and_cut_line():
    text = "1. Take the list.\n2. Sum it.\n2. Sum it.\nSo the code is:\n```python\nx\n```"
    assert distill.clean_reasoning(text, True) == distill.TEACHER_LEAD + "1. Take the list.\n2. Sum it."
    assert distill.clean_reasoning("First line.\nSecond li", False) == distill.TEACHER_LEAD + "First line."


def test_cut_copies_end_right_after_a_numbered_item():
    from ssr_sglang.models.smollm2_reasoner import train

    row = {"id": "HumanEval/1", "reasoning": "Plan.\n1. Split it.\n2. Sum it.\nSo we return the sum."}
    assert train.cut_after_list(row)["reasoning"] == "Plan.\n1. Split it.\n2. Sum it."
    ends_on_item = {"id": "HumanEval/2", "reasoning": "1. Split it.\n2. Sum it.\n3. Return it."}
    assert train.cut_after_list(ends_on_item)["reasoning"] == "1. Split it.\n2. Sum it."
    assert train.cut_after_list({"id": "HumanEval/3", "reasoning": "1. Only one item."}) is None
    word = {"id": "word/0", "reasoning": "1. a\n2. b\nSo c."}
    assert train.with_cut_copies([row, word]) == [row, word, {**row, "id": "HumanEval/1/cut",
                                                                "reasoning": "Plan.\n1. Split it.\n2. Sum it."}]


def test_corrupt_or_missing_adapter_is_one_clear_error(tmp_path):
    bad = tmp_path / "adapter.safetensors"
    bad.write_bytes(ADAPTER.read_bytes()[:1000])
    with pytest.raises(BuildError, match="corrupt"):
        check_adapter(bad, tmp_path / "none.json")
    (tmp_path / "m.json").write_text(json.dumps({"sha256": "0" * 64}))
    with pytest.raises(BuildError, match="corrupt"):
        check_adapter(ADAPTER, tmp_path / "m.json")
    with pytest.raises(BuildError, match="missing"):
        check_adapter(tmp_path / "absent.safetensors", tmp_path / "none.json")


def test_benchmarks_given_a_built_reasoner_folder_serve_it_with_its_think_markers(tmp_path):
    from ssr_sglang.models.smollm2_reasoner.build import SSR_ENV, STAMP, markers

    assert markers(str(tmp_path)) == {}  # any other model: the server's own markers
    (tmp_path / STAMP).write_text("0" * 64 + "\n")
    assert markers(str(tmp_path)) == SSR_ENV and SSR_ENV["SSR_THINK_END"] == "</think>"


def test_committed_adapter_matches_its_manifest():
    manifest = json.loads(ADAPTER.with_suffix(".json").read_text())
    assert sha256(ADAPTER) == manifest["sha256"]
    assert len(check_adapter()) > 0


@pytest.fixture(scope="module")
def held_out_rows():
    """Greedy, transformers on CPU: the built reasoner on 2 held-out code and 2 held-out word problems,
    512 reasoning tokens at most (the full evaluation, ``python -m ssr_sglang.models.smollm2_reasoner eval``)."""
    from ssr_sglang.models.smollm2_reasoner import evaluate
    from ssr_sglang.models.smollm2_reasoner.build import cached_reasoner

    return evaluate.run(cached_reasoner(), evaluate.held_out_tasks(2, 2), reasoner=True, batch=4, answer_budget=64)


def _unclosed(rows, kind):
    return [r["output"][:300] for r in rows if r["id"].startswith(kind) and not r["closed"]]


@pytest.mark.slow
def test_built_reasoner_closes_its_think_block_on_held_out_prompts(held_out_rows):
    """The full evaluation closed 38 of 40 (benchmarks/results/smollm2-reasoner-eval); here at most one of 4, and
    every word problem."""
    unclosed = _unclosed(held_out_rows, "word") + _unclosed(held_out_rows, "HumanEval")
    assert not _unclosed(held_out_rows, "word") and len(unclosed) <= 1, unclosed


def test_main_job_reasoner_tasks_alternate_and_skip_warmup():
    from ssr_sglang.main_job import reasoner_tasks

    class Tok:
        def apply_chat_template(self, messages, **kw):
            return messages[0]["content"]

        def __call__(self, text, **kw):
            return type("E", (), {"input_ids": [len(text)]})()

    timed, warm = reasoner_tasks(Tok(), 6, skip=4), reasoner_tasks(Tok(), 4, skip=0)
    assert [t["id"].split("/")[0] for t in timed] == ["HumanEval", "word"] * 3
    assert not {t["id"] for t in timed} & {t["id"] for t in warm}
    word = next(t for t in timed if t["id"].startswith("word"))
    final = data.word_tasks("heldout", 10)[int(word["id"].split("/")[1]) - data.HELD_OUT_SEED0]["final"]
    assert word["score"](f"Answer: {final}") and not word["score"]("Answer: -1")


def test_classeval_answer_is_scored_by_the_task_unit_tests():
    from ssr_sglang.models.smollm2_reasoner import evaluate

    row = {"test": "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n"
                   "        self.assertEqual(C().f(), 1)\n"}
    task = {"id": "ClassEval_3", "row": row}
    assert evaluate.score(task, "```python\nclass C:\n    def f(self):\n        return 1\n```")
    assert not evaluate.score(task, "```python\nclass C:\n    def f(self):\n        return 2\n```")


def test_served_classeval_answers_are_scored_per_method(tmp_path, capsys):
    """``score``: the answers a latency run served (the text after the think end), per method, by each
    task's unit tests."""
    import json

    from ssr_sglang.models.smollm2_reasoner.__main__ import main

    test = "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n        self.assertEqual(C().f(), 1)\n"
    (tmp_path / "ce.json").write_text(json.dumps([{"task_id": "ClassEval_3", "test": test}]))
    good = "plan</think>\n```python\nclass C:\n    def f(self):\n        return 1\n```"
    bad = "class C: return 1</think>\n```python\nclass C:\n    def f(self):\n        return 2\n```"
    results = {"results": {"plain": [{"id": "ClassEval_3", "text": good}], "ssr": [{"id": "ClassEval_3", "text": bad}]}}
    (tmp_path / "results.json").write_text(json.dumps(results))
    assert main(["score", str(tmp_path / "results.json"), "--classeval", str(tmp_path / "ce.json")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plain"]["passed"] == 1 and out["ssr"]["passed"] == 0 and out["ssr"]["tasks"] == 1
