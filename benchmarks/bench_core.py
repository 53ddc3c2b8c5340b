"""Micro-benchmark of the SSR core (pure Python, single thread).

Measures, for drafts of 500 / 2K / 8K tokens (vocab ~32k, Zipf-like with
repeated phrases):

* index update, µs per token: ``SuffixIndex.extend`` in one call (bulk) and
  one token per call (streamed, as a draft grows during decoding);
* proposal, µs per decode step: a greedy decode loop over an answer that is
  the draft with edits every ~60 tokens; timed are ``propose`` (chain, k=7),
  ``propose`` with prefix disabled (suffix path only), ``propose_tree``,
  ``layout_tree`` (8 nodes) and ``record``.

With ``--peers`` (default on; ``--no-peers`` to skip) the same token streams
(the same draft, the same answer) also go through two peers, in the same run:

* ArcticInference ``SuffixDecodingCache`` (``arctic_inference.suffix_decoding``,
  C++ suffix trees, ``max_tree_depth=24``). *update*: the draft as the
  request's prompt (``start_request``, bulk: builds the per-request local
  tree) and the draft as a streamed response (``add_active_response`` one
  token per call: local *and* global tree). *proposal*: ``speculate`` (chain,
  ``max_spec_tokens=7``, ``max_spec_factor=1``, ``min_token_prob=0.1``, context
  = the last 24 answer tokens) over the same greedy decode of the answer,
  with the draft as the prompt; its record is ``add_active_response`` of the
  accepted tokens + bonus.
* SGLang NGRAM ``NgramCorpus`` (JIT C++ trie; constructor defaults:
  ``max_trie_depth=18``, BFS, 8 draft tokens incl. the last token). The corpus
  is *global* (shared by all requests), not per request. *update*: the draft
  inserted as one sequence (``batch_put``, bulk) and as NGRAM's decode path
  feeds it: per token, the window of the last 18 tokens (``batch_put`` per
  token); inserts run on a background thread, so the timing includes the
  final ``synchronize``. *proposal*: ``batch_get`` (stateful match) per step
  over the same decode; the corpus is preloaded with the draft and each step
  ``batch_put``s the last 18 tokens + ``synchronize`` (its record). NGRAM
  proposes a tree of 7 tokens (BFS), verified by the best root-to-leaf path.

A peer that cannot be imported is skipped with the reason in the output.

``--baseline REV`` also runs SSR's own rows with ``ssr_sglang/core`` as it was at
git revision ``REV`` (loaded beside today's under another package name, see
``core_baseline.py``), on the same token streams, the repeats of the two
interleaved so that machine load hits both alike; rows ``ssr@REV`` sit beside
today's.

Usage: python benchmarks/bench_core.py [--out results.json] [--sizes 500,2000,8000] [--no-peers]
       [--baseline 35ab2d0] [--repeats 3]
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

import ssr_sglang.core as CORE  # noqa: E402

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


def bench_update(tokens: list, streamed: bool, core=CORE) -> float:
    def run() -> float:
        idx = core.SuffixIndex()
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


def decode_loop(draft: list, answer: list, cfg, tree: bool, num_nodes: int = 8, core=CORE):
    """Greedy decode of ``answer`` (``cfg``: a ``core.ProposerConfig``).

    Returns (µs/step propose, µs/step record, steps, tokens/step, µs/step layout_tree).
    """
    layout_tree = core.layout_tree
    prop = core.DraftProposer(cfg)
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


# ---------------------------------------------------------------- peers
ARCTIC_DEPTH = 24
NGRAM_DEPTH = 18


def _load_arctic():
    try:
        from arctic_inference.suffix_decoding import SuffixDecodingCache
        return SuffixDecodingCache, None
    except Exception as e:  # noqa: BLE001
        return None, f"arctic-inference not importable ({type(e).__name__}: {e}); "\
                     "install with `pip install arctic-inference`"


def _load_ngram():
    try:
        import logging
        logging.disable(logging.WARNING)
        from sglang.srt.speculative.cpp_ngram.ngram_corpus import NgramCorpus
        NgramCorpus(draft_token_num=8)  # JIT-compiles the C++ extension once
        return NgramCorpus, None
    except Exception as e:  # noqa: BLE001
        return None, f"sglang NgramCorpus unavailable ({type(e).__name__}: {e})"
    finally:
        logging.disable(logging.NOTSET)


def _greedy_match(answer: list, pos: int, tokens) -> int:
    k = 0
    n = len(answer)
    for x in tokens:
        if pos + k < n and answer[pos + k] == x:
            k += 1
        else:
            break
    return k


def arctic_update(cls, tokens: list, streamed: bool) -> float:
    def run() -> float:
        cache = cls(max_tree_depth=ARCTIC_DEPTH)
        t0 = time.perf_counter()
        if streamed:
            cache.start_request("r", [])
            add = cache.add_active_response
            for t in tokens:
                add("r", (t,))
        else:
            cache.start_request("r", tokens)
        return (time.perf_counter() - t0) / len(tokens) * 1e6
    return best_of(run)


def timed_decode(answer: list, propose, record, paths=lambda proposal: proposal):
    """Decode ``answer`` greedily with a peer's proposals: ``propose(out)`` (timed) gives a proposal,
    ``paths(proposal)`` (not timed: format conversion) its candidate token lists; the longest matching
    one plus the bonus token is taken and ``record(out, new)`` (timed) tells the peer.
    Returns (propose us/step, record us/step, steps, tokens/step)."""
    out: list = []
    t_prop = t_rec = 0.0
    steps = 0
    clock = time.perf_counter
    n = len(answer)
    while len(out) < n:
        t0 = clock()
        proposal = propose(out)
        t1 = clock()
        best = max((_greedy_match(answer, len(out), c) for c in paths(proposal)), default=0)
        new = answer[len(out):len(out) + best + 1]
        out.extend(new)
        t2 = clock()
        record(out, new)
        t_rec += clock() - t2
        t_prop += t1 - t0
        steps += 1
    assert out == answer
    return t_prop / steps * 1e6, t_rec / steps * 1e6, steps, n / steps


def arctic_decode(cls, draft: list, answer: list, k: int = 7):
    cache = cls(max_tree_depth=ARCTIC_DEPTH)
    cache.start_request("r", draft)

    def propose(out):
        d = cache.speculate("r", out[-ARCTIC_DEPTH:] if out else [0], max_spec_tokens=k, max_spec_factor=1.0,
                            min_token_prob=0.1, use_tree_spec=False)
        return d

    result = timed_decode(answer, propose, lambda out, new: cache.add_active_response("r", new),
                          lambda d: [d.token_ids])
    cache.stop_request("r")
    return result


def ngram_update(cls, tokens: list, streamed: bool) -> float:
    def run() -> float:
        corpus = cls(draft_token_num=8, max_trie_depth=NGRAM_DEPTH)
        t0 = time.perf_counter()
        if streamed:
            put = corpus.batch_put
            for i in range(1, len(tokens) + 1):
                put([tokens[max(0, i - NGRAM_DEPTH):i]])
        else:
            corpus.batch_put([tokens])
        corpus.synchronize()
        return (time.perf_counter() - t0) / len(tokens) * 1e6
    return best_of(run)


def ngram_decode(cls, draft: list, answer: list, num_nodes: int = 8):
    import numpy as np

    corpus = cls(draft_token_num=num_nodes, max_trie_depth=NGRAM_DEPTH)
    corpus.batch_put([draft])
    corpus.synchronize()

    def propose(out):
        return corpus.batch_get(["r"], [out[-NGRAM_DEPTH:] if out else [0]], [len(out) + 1])

    def paths(proposal):
        toks, mask = proposal
        m = np.asarray(mask).reshape(num_nodes, num_nodes).tolist()
        return [path[1:] for path in corpus.leaf_paths_from_mask([int(x) for x in toks], m)]  # [0]: last token

    def record(out, new):
        corpus.batch_put([out[-NGRAM_DEPTH:]])
        corpus.synchronize()

    return timed_decode(answer, propose, record, paths)


def peer_rows(size: int, draft: list, answer: list, peers: dict) -> list:
    rows = []
    arctic, ngram = peers.get("arctic"), peers.get("ngram")
    if arctic is not None:
        dec = min((arctic_decode(arctic, draft, answer) for _ in range(3)), key=lambda r: r[0])
        rows.append({"impl": "arctic SuffixDecodingCache", "draft_tokens": size,
                     "update_bulk_us_per_token": arctic_update(arctic, draft, False),
                     "update_streamed_us_per_token": arctic_update(arctic, draft, True),
                     "propose_us_per_step": dec[0], "record_us_per_step": dec[1],
                     "tokens_per_step": dec[3]})
    if ngram is not None:
        dec = min((ngram_decode(ngram, draft, answer) for _ in range(2)), key=lambda r: r[0])
        rows.append({"impl": "sglang NgramCorpus", "draft_tokens": size,
                     "update_bulk_us_per_token": ngram_update(ngram, draft, False),
                     "update_streamed_us_per_token": ngram_update(ngram, draft, True),
                     "propose_us_per_step": dec[0], "record_us_per_step": dec[1],
                     "tokens_per_step": dec[3]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="write JSON results here")
    ap.add_argument("--sizes", default="500,2000,8000")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--peers", action=argparse.BooleanOptionalAction, default=True,
                    help="also run ArcticInference SuffixDecodingCache and SGLang NgramCorpus")
    ap.add_argument("--baseline", default="", help="also run SSR's rows with the core at this git revision")
    ap.add_argument("--repeats", type=int, default=3, help="runs per measurement; the fastest is reported")
    args = ap.parse_args()
    rows = []
    peers: dict = {}
    skipped: dict = {}
    if args.peers:
        for name, loader in (("arctic", _load_arctic), ("ngram", _load_ngram)):
            cls, why = loader()
            if cls is None:
                skipped[name] = why
            else:
                peers[name] = cls
    impls = [("", CORE)]
    if args.baseline:
        from core_baseline import load_core

        impls.append(("@" + args.baseline, load_core(args.baseline)))
    side: list = []
    reps = args.repeats
    for size in [int(s) for s in args.sizes.split(",")]:
        rng = random.Random(args.seed + size)
        draft = make_tokens(size, rng)
        answer = make_answer(draft, rng)

        def best(fn):
            """Per impl, the fastest of ``reps`` runs of ``fn(core)``, the impls' runs interleaved."""
            runs = {tag: [] for tag, _ in impls}
            for _ in range(reps):
                for tag, core in impls:
                    runs[tag].append(fn(core))
            return {tag: min(rs, key=lambda r: r[0] if isinstance(r, tuple) else r) for tag, rs in runs.items()}

        chain = best(lambda c: decode_loop(draft, answer, c.ProposerConfig(max_tokens=7, min_match=2), False,
                                           core=c))
        suffix = best(lambda c: decode_loop(draft, answer,
                                            c.ProposerConfig(max_tokens=7, min_match=2, use_prefix=False), False,
                                            core=c))
        tree = best(lambda c: decode_loop(draft, answer, c.ProposerConfig(max_tokens=7, min_match=2), True,
                                          core=c))
        bulk = best(lambda c: bench_update(draft, streamed=False, core=c))
        streamed = best(lambda c: bench_update(draft, streamed=True, core=c))
        for tag, _ in impls:
            rows.append({
                "impl": "ssr" + tag,
                "draft_tokens": size,
                "answer_tokens": len(answer),
                "update_bulk_us_per_token": bulk[tag],
                "update_streamed_us_per_token": streamed[tag],
                "propose_chain_us_per_step": chain[tag][0],
                "record_us_per_step": chain[tag][1],
                "chain_tokens_per_step": chain[tag][3],
                "propose_suffix_only_us_per_step": suffix[tag][0],
                "suffix_only_tokens_per_step": suffix[tag][3],
                "propose_tree_us_per_step": tree[tag][0],
                "layout_tree_us_per_step": tree[tag][4],
                "tree_tokens_per_step": tree[tag][3],
            })
            r = rows[-1]
            side.append({"impl": f"ssr{tag} SuffixIndex/DraftProposer (chain)", "draft_tokens": size,
                         "update_bulk_us_per_token": r["update_bulk_us_per_token"],
                         "update_streamed_us_per_token": r["update_streamed_us_per_token"],
                         "propose_us_per_step": r["propose_chain_us_per_step"],
                         "record_us_per_step": r["record_us_per_step"],
                         "tokens_per_step": r["chain_tokens_per_step"]})
        if peers:
            side.extend(peer_rows(size, draft, answer, peers))
    cols = [
        ("impl", "impl", "{}"),
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
        ("tok/step tree", "tree_tokens_per_step", "{:.2f}"),
    ]
    print("| " + " | ".join(c[0] for c in cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(fmt.format(r[key]) for _, key, fmt in cols) + " |")
    if args.peers:
        print("\nSide by side on the same token streams (same draft, same answer; 7 proposed tokens/step):")
        pcols = [("impl", "impl", "{}"), ("draft", "draft_tokens", "{}"),
                 ("update bulk µs/tok", "update_bulk_us_per_token", "{:.2f}"),
                 ("update streamed µs/tok", "update_streamed_us_per_token", "{:.2f}"),
                 ("propose µs/step", "propose_us_per_step", "{:.2f}"),
                 ("record µs/step", "record_us_per_step", "{:.2f}"),
                 ("tok/step", "tokens_per_step", "{:.2f}")]
        print("| " + " | ".join(c[0] for c in pcols) + " |")
        print("|" + "---|" * len(pcols))
        for r in side:
            print("| " + " | ".join(fmt.format(r[key]) for _, key, fmt in pcols) + " |")
        print("update: ssr = SuffixIndex.extend of the draft (per request); arctic = start_request(prompt=draft) "
              "bulk / add_active_response per token (local+global tree); ngram = batch_put into the GLOBAL "
              "corpus, whole draft / last-18-token window per token, incl. synchronize. proposal: ssr propose; "
              "arctic speculate; ngram batch_get (BFS tree). record: ssr record; arctic add_active_response; "
              "ngram batch_put(last 18)+synchronize.")
        for name, why in skipped.items():
            print(f"skipped {name}: {why}")
    if args.out:
        meta = {"python": sys.version.split()[0], "implementation": platform.python_implementation(),
                "machine": platform.machine(), "seed": args.seed,
                "baseline": args.baseline, "repeats": args.repeats}
        if args.peers:
            meta["peers"] = {"arctic": {"max_tree_depth": ARCTIC_DEPTH, "max_spec_tokens": 7,
                                        "max_spec_factor": 1.0, "min_token_prob": 0.1},
                             "ngram": {"max_trie_depth": NGRAM_DEPTH, "draft_token_num": 8, "match_type": "BFS",
                                       "corpus": "global (shared by all requests)"},
                             "skipped": skipped}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"meta": meta, "rows": rows, "side_by_side": side}, indent=2))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
