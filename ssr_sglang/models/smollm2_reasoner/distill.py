"""Self-distillation data for the SmolLM2 reasoner: the base model's own reasoning and answers.

For each training HumanEval problem the base SmolLM2-135M-Instruct is asked (sampled, temperature 0.7)
to explain in plain English how to solve it, without code; the explanation is cut before any code,
repeated lines are dropped, and an unfinished last line is removed (:func:`clean_reasoning`). The answer
is the base model's own greedy answer to the plain prompt, kept only if it finished and holds a
```` ```python ```` block. Word problems come with their reasoning and answer written out
(:mod:`.word_problems`), ClassEval training tasks with a plan written from their docstrings and their reference
solution (:mod:`.classeval`). One JSONL row per example: ``{"id", "messages", "reasoning", "answer"}``.

``python -m ssr_sglang.models.smollm2_reasoner.distill OUT.jsonl`` (about 20 minutes on one core).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from ssr_sglang.models.smollm2_reasoner import data

TEACHER_SYSTEM = ("You explain how to solve programming tasks. Explain in plain English, step by step, how to solve "
                  "the task: what the function receives, what it returns, the steps, and the edge cases. "
                  "Do not write any code.")
TEACHER_LEAD = "Let me think about it step by step.\n\n"


def clean_reasoning(text: str, finished: bool) -> str:
    """``text`` up to its first code fence or code-introducing line, without repeated lines, without
    an unfinished last line (unless ``finished``), prefixed by :data:`TEACHER_LEAD`."""
    text = text.split("```")[0]
    lines = text.split("\n")
    if not finished and "```" not in text and len(lines) > 1:
        lines = lines[:-1]
    kept, seen = [], set()
    for line in lines:
        key = re.sub(r"^\s*[-*\d.]+\s*", "", line).strip().lower()
        if key and key in seen:
            continue
        seen.add(key)
        kept.append(line.rstrip())
    while kept and (not kept[-1].strip() or kept[-1].strip().endswith(":")):
        kept.pop()
    return TEACHER_LEAD + "\n".join(kept).strip()


def generate(model, tok, texts: list, max_new: int, sample: bool, seed: int) -> list:
    """``[(text, finished)]`` for each prompt text, batched with left padding."""
    import torch

    tok.padding_side = "left"
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=max_new, do_sample=sample, temperature=0.7 if sample else None,
                             top_p=0.9 if sample else None, pad_token_id=tok.pad_token_id)
    res = []
    for row in out[:, enc.input_ids.shape[1]:].tolist():
        finished = tok.eos_token_id in row
        if finished:
            row = row[:row.index(tok.eos_token_id)]
        res.append((tok.decode(row, skip_special_tokens=True), finished))
    return res


def distill_code(model, tok, tasks: list, out_path: Path, batch: int = 8) -> None:
    """Append one row per usable task of ``tasks`` to ``out_path`` (tasks already there are skipped)."""
    done = {json.loads(l)["id"] for l in out_path.read_text().splitlines()} if out_path.exists() else set()
    todo = [t for t in tasks if t["id"] not in done]
    for i in range(0, len(todo), batch):
        chunk = todo[i:i + batch]
        teach = [tok.apply_chat_template([{"role": "system", "content": TEACHER_SYSTEM},
                                          {"role": "user", "content": _teacher_question(t)}],
                                         add_generation_prompt=True, tokenize=False) + TEACHER_LEAD for t in chunk]
        plain = [tok.apply_chat_template(t["messages"], add_generation_prompt=True, tokenize=False) for t in chunk]
        reasons = generate(model, tok, teach, 180, True, seed=i)
        answers = generate(model, tok, plain, 256, False, seed=i)
        with open(out_path, "a") as f:
            for t, (r, r_fin), (a, a_fin) in zip(chunk, reasons, answers):
                reasoning = clean_reasoning(r, r_fin)
                ok = a_fin and "```python" in a and len(reasoning) > len(TEACHER_LEAD) + 80
                f.write(json.dumps({"id": t["id"], "messages": t["messages"], "reasoning": reasoning,
                                    "answer": a.strip(), "usable": ok}) + "\n")
        print(f"{i + len(chunk)}/{len(todo)}", flush=True)


def _teacher_question(task: dict) -> str:
    return task["messages"][0]["content"].replace(data.CODE_INSTR.split("\n")[0],
                                                  "How would you write this Python function?")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="JSONL file to write (appended to: an interrupted run resumes)")
    p.add_argument("--code-limit", type=int, default=None, help="only the first N training HumanEval problems")
    p.add_argument("--word-problems", type=int, default=80)
    p.add_argument("--classeval", default=None, help="ClassEval_data.json: also append its training tasks' rows "
                                                     "(plans written from the docstrings, see .classeval)")
    p.add_argument("--classeval-limit", type=int, default=None, help="only the first N ClassEval training tasks")
    p.add_argument("--classeval-only", action="store_true", help="append the ClassEval rows and nothing else")
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.classeval:
        append_classeval(out, Path(args.classeval), args.classeval_limit)
    if args.classeval_only:
        return 0
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ssr_sglang.testing.smollm2 import cached_smollm2

    torch.set_num_threads(1)
    base = cached_smollm2()
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16).eval()
    distill_code(model, tok, data.code_tasks("train")[:args.code_limit], out)
    append_word_problems(out, args.word_problems)
    return 0


def append_classeval(out: Path, path: Path, limit) -> None:
    """Append the rows of the first ``limit`` ClassEval training tasks not already in ``out``."""
    from ssr_sglang.models.smollm2_reasoner import classeval

    done = {json.loads(l)["id"] for l in out.read_text().splitlines()} if out.exists() else set()
    with open(out, "a") as f:
        for row in classeval.training_rows(path, limit):
            if row["id"] not in done:
                f.write(json.dumps(row) + "\n")


def append_word_problems(out: Path, n: int) -> None:
    """Append the first ``n`` training word problems (written-out reasoning and answer) to ``out``."""
    with open(out, "a") as f:
        for t in data.word_tasks("train", n):
            f.write(json.dumps({"id": t["id"], "messages": t["messages"], "reasoning": t["reasoning"],
                                "answer": t["answer"], "usable": True}) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
