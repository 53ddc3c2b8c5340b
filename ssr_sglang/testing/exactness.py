"""Greedy identity to plain decoding on a real model: prompts, runs and the report of a difference.

Used by ``benchmarks/exactness.py`` and ``tests/srt/test_exact_smollm2.py``. A run sends every prompt
to one server, ``concurrency`` at a time; the plain run also asks for the top two log-probabilities
of every token, so a difference found later is reported with the gap plain decoding itself had at
that position (``first_differences``). Sending prompts concurrently keeps outputs identical only
where the server's computation is batch-invariant (``SSR_CPU_EXACT_VERIFY=1``, see
:mod:`ssr_sglang.cpu.exact`).
"""

from __future__ import annotations

import builtins
import concurrent.futures as cf
import keyword
import re
from collections import Counter
from typing import List, Optional, Sequence, Tuple

import requests

QUESTIONS = [
    "Write a Python function that returns the sum of a list.", "Explain why the sky is blue.",
    "Write a Python class for a stack with push and pop.", "What is the capital of France? Explain its history.",
    "Write a function to check if a string is a palindrome.", "List five fruits and their colors.",
    "Write a Python function that computes the factorial of n.", "Describe how a bicycle works.",
    "Write a Python function to reverse a linked list.", "What are the benefits of exercise?",
    "Write a Python function that merges two sorted lists.", "Explain what a prime number is.",
    "Write a Python function that counts words in a string.", "How do plants make food?",
    "Write a Python function for binary search.", "Why do we have seasons?",
]


def chat_prompts(tokenizer, n: int = len(QUESTIONS)) -> List[List[int]]:
    """The first ``n`` questions as chat-template token ids (generation prompt added)."""
    return [tokenizer(tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                                    tokenize=False), add_special_tokens=False).input_ids
            for q in QUESTIONS[:n]]


def run(url: str, prompts: Sequence[Sequence[int]], max_new_tokens: int, concurrency: int = 1,
        top2: bool = False, drafts: Optional[Sequence[Optional[Sequence[int]]]] = None,
        custom: Optional[dict] = None) -> List[dict]:
    """Greedy outputs of ``prompts`` on the server at ``url``: per prompt ``output_ids``, ``meta_info``
    and, with ``top2``, ``top2`` (per output token, plain's two best ``(logprob, token)``);
    ``drafts``: a client draft per prompt (``ssr_draft``, SSR servers; None: none for that prompt);
    ``custom``: further ``custom_params`` for every request (``{"ssr_context": True}``)."""
    def one(i: int) -> dict:
        sp = {"max_new_tokens": max_new_tokens, "temperature": 0}
        params = dict(custom or {})
        if drafts is not None and drafts[i]:
            params["ssr_draft"] = list(drafts[i])
        if params:
            sp["custom_params"] = params
        body = {"input_ids": list(prompts[i]), "sampling_params": sp}
        if top2:
            body.update(return_logprob=True, top_logprobs_num=2)
        r = requests.post(url + "/generate", json=body, timeout=1800)
        r.raise_for_status()
        out = r.json()
        res = {"output_ids": out["output_ids"], "meta_info": out["meta_info"]}
        if top2:
            res["top2"] = [[(lp, t) for lp, t, *_ in step] for step in out["meta_info"]["output_top_logprobs"]]
        return res

    with cf.ThreadPoolExecutor(max(1, concurrency)) as pool:
        return list(pool.map(one, range(len(prompts))))


def first_difference(a: Sequence[int], b: Sequence[int]) -> Optional[int]:
    """Index of the first token where ``a`` and ``b`` differ (or where the shorter ends); None if equal.

    >>> first_difference([1, 2, 3], [1, 5, 3]), first_difference([1, 2], [1, 2]), first_difference([1], [1, 2])
    (1, None, 1)
    """
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if i is None and len(a) != len(b):
        return min(len(a), len(b))
    return i


def first_differences(plain: Sequence[dict], other: Sequence[dict]) -> List[dict]:
    """Per prompt whose output differs from plain's: where, both tokens there, and plain's top-two
    log-probability gap there (0.0: an exact tie, which any rounding difference can break)."""
    out = []
    for i, (p, o) in enumerate(zip(plain, other)):
        d = first_difference(p["output_ids"], o["output_ids"])
        if d is None:
            continue
        row = {"prompt": i, "at": d, "plain": p["output_ids"][d] if d < len(p["output_ids"]) else None,
               "other": o["output_ids"][d] if d < len(o["output_ids"]) else None}
        top = p.get("top2") or []
        if d < len(top) and len(top[d]) == 2:
            row["plain_top2"] = top[d]
            row["gap"] = round(top[d][0][0] - top[d][1][0], 6)
        out.append(row)
    return out


def edited(tokens: Sequence[int], every: int = 40, vocab: int = 49152) -> List[int]:
    """``tokens`` with every ``every``-th token changed (a draft that agrees in spans: prefix
    verification stops at the first change, suffix decoding has to find the way back).

    >>> edited([5, 6, 7, 8, 9], every=2, vocab=100)
    [5, 7, 7, 9, 9]
    """
    return [(t + 1) % vocab if i % every == every - 1 else t for i, t in enumerate(tokens)]


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NOT_RENAMED = set(keyword.kwlist) | set(dir(builtins)) | {"self", "cls", "python"}


def renamed(tokens: Sequence[int], tokenizer, lo: int = 3, hi: int = 18) -> Tuple[Optional[List[int]], Optional[str]]:
    """``tokens`` (an answer) with one identifier renamed everywhere it occurs, as a draft that named
    one thing differently: the first identifier (in order of appearance; no keyword, builtin or
    ``self``) that occurs ``lo`` to ``hi`` times as a whole word gets the prefix ``my_``. The text is
    decoded, edited and encoded again. Returns ``(draft tokens, identifier)``, ``(None, None)`` when
    no identifier qualifies.

    >>> class Tok:  # characters as tokens
    ...     def decode(self, t, **k): return "".join(map(chr, t))
    ...     def encode(self, s, **k): return [ord(c) for c in s]
    >>> d, name = renamed([ord(c) for c in "x = f(x) + g(x)"], Tok(), lo=3)
    >>> name, "".join(map(chr, d))
    ('x', 'my_x = f(my_x) + g(my_x)')
    """
    text = tokenizer.decode(list(tokens), skip_special_tokens=False)
    counts = Counter(_IDENT.findall(text))
    for m in _IDENT.finditer(text):
        name = m.group(0)
        if name not in _NOT_RENAMED and lo <= counts[name] <= hi:
            new = re.sub(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", "my_" + name, text)
            return list(tokenizer.encode(new, add_special_tokens=False)), name
    return None, None
