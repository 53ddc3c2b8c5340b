"""Seeded grade-school word problems with known answers, reasoning written out in plain English.

A problem buys a few kinds of items at whole-dollar prices, maybe with a discount, and pays with a bill;
the question asks for the change. :func:`make_problem` returns the prompt, a step-by-step reasoning in
sentences, an answer that restates the worked steps and ends with ``Answer: N``, and ``N``. The same
seed always gives the same problem. Exact match is :func:`parse_answer` of the text after the think
block against ``N``.
"""

from __future__ import annotations

import random
import re
from typing import Optional

NAMES = ["Sam", "Maria", "Leo", "Aisha", "Tom", "Nina", "Ravi", "Emma", "Omar", "Lucy", "Ken", "Zoe"]
SHOPS = {
    "stationery shop": [("pencil", "pencils"), ("notebook", "notebooks"), ("eraser", "erasers"), ("pen", "pens"),
                        ("ruler", "rulers")],
    "bakery": [("bun", "buns"), ("cookie", "cookies"), ("loaf of bread", "loaves of bread"), ("muffin", "muffins"),
               ("pie", "pies")],
    "fruit stand": [("apple", "apples"), ("melon", "melons"), ("pear", "pears"), ("mango", "mangoes"),
                    ("lemon", "lemons")],
    "toy store": [("ball", "balls"), ("puzzle", "puzzles"), ("kite", "kites"), ("yo-yo", "yo-yos"),
                  ("robot", "robots")],
}


def _plural(item, n):
    return item[0] if n == 1 else item[1]


def make_problem(rng: random.Random) -> dict:
    """``{"prompt", "reasoning", "answer", "final"}`` for one problem drawn from ``rng``."""
    name = rng.choice(NAMES)
    shop = rng.choice(sorted(SHOPS))
    items = rng.sample(SHOPS[shop], rng.randint(2, 4))
    buys = [(it, rng.randint(1, 6), rng.randint(1, 9)) for it in items]
    subtotal = sum(n * p for _, n, p in buys)
    discount = rng.choice([0, 0, 5, 10]) if subtotal > 15 else 0
    total = subtotal - discount
    bill = next(b for b in (10, 20, 50, 100, 200) if b >= total)
    parts = [f"{n} {_plural(it, n)} at {p} dollar{'' if p == 1 else 's'} each" for it, n, p in buys]
    prompt = f"At the {shop}, {name} buys " + ", ".join(parts[:-1]) + f" and {parts[-1]}."
    if discount:
        prompt += f" The shop gives a discount of {discount} dollars on the whole purchase."
    prompt += f" {name} pays with a {bill}-dollar bill. How much change does {name} get, in dollars?"
    return {"prompt": prompt, "reasoning": _reasoning(name, buys, subtotal, discount, total, bill),
            "answer": _answer(buys, subtotal, discount, total, bill), "final": bill - total}


def _reasoning(name, buys, subtotal, discount, total, bill) -> str:
    lines = [f"{name} buys {len(buys)} kinds of items, so I work out the cost of each kind first."]
    for it, n, p in buys:
        lines.append(f"The {it[1]} cost {n} times {p}, which is {n * p} dollars.")
    costs = " + ".join(str(n * p) for _, n, p in buys)
    lines.append(f"Adding them up: {costs} = {subtotal} dollars.")
    if discount:
        lines.append(f"The discount takes off {discount} dollars, "
                     f"so {name} pays {subtotal} - {discount} = {total} dollars.")
    else:
        lines.append(f"There is no discount, so {name} pays {total} dollars.")
    lines.append(f"{name} pays with {bill} dollars, so the change is {bill} - {total} = {bill - total} dollars.")
    lines.append("Let me check: the change plus the price should give back the bill. "
                 f"{bill - total} + {total} = {bill}. Good.")
    return "\n".join(lines)


def _answer(buys, subtotal, discount, total, bill) -> str:
    rows = [f"- {it[1].capitalize()}: {n} x {p} = {n * p} dollars" for it, n, p in buys]
    rows.append(f"- Subtotal: {subtotal} dollars")
    if discount:
        rows.append(f"- After the discount: {subtotal} - {discount} = {total} dollars")
    rows.append(f"- Change: {bill} - {total} = {bill - total} dollars")
    return "\n".join(rows) + f"\n\nAnswer: {bill - total}"


def parse_answer(text: str) -> Optional[int]:
    """The integer after the last ``Answer:`` in ``text``, or None."""
    found = re.findall(r"Answer:\s*(-?\d+)", text)
    return int(found[-1]) if found else None
