"""Seeded "inventory tally" tasks for the bundled tiny reasoning model.

A prompt gives 5-6 items, each with its starting count and 0-3 moves (``pear: 7, +3, -2``).
The reasoning tallies one item per line, in prompt order, keeping the running count
(``pear: 7 + 3 = 10. 10 - 2 = 8. pear 8 ok.``) and ends each line with the item's final count and
status; the answer is a Python dict literal with one line per item
(``"pear": {"count": 8, "status": "ok"},``), about 85-100 tokens.  Everything a line needs is in
the prompt line it restates or right before it (no look-ups by name: a 1M-parameter model learns
that in minutes on one core; keyed look-ups across lines it did not, in a first try).  Everything in the
answer is worked out in the reasoning, so a draft forced late in the reasoning already holds the
answer's content (the premise of SSR), while an early draft only gets the format right.

Status rule: count 0 -> ``out``, 1-3 -> ``low``, 4 or more -> ``ok``.  Counts stay in 0..20.
"""

from __future__ import annotations

import random
import re
from typing import Dict, List, Optional, Tuple

from ssr_sglang.models.tokenizer_files import CHAT_TEMPLATE, SPECIAL_TOKENS  # noqa: F401 (re-exported)

__all__ = [
    "ITEMS",
    "THINK_START",
    "THINK_END",
    "FORCE_ANSWER",
    "SPECIAL_TOKENS",
    "EOS",
    "CHAT_TEMPLATE",
    "status_of",
    "make_example",
    "format_chat",
    "format_full",
    "reasoning_lines",
    "answer_content_spans",
    "parse_answer",
    "ANSWER_GRAMMARS",
]

ITEMS = ["apple", "pear", "plum", "fig", "lime", "kiwi", "mango", "peach", "grape", "lemon", "melon", "cherry"]
MAX_COUNT = 20

THINK_START, THINK_END = "<think>", "</think>"
EOS = "<|im_end|>"
# What SSR appends to a draft to end its reasoning (Qwen3 family markers).
FORCE_ANSWER = "\n" + THINK_END + "\n\n"


def status_of(count: int) -> str:
    return "out" if count == 0 else ("low" if count <= 3 else "ok")


def make_example(rng: random.Random) -> Dict[str, object]:
    """One task: ``dict(prompt, reasoning, answer, final)`` (``final``: item -> (count, status))."""
    items = rng.sample(ITEMS, rng.randint(5, 6))
    prompt_lines, lines, final = ["Update the stock."], [], {}
    for it in items:
        c = rng.randint(0, 9)
        moves: List[int] = []
        for _ in range(rng.choice([0, 1, 1, 2, 2, 3])):
            if c > 0 and (c >= MAX_COUNT or rng.random() < 0.5):
                k = -rng.randint(1, min(5, c))
            else:
                k = rng.randint(1, min(5, MAX_COUNT - c))
            moves.append(k)
            c += k
        start = c - sum(moves)
        prompt_lines.append(f"{it}: " + ", ".join([str(start)] + [f"{k:+d}" for k in moves]))
        steps, run = [], start
        for k in moves:
            steps.append(f"{run} {'+' if k > 0 else '-'} {abs(k)} = {run + k}.")
            run += k
        lines.append(f"{it}: " + " ".join(steps or [f"{start}."]) + f" {it} {c} {status_of(c)}.")
        final[it] = (c, status_of(c))
    prompt_lines.append("Give the final stock as a Python dict with count and status.")
    body = [f'    "{it}": {{"count": {n}, "status": "{st}"}},' for it, (n, st) in final.items()]
    answer = "\n".join(["```python", "stock = {"] + body + ["}", "```"])
    return dict(prompt="\n".join(prompt_lines), reasoning="\n".join(lines), answer=answer, final=final)


def format_chat(prompt: str) -> str:
    """The generation prompt (same text as the chat template with ``add_generation_prompt``)."""
    return f"<|im_start|>user\n{prompt}{EOS}\n<|im_start|>assistant\n{THINK_START}\n"


def reasoning_lines(example: Dict[str, object]) -> List[str]:
    return str(example["reasoning"]).split("\n")


def format_full(example: Dict[str, object], cut_at_line: Optional[int] = None) -> str:
    """Full training text; ``cut_at_line=k`` keeps only the first k reasoning lines (k=0: none)."""
    reasoning = str(example["reasoning"])
    if cut_at_line is not None:
        reasoning = "\n".join(reasoning_lines(example)[:cut_at_line])
    return format_chat(str(example["prompt"])) + reasoning + FORCE_ANSWER + str(example["answer"]) + EOS


_FIELD = re.compile(r'"(\w+)": \{"count": (\d+), "status": "(\w+)"\}')


def answer_content_spans(answer: str) -> List[Tuple[int, int]]:
    """Character spans of the task-specific fields (item names, counts, statuses) in an answer."""
    spans = []
    for m in _FIELD.finditer(answer):
        spans += [m.span(1), m.span(2), m.span(3)]
    return spans


def parse_answer(answer: str) -> Dict[str, Tuple[int, str]]:
    return {m.group(1): (int(m.group(2)), m.group(3)) for m in _FIELD.finditer(answer)}


# The answer's format as grammars (constrained decoding: SGLang's ``regex`` / ``ebnf`` sampling parameters). Each
# admits exactly the answers the model was trained to write, from the blank line after the think end on (an answer
# forced to start at its opening fence reads differently to the model), so a grammar-constrained greedy answer is
# the unconstrained one wherever that one is well formed.
_LINE_RE = r'    "[a-z]+": \{"count": [0-9]+, "status": "(ok|low|out)"\},\n'
ANSWER_GRAMMARS = {
    "regex": r"\n\n```python\nstock = \{\n(" + _LINE_RE + r")+\}\n```",
    "ebnf": ('root ::= "\\n\\n```python\\nstock = {\\n" line+ "}\\n```"\n'
             'line ::= "    \\"" [a-z]+ "\\": {\\"count\\": " [0-9]+ ", \\"status\\": \\"" ("ok" | "low" | "out") '
             '"\\"},\\n"'),
}
