"""ClassEval rows of the SmolLM2 reasoner: the benchmark's prompt, its split, and a plan written out from the
task's own docstrings.

ClassEval (FudanSELab, MIT) asks for a whole Python class from its skeleton. The prompt is the one
``benchmarks/latency.py --dataset classeval`` sends (:func:`prompt`). Task ``ClassEval_<k>`` is held out when
``k % 3 == 0`` and trains otherwise, by its number, so the split does not depend on which copy of the data is
at hand. A training row's reasoning is not distilled: the base model cannot plan a class in 180 tokens, so
:func:`plan` writes one from the class description and each method's docstring (in sentences, no code); the
answer is the task's reference solution in a ```` ```python ```` block.

Example: the second method ``def count(n)`` documented ``Counts the arrangements. If m is None, ...`` becomes
the plan line ``2. `count`: Counts the arrangements.``
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ssr_sglang.models.smollm2_reasoner.distill import TEACHER_LEAD

INSTR = ("Please complete the class {name} in the following code. {desc}\n"
         "Complete every method; answer with the whole class in a ```python code block.\n\n```python\n"
         "{skeleton}\n```")


def load(path: Path) -> list:
    """The rows of a ``ClassEval_data.json``; one clear error when the file is not there."""
    path = Path(path)
    if not path.is_file():
        raise SystemExit(f"ClassEval data not found at {path}: get ClassEval_data.json from FudanSELab/ClassEval "
                         "(data/ClassEval_data.json) and pass its path")
    return json.loads(path.read_text())


def number(task_id: str) -> int:
    return int(task_id.rsplit("_", 1)[1])


def is_held_out(task_id: str) -> bool:
    return number(task_id) % 3 == 0


def prompt(row: dict) -> str:
    """The user message for one ClassEval row (the same for every model)."""
    return INSTR.format(name=row["class_name"], desc=row["class_description"].strip(), skeleton=row["skeleton"])


def tasks(rows: list, split: str) -> list:
    """``[{"id", "messages", "row"}]`` of the rows in ``split`` (``train`` or ``heldout``), in file order."""
    want = split == "heldout"
    return [{"id": r["task_id"], "row": r, "messages": [{"role": "user", "content": prompt(r)}]}
            for r in rows if is_held_out(r["task_id"]) == want]


def _docstring(text: str) -> str:
    m = re.search(r'"""(.*?)("""|$)', text, re.S)
    return m.group(1) if m else ""


def _method(description: str) -> dict:
    """``{"name", "summary"}`` of one ``methods_info`` entry's text: the method's name and its docstring's
    text before the first ``:param``/``:return``/``>>>`` line."""
    sig = re.search(r"def\s+(\w+)\s*\(", description)
    summary = []
    for line in _docstring(description).splitlines():
        line = line.strip()
        if line.startswith((">>>", ":")):
            break
        if line:
            summary.append(line)
    return {"name": sig.group(1) if sig else "?", "summary": " ".join(summary)}


def _sentence(text: str) -> str:
    text = text.strip().rstrip(".")
    return text[:1].upper() + text[1:] + "." if text else ""


def plan(row: dict) -> str:
    """The reasoning of a training row, in the base model's own voice: what the class is for, how many methods,
    then one numbered line per method in the skeleton's order (its name and the first sentence of its
    docstring), then the step to the answer. Short and regular on purpose: a 135M model copies a numbered walk
    through the skeleton, where longer paraphrases (parameters, returns, fields) made it repeat a line forever."""
    purpose = " ".join(row["class_description"].replace('"""', " ").split())
    methods = [_method(m["method_description"]) for m in row["methods_info"]]
    lines = [_sentence(purpose), f"I need to write {len(methods)} methods:"]
    for i, m in enumerate(methods, 1):
        first = re.split(r"(?<=\.)\s", m["summary"], maxsplit=1)[0] if m["summary"] else "see its docstring"
        lines.append(f"{i}. `{m['name']}`: {_sentence(first)}")
    lines.append("So I write the whole class with every method.")
    return TEACHER_LEAD + "\n".join(lines)


def answer(row: dict) -> str:
    return "```python\n" + row["solution_code"].strip() + "\n```"


def training_rows(path: Path, limit=None) -> list:
    """Distill-format rows (``{"id", "messages", "reasoning", "answer", "usable"}``) of the first ``limit``
    training tasks."""
    return [{"id": t["id"], "messages": t["messages"], "reasoning": plan(t["row"]), "answer": answer(t["row"]),
             "usable": True} for t in tasks(load(path), "train")[:limit]]
