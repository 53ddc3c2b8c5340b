"""Held-out evaluation of the SmolLM2 reasoner (and the base model beside it).

Metrics, per held-out prompt: whether the output closes its think block (``</think>``) within
``REASONING_BUDGET`` tokens, the reasoning length, and the answer's quality: HumanEval pass@1 (the
answer's code run against the problem's tests in a subprocess with a timeout) or exact match of the
word problem's ``Answer: N``. The base model answers the same prompts with its own chat template
(no think block) for comparison.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

from ssr_sglang.models.smollm2_reasoner import word_problems

REASONING_BUDGET = 512
THINK_END = "</think>"


def extract_code(answer: str) -> str:
    """The first ```python block of ``answer`` (or the whole answer when there is none)."""
    m = re.search(r"```(?:python)?\n(.*?)(?:```|$)", answer, re.S)
    return m.group(1) if m else answer


def passes(problem: dict, answer: str, timeout: float = 10.0) -> bool:
    """Whether the answer's code passes the HumanEval problem's tests (run in a fresh interpreter).
    The problem's prompt (imports, helpers) is placed before the code, as HumanEval's own harness does
    for completions; a full function definition in the answer then overrides the stub."""
    program = (problem["prompt"] + "    pass\n\n" + extract_code(answer) + "\n\n" + problem["test"] + "\n"
               + f"check({problem['entry_point']})\n")
    return _run(program, timeout)


def passes_classeval(row: dict, answer: str, timeout: float = 20.0) -> bool:
    """Whether the answer's class passes every unit test of the ClassEval row (in a fresh interpreter)."""
    program = (extract_code(answer) + "\n\n" + row["test"] + "\n\nif __name__ == '__main__':\n"
               "    unittest.main()\n")
    return _run(program, timeout)


def _run(program: str, timeout: float) -> bool:
    """Whether ``program`` exits 0 in a fresh interpreter within ``timeout`` (its file is removed after)."""
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(program)
    try:
        return subprocess.run([sys.executable, f.name], capture_output=True, timeout=timeout).returncode == 0
    except subprocess.TimeoutExpired:
        return False
    finally:
        os.unlink(f.name)


def score(task: dict, answer: str) -> bool:
    """Pass@1 for a code task (``task["problem"]``: HumanEval, ``task["row"]``: ClassEval), exact match for a
    word problem (``task["final"]``)."""
    if "problem" in task:
        return passes(task["problem"], answer)
    if "row" in task:
        return passes_classeval(task["row"], answer)
    return word_problems.parse_answer(answer) == task["final"]


def split_output(text: str, tok) -> tuple:
    """``(closed, reasoning_tokens, answer)`` of a reasoner output (the text after ``<think>\\n``)."""
    if THINK_END not in text:
        return False, len(tok(text, add_special_tokens=False).input_ids), ""
    reasoning, answer = text.split(THINK_END, 1)
    return True, len(tok(reasoning, add_special_tokens=False).input_ids), answer


def held_out_tasks(n_code: int, n_word: int, offset: int = 0, n_classeval: int = 0, classeval_path=None) -> list:
    """Held-out code problems ``offset .. offset + n_code``, word problems likewise, and the first
    ``n_classeval`` held-out ClassEval tasks (from ``classeval_path``)."""
    from ssr_sglang.models.smollm2_reasoner import classeval, data

    out = data.code_tasks("heldout")[offset:offset + n_code] + data.word_tasks("heldout", offset + n_word)[offset:]
    if n_classeval:
        out += classeval.tasks(classeval.load(classeval_path), "heldout")[:n_classeval]
    return out


def run(model_dir, tasks: list, reasoner: bool, batch: int = 10, answer_budget: int = 320, progress=None) -> list:
    """Greedy outputs of the model in ``model_dir`` (transformers, float32 on CPU) with their metrics;
    ``progress(rows)`` is called after each batch (to save partial results)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ssr_sglang.models.smollm2_reasoner.distill import generate

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    rows = []
    for i in range(0, len(tasks), batch):
        chunk = tasks[i:i + batch]
        texts = [tok.apply_chat_template(t["messages"], add_generation_prompt=True, tokenize=False) for t in chunk]
        max_new = REASONING_BUDGET + answer_budget if reasoner else answer_budget
        for t, (out, finished) in zip(chunk, generate(model, tok, texts, max_new, False, seed=0)):
            if reasoner:
                closed, n_reason, answer = split_output(out, tok)
                closed = closed and n_reason <= REASONING_BUDGET
            else:
                closed, n_reason, answer = None, 0, out
            rows.append({"id": t["id"], "closed": closed, "reasoning_tokens": n_reason, "finished": finished,
                         "correct": score(t, answer), "output": out})
        print(f"{len(rows)}/{len(tasks)}", flush=True)
        if progress:
            progress(rows)
    return rows


def summary(rows: list) -> dict:
    def part(prefix):
        sel = [r for r in rows if r["id"].startswith(prefix)]
        if not sel:
            return None
        closed = [r for r in sel if r["closed"]]
        return {"n": len(sel), "closed": len(closed) if sel[0]["closed"] is not None else None,
                "correct": sum(r["correct"] for r in sel),
                "mean_reasoning_tokens": sum(r["reasoning_tokens"] for r in closed) / len(closed) if closed else None}
    return {"code (HumanEval held-out)": part("HumanEval"), "word problems (held-out)": part("word/"),
            "code (ClassEval held-out)": part("ClassEval")}
