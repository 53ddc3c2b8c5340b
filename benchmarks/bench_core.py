"""Micro-benchmark of the SSR core (pure Python, single thread).

Measures, for drafts of 500 / 2K / 8K tokens (vocab ~32k, Zipf-like with
repeated phrases):

* index update, µs per token: ``SuffixIndex.extend`` in one call (bulk) and
  one token per call (streamed, as a draft grows during decoding);
* proposal, µs per decode step: a greedy decode loop over an answer that is
  the draft with edits every ~60 tokens; timed are ``propose`` (chain, k=7),
  ``propose`` with prefix disabled (suffix path only), ``propose_tree``,
  ``layout_tree`` (8 nodes) and ``record``.

Usage: python benchmarks/bench_core.py [--out results.json] [--sizes 500,2000,8000]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ssr_sglang.core import DraftProposer, ProposerConfig, SuffixIndex, layout_tree  # noqa: E402

VOCAB = 32000


def make_tokens(n: int, rng: random.Random) -> list:
    """Zipf-ish unigrams plus copies of earlier phrases (text-like repetition)."""
    out: list = []
    while len(out) < n:
        if len(out) > 50 and rng.random() < 0.15:
            start = rng.randrange(len(out) - 20)
            out.extend(out[start:start + rng.randrange(3, 20)])
        else:
            out.append(int(VOCAB ** rng.random()) - 1)  # P(rank r) ~ 1/r
    return out[:n]


def make_answer(draft: list, rng: random.Random) -> list:
    """The draft with an edit (substitution / insertion / deletion) every ~60 tokens."""
    ans = []
    i = 0
    while i < len(draft):
        seg = rng.randrange(30, 90)
        ans.extend(draft[i:i + seg])
        i += seg
        op = rng.randrange(3)
        if op == 0:
            ans.append(rng.randrange(VOCAB))
            i += 1
        elif op == 1:
            ans.extend(rng.randrange(VOCAB) for _ in range(rng.randrange(1, 4)))
        else:
            i += rng.randrange(1, 4)
    return ans


def best_of(fn, repeats: int = 3) -> float:
    return min(fn() for _ in range(repeats))


def bench_update(tokens: list, streamed: bool) -> float:
    def run() -> float:
        idx = SuffixIndex()
        idx.add_source(0)
        t0 = time.perf_counter()
        if streamed:
            ext = idx.extend
            for t in tokens:
                ext(0, (t,))
        else:
            idx.extend(0, tokens)
        return (time.perf_counter() - t0) / len(tokens) * 1e6
    return best_of(run)


def decode_loop(draft: list, answer: list, cfg: ProposerConfig, tree: bool, num_nodes: int = 8):
    """Greedy decode of ``answer``.

    Returns (µs/step propose, µs/step record, steps, tokens/step, µs/step layout_tree).
    """
    prop = DraftProposer(cfg)
    prop.add_draft(draft)
    out: list = []
    t_prop = t_rec = t_layout = 0.0
    steps = 0
    clock = time.perf_counter
    n = len(answer)
    while len(out) < n:
        t0 = clock()
        if tree:
            branches = prop.propose_tree(out, num_nodes - 1)
            t1 = clock()
            t = layout_tree(out[-1] if out else 0, [b.tokens for b in branches], num_nodes)
            t_layout += clock() - t1
            # oracle greedy verify: deepest branch prefix matching the answer
            best, best_b = 0, 0
            for bi, b in enumerate(branches):
                k = 0
                for x in b.tokens:
                    if len(out) + k < n and answer[len(out) + k] == x:
                        k += 1
                    else:
                        break
                if k > best:
                    best, best_b = k, bi
            del t
        else:
            p = prop.propose(out, num_nodes - 1)
            t1 = clock()
            best, best_b = 0, 0
            for x in p.tokens:
                if len(out) + best < n and answer[len(out) + best] == x:
                    best += 1
                else:
                    break
        out.extend(answer[len(out):len(out) + best + 1])
        t2 = clock()
        prop.record(best, best_b)
        t3 = clock()
        t_prop += t1 - t0
        t_rec += t3 - t2
        steps += 1
    assert out == answer
    return t_prop / steps * 1e6, t_rec / steps * 1e6, steps, n / steps, t_layout / steps * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="write JSON results here")
    ap.add_argument("--sizes", default="500,2000,8000")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rows = []
    for size in [int(s) for s in args.sizes.split(",")]:
        rng = random.Random(args.seed + size)
        draft = make_tokens(size, rng)
        answer = make_answer(draft, rng)
        cfg = ProposerConfig(max_tokens=7, min_match=2)
        chain = min((decode_loop(draft, answer, cfg, tree=False) for _ in range(3)), key=lambda r: r[0])
        suffix = min((decode_loop(draft, answer, ProposerConfig(max_tokens=7, min_match=2, use_prefix=False), False)
                      for _ in range(3)), key=lambda r: r[0])
        tree = min((decode_loop(draft, answer, cfg, tree=True) for _ in range(3)), key=lambda r: r[0])
        rows.append({
            "draft_tokens": size,
            "answer_tokens": len(answer),
            "update_bulk_us_per_token": bench_update(draft, streamed=False),
            "update_streamed_us_per_token": bench_update(draft, streamed=True),
            "propose_chain_us_per_step": chain[0],
            "record_us_per_step": chain[1],
            "chain_tokens_per_step": chain[3],
            "propose_suffix_only_us_per_step": suffix[0],
            "suffix_only_tokens_per_step": suffix[3],
            "propose_tree_us_per_step": tree[0],
            "layout_tree_us_per_step": tree[4],
            "tree_tokens_per_step": tree[3],
        })
    cols = [
        ("draft", "draft_tokens", "{}"),
        ("update bulk µs/tok", "update_bulk_us_per_token", "{:.2f}"),
        ("update streamed µs/tok", "update_streamed_us_per_token", "{:.2f}"),
        ("propose chain µs/step", "propose_chain_us_per_step", "{:.2f}"),
        ("propose suffix-only µs/step", "propose_suffix_only_us_per_step", "{:.2f}"),
        ("propose_tree µs/step", "propose_tree_us_per_step", "{:.2f}"),
        ("layout_tree(8) µs/step", "layout_tree_us_per_step", "{:.2f}"),
        ("record µs/step", "record_us_per_step", "{:.2f}"),
        ("tok/step chain", "chain_tokens_per_step", "{:.2f}"),
        ("tok/step suffix-only", "suffix_only_tokens_per_step", "{:.2f}"),
    ]
    print("| " + " | ".join(c[0] for c in cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(fmt.format(r[key]) for _, key, fmt in cols) + " |")
    if args.out:
        meta = {"python": sys.version.split()[0], "implementation": platform.python_implementation(),
                "machine": platform.machine(), "seed": args.seed}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
