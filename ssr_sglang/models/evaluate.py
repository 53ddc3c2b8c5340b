"""Held-out accuracy and SSR draft overlap of the bundled tiny reasoning model (plain transformers).

    python -m ssr_sglang.models.evaluate --model DIR --n 24 [--seed 20240] [--json out.json]

For each held-out task (``tasks.make_example`` with ``random.Random(seed)``, a stream distinct from
training's) the model reasons and answers greedily.  ``accuracy`` compares the answer text with the
gold answer (exact match) and the parsed fields (item -> count, status).

Drafts: the model's own reasoning is cut at 0/25/50/75% of its reasoning tokens, the think end
``\\n</think>\\n\\n`` (tokenized alone, as SSR does) is appended, and the model answers greedily.  Each
draft answer D is compared with the full-reasoning answer A (what SSR verifies against):

* ``prefix``: length of the common prefix of A and D / len(A);
* ``coverage``: fraction of A's tokens inside matching blocks (``difflib``, blocks of >= 2 tokens)
  of A and D, i.e. tokens a prefix+suffix matcher can find in the draft;
* each also split into ``content`` tokens (item names, counts, statuses: task-specific) and
  ``boilerplate`` tokens (code fences, keys, punctuation: the same for every task), since a draft
  with no reasoning at all matches most of the boilerplate;
* ``fields``: fraction of A's (item, count, status) entries that D reproduces exactly;
* ``exact``: fraction of drafts equal to A;
* ``sim_mean_accept_len``: tokens per verify step when ``ssr_sglang.core.simulator`` replays A with
  this one draft (chain of 8 nodes), when that module is importable.
"""

from __future__ import annotations

import argparse
import difflib
import json
import random
import time
from typing import Dict, List, Sequence

from .tasks import FORCE_ANSWER, THINK_END, answer_content_spans, format_chat, make_example, parse_answer

EVAL_SEED = 20240
FRACTIONS = (0.0, 0.25, 0.5, 0.75)


def load(model_dir: str, dtype: str = "float32"):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()
    return model, tok


def enc(tok, text: str) -> List[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def greedy(model, tok, prompts: Sequence[Sequence[int]], max_new_tokens: int, batch_size: int = 32) -> List[List[int]]:
    """Greedy continuations (KV cache, left padding), each cut after the first eos."""
    import torch

    eos, pad = tok.eos_token_id, tok.pad_token_id
    outs: List[List[int]] = []
    for b in range(0, len(prompts), batch_size):
        chunk = prompts[b : b + batch_size]
        L = max(len(p) for p in chunk)
        ids = torch.full((len(chunk), L), pad, dtype=torch.long)
        mask = torch.zeros((len(chunk), L), dtype=torch.long)
        for i, p in enumerate(chunk):
            ids[i, L - len(p) :] = torch.tensor(list(p))
            mask[i, L - len(p) :] = 1
        with torch.no_grad():
            gen = model.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                eos_token_id=eos, pad_token_id=pad,
            )
        for row in gen[:, L:].tolist():
            outs.append(row[: row.index(eos)] if eos in row else row)
    return outs


def split_output(tok, out: List[int]):
    """(reasoning tokens before the think end's newline, answer tokens after ``</think>\\n\\n``)."""
    end = tok.convert_tokens_to_ids(THINK_END)
    if end not in out:
        return out, []
    k = out.index(end)
    force = enc(tok, FORCE_ANSWER)  # ["\n", "</think>", "\n", "\n"]
    reasoning = out[:k]
    if reasoning[-1:] == force[:1]:
        reasoning = reasoning[:-1]
    answer = out[k + 1 :]
    tail = force[2:]
    if answer[: len(tail)] == tail:
        answer = answer[len(tail) :]
    return reasoning, answer


def content_mask(tok, ids: List[int]) -> List[bool]:
    """True for tokens overlapping a task-specific field (item name, count, status)."""
    texts = [tok.decode(ids[:k]) for k in range(len(ids) + 1)]
    spans = answer_content_spans(texts[-1])
    mask = []
    for k in range(len(ids)):
        a, b = len(texts[k]), len(texts[k + 1])
        mask.append(any(a < e and s < b for s, e in spans))
    return mask


def _ratio(hit: List[bool], sel: List[bool]) -> float:
    n = sum(sel)
    return sum(h for h, s in zip(hit, sel) if s) / n if n else 1.0


def compare(tok, ref: List[int], draft: List[int], min_block: int = 2) -> Dict[str, float]:
    cmask = content_mask(tok, ref)
    bmask = [not c for c in cmask]
    allm = [True] * len(ref)
    p = 0
    while p < min(len(ref), len(draft)) and ref[p] == draft[p]:
        p += 1
    in_prefix = [i < p for i in range(len(ref))]
    covered = [False] * len(ref)
    for blk in difflib.SequenceMatcher(None, ref, draft, autojunk=False).get_matching_blocks():
        if blk.size >= min_block:
            for i in range(blk.a, blk.a + blk.size):
                covered[i] = True
    fr, fd = parse_answer(tok.decode(ref)), parse_answer(tok.decode(draft))
    r = {
        "prefix": _ratio(in_prefix, allm),
        "prefix_content": _ratio(in_prefix, cmask),
        "prefix_boilerplate": _ratio(in_prefix, bmask),
        "coverage": _ratio(covered, allm),
        "coverage_content": _ratio(covered, cmask),
        "coverage_boilerplate": _ratio(covered, bmask),
        "fields": sum(fd.get(k) == v for k, v in fr.items()) / len(fr) if fr else float(fd == fr),
        "exact": float(ref == draft),
        "content_token_share": sum(cmask) / len(ref) if ref else 0.0,
    }
    try:
        from ssr_sglang.core.simulator import simulate

        r["sim_mean_accept_len"] = simulate(ref, [draft], num_nodes=8).mean_accept_len
    except Exception:  # the simulator is optional here
        pass
    return r


def evaluate(model_dir: str, n: int = 24, seed: int = EVAL_SEED, fractions=FRACTIONS, max_new_tokens: int = 640,
             dtype: str = "float32", drafts: bool = True, threads: int = 1) -> dict:
    import torch

    torch.set_num_threads(threads)
    t0 = time.time()
    model, tok = load(model_dir, dtype)
    rng = random.Random(seed)
    tasks = [make_example(rng) for _ in range(n)]
    prompts = [enc(tok, format_chat(t["prompt"])) for t in tasks]
    outs = greedy(model, tok, prompts, max_new_tokens)
    full = [split_output(tok, o) for o in outs]
    answers = [tok.decode(a) for _, a in full]
    exact = [a == t["answer"] for a, t in zip(answers, tasks)]
    fields = [sum(parse_answer(a).get(k) == v for k, v in t["final"].items()) / len(t["final"]) for a, t in zip(answers, tasks)]
    res = {
        "model": model_dir,
        "n": n,
        "seed": seed,
        "dtype": dtype,
        "accuracy": {
            "answer_exact": sum(exact) / n,
            "answer_exact_count": f"{sum(exact)}/{n}",
            "reasoning_exact": sum(tok.decode(r) == t["reasoning"] for (r, _), t in zip(full, tasks)) / n,
            "fields": sum(fields) / n,
        },
        "mean_tokens": {
            "reasoning": sum(len(r) for r, _ in full) / n,
            "answer": sum(len(a) for _, a in full) / n,
        },
    }
    if drafts:
        force = enc(tok, FORCE_ANSWER)
        overlap = {}
        for f in fractions:
            dprompts = [p + r[: int(round(f * len(r)))] + force for p, (r, _) in zip(prompts, full)]
            douts = greedy(model, tok, dprompts, max_new_tokens)
            rows = [compare(tok, a, d) for (_, a), d in zip(full, douts)]
            overlap[f"{f:g}"] = {k: round(sum(r[k] for r in rows) / len(rows), 4) for k in rows[0]}
        res["overlap"] = overlap
    res["seconds"] = round(time.time() - t0, 1)
    return res


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model folder (default: the bundled tiny-reasoner)")
    p.add_argument("--n", type=int, default=24)
    p.add_argument("--seed", type=int, default=EVAL_SEED)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--max-new-tokens", type=int, default=640)
    p.add_argument("--no-drafts", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None, help="also write the result here")
    args = p.parse_args(argv)
    if args.model is None:
        from . import bundled_model_path

        args.model = bundled_model_path()
    res = evaluate(args.model, args.n, args.seed, max_new_tokens=args.max_new_tokens, dtype=args.dtype,
                   drafts=not args.no_drafts, threads=args.threads)
    text = json.dumps(res, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
