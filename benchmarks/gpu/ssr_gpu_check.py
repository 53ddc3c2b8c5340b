#!/usr/bin/env python3
"""Prepared GPU check of SSR on a Qwen3-4B-shaped model (random weights).

Runs with plain ``torch`` + ``transformers`` (no SGLang, no network) plus the
engine-free SSR core of this repository (``ssr_sglang/core``, pure Python +
NumPy), which travels with the working tree.

Stages (see README.md next to this file):

1. build a ``transformers`` ``Qwen3ForCausalLM`` with random weights directly
   on the device (bf16 on CUDA; Qwen3-4B shapes, or ``--tiny``);
2. baseline: greedy decode of ``L`` answer tokens after a random prompt, one
   token per forward, with a ``StaticCache`` whose forwards are captured in
   CUDA graphs (fallbacks: static cache eager, then ``DynamicCache`` eager);
3. verify-step cost: one forward of ``k + 1`` tokens against a long KV prefix,
   ``k`` in {1, 2, 4, 8, 16, 32} (and ``k = 0``: a plain decode step);
4. SSR end to end: drafts = the baseline answer with controlled edits, fed to
   ``DraftProposer``; loop = propose (chain) -> one forward over
   ``[last token] + proposal`` -> greedy accept (longest matching prefix +
   bonus) -> roll the KV cache back to the accepted length; the output must be
   token-identical to the baseline;
5. writes ``results.json`` / ``results.md`` to ``$OUT`` (default
   ``./gpu_results``) and prints the Markdown tables.

Greedy token choice (both baseline and SSR): the bf16 ``lm_head`` gives the
top-8 candidates, which are re-scored in fp32 from the final hidden state
(removes bf16 logit quantisation ties; the remaining source of mismatches is
shape-dependent bf16 rounding inside the network, reported honestly).

Usage::

    PYTHONUNBUFFERED=1 python3 ssr_gpu_check.py --out $OUT 2>&1 | tee $OUT/log   # H200 (estimate: 2-4 min)
    python3 ssr_gpu_check.py --quick --out $OUT      # tight device budget (~1-2 min, estimate)
    python3 ssr_gpu_check.py --tiny --device cpu     # CPU smoke test, seconds
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import random
import statistics
import sys
import time
import traceback
import types
from pathlib import Path

T_START = time.perf_counter()
REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

TOPK_RESCORE = 8
K_VERIFY = (0, 1, 2, 4, 8, 16, 32)  # proposed tokens; forward width = k + 1
WIDTHS = tuple(k + 1 for k in K_VERIFY)


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T_START:7.1f}s] {msg}", flush=True)


# --------------------------------------------------------------------------
# SSR core import (falls back to loading proposer/suffix_index without NumPy)
# --------------------------------------------------------------------------
def import_core():
    try:
        from ssr_sglang.core import DraftProposer, ProposerConfig, build_chain, verify_greedy

        return DraftProposer, ProposerConfig, build_chain, verify_greedy, "ssr_sglang.core"
    except ImportError as e:  # e.g. no numpy: proposer + suffix_index are pure Python
        log(f"ssr_sglang.core import failed ({e!r}); loading proposer without numpy")
        pkg = types.ModuleType("_ssr_core_nonp")
        pkg.__path__ = [str(REPO / "ssr_sglang" / "core")]
        sys.modules["_ssr_core_nonp"] = pkg
        mod = importlib.import_module("_ssr_core_nonp.proposer")
        return mod.DraftProposer, mod.ProposerConfig, None, None, "proposer-only (no numpy)"


DraftProposer, ProposerConfig, build_chain, verify_greedy, CORE_SOURCE = import_core()


def accept_greedy(last, proposal, target):
    """Longest prefix of ``proposal`` equal to ``target`` (argmax after node i) + bonus.

    ``target[i]`` is the greedy token after ``[last] + proposal[:i]``; uses the
    core's ``build_chain`` + ``verify_greedy`` when NumPy is available.
    """
    if verify_greedy is not None and build_chain is not None and proposal:
        tokens, _mask, parents = build_chain(last, proposal, len(proposal) + 1)
        path, bonus = verify_greedy(tokens, parents, target[: len(proposal) + 1])
        return len(path) - 1, int(bonus)
    acc = 0
    while acc < len(proposal) and proposal[acc] == target[acc]:
        acc += 1
    return acc, int(target[acc])


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------
QWEN3_4B = dict(
    vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
    num_attention_heads=32, num_key_value_heads=8, head_dim=128,
)
TINY = dict(
    vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
)


def build_model(shape: dict, device: torch.device, dtype: torch.dtype, init_range: float, max_pos: int, seed: int):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        **shape,
        max_position_embeddings=max(max_pos, 4096),
        initializer_range=init_range,
        # Qwen3-4B ties embeddings; untied here so that random weights do not
        # make "repeat the current token" the argmax (same per-step compute).
        tie_word_embeddings=False,
        use_cache=True,
    )
    try:
        config._attn_implementation = "sdpa"
    except Exception:  # pragma: no cover - older/newer config API
        pass
    torch.manual_seed(seed)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Qwen3ForCausalLM(config)
    finally:
        torch.set_default_dtype(old)
    # params/norm weights are created in `dtype` (default dtype); the rotary
    # inv_freq buffer stays fp32 (no blanket .to(dtype))
    model = model.to(device=device).eval()
    if any(p.dtype != dtype for p in model.parameters()):
        for p in model.parameters():
            p.data = p.data.to(dtype)
    model.requires_grad_(False)
    return model


# --------------------------------------------------------------------------
# runners: forward n tokens at absolute position `start`, return the greedy
# token after each of them (+ fp32 top1-top2 gap); the KV cache holds exactly
# positions < start + n afterwards (positions >= start are overwritten).
# --------------------------------------------------------------------------
def greedy_head(model, h):
    """h: [n, H] final (normed) hidden -> (token [n] int64, gap [n] fp32)."""
    w = model.lm_head.weight
    logits = F.linear(h, w)
    top = logits.topk(TOPK_RESCORE, dim=-1).indices  # [n, T]
    exact = (w[top].float() * h.float()[:, None, :]).sum(-1)  # [n, T] fp32
    srt, order = exact.sort(dim=-1, descending=True)
    tok = top.gather(-1, order[:, :1])[:, 0]
    gap = srt[:, 0] - srt[:, 1]
    return tok, gap


class StaticRunner:
    """transformers StaticCache; forwards optionally captured as CUDA graphs.

    Roll-back = resetting each layer's ``cumulative_length`` (the write/query
    offset of a transformers>=5 StaticLayer); stale entries beyond it are
    masked (causal) and overwritten by later forwards.  Proposals are padded
    to the next captured width.
    """

    def __init__(self, model, max_len: int, use_graphs: bool):
        from transformers import StaticCache

        self.model = model
        self.device = model.lm_head.weight.device
        try:
            self.cache = StaticCache(config=model.config, max_cache_len=max_len)
        except TypeError:  # older signature
            self.cache = StaticCache(config=model.config, max_batch_size=1, max_cache_len=max_len,
                                     device=self.device, dtype=model.lm_head.weight.dtype)
        self.max_len = max_len
        self._arange = torch.arange(max(max_len, 4096), device=self.device)
        self.use_graphs = use_graphs
        self.graphs = {}
        self.name = "static"

    def _layers_len(self):
        return [layer.cumulative_length for layer in self.cache.layers]

    def _set_len_from(self, start_t):
        for c in self._layers_len():
            c.copy_(start_t)

    def _fwd(self, ids, start_t):
        """Device-side only (no host syncs), so it can be captured in a CUDA graph.

        The causal mask over the whole static cache is built here and passed
        as a prepared mask mapping: transformers' own mask creation checks
        ``q_offset == 0`` on the host, which would sync.
        """
        w = ids.shape[1]
        self._set_len_from(start_t)
        q_pos = start_t + self._arange[:w]
        mask = (self._arange[None, : self.max_len] <= q_pos[:, None]).view(1, 1, w, self.max_len)
        out = self.model.model(input_ids=ids, attention_mask={"full_attention": mask}, position_ids=q_pos[None],
                               past_key_values=self.cache, use_cache=True)
        return greedy_head(self.model, out.last_hidden_state[0])

    def prefill(self, tokens):
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        start = torch.zeros((), dtype=torch.long, device=self.device)
        with torch.inference_mode():
            tok, gap = self._fwd(ids, start)
        if not isinstance(self.cache.layers[0].cumulative_length, torch.Tensor):
            raise RuntimeError("StaticLayer.cumulative_length is not a tensor in this transformers version")
        return int(tok[-1]), float(gap[-1])

    def capture(self, widths, at: int):
        """Capture one CUDA graph per width (call after prefill)."""
        pool = None
        for w in widths:
            buf = torch.zeros(w + 1, dtype=torch.long, device=self.device)
            buf[w] = at
            ids = buf[:w].view(1, w)
            start_t = buf[w]
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.inference_mode():
                with torch.cuda.stream(s):
                    for _ in range(2):
                        self._fwd(ids, start_t)
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=pool):
                    tok, gap = self._fwd(ids, start_t)
            pool = g.pool()
            self.graphs[w] = (g, buf, tok, gap)
        torch.cuda.synchronize()
        self.name = "static+cudagraph"

    def widths(self):
        return sorted(self.graphs) if self.graphs else list(WIDTHS)

    def bucket(self, n: int) -> int:
        for w in self.widths():
            if w >= n:
                return w
        raise ValueError(f"no width >= {n}")

    def step(self, tokens, start: int):
        n = len(tokens)
        w = self.bucket(n)
        if start + w > self.max_len:
            raise ValueError("static cache too short")
        vals = list(tokens) + [0] * (w - n) + [start]
        if self.graphs:
            g, buf, tok, gap = self.graphs[w]
            buf.copy_(torch.tensor(vals, dtype=torch.long), non_blocking=False)
            g.replay()
            return tok.tolist()[:n], gap.tolist()[:n]
        t = torch.tensor(vals, dtype=torch.long, device=self.device)
        with torch.inference_mode():
            tok, gap = self._fwd(t[:w].view(1, w), t[w])
        return tok.tolist()[:n], gap.tolist()[:n]


class DynamicRunner:
    """transformers DynamicCache, eager; roll-back with ``crop`` (negative = drop)."""

    def __init__(self, model, max_len: int):
        from transformers import DynamicCache

        self.model = model
        self.device = model.lm_head.weight.device
        try:
            self.cache = DynamicCache(config=model.config)
        except TypeError:
            self.cache = DynamicCache()
        self.name = "dynamic-eager"

    def _len(self) -> int:
        return int(self.cache.get_seq_length())

    def bucket(self, n: int) -> int:
        return n

    def step(self, tokens, start: int):
        cur = self._len()
        if cur > start:
            self.cache.crop(start - cur)  # negative: remove (cur - start) tokens
        elif cur < start:
            raise RuntimeError(f"cache has {cur} tokens, step starts at {start}")
        ids = torch.tensor([list(tokens)], dtype=torch.long, device=self.device)
        with torch.inference_mode():
            out = self.model.model(input_ids=ids, past_key_values=self.cache, use_cache=True)
            tok, gap = greedy_head(self.model, out.last_hidden_state[0])
        return tok.tolist(), gap.tolist()

    def prefill(self, tokens):
        tok, gap = self.step(tokens, 0)
        return tok[-1], gap[-1]


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


# --------------------------------------------------------------------------
# decoding
# --------------------------------------------------------------------------
def decode_plain(runner, a0: int, P: int, L: int, device):
    """Greedy, one token per forward.  Returns (answer, gaps, seconds)."""
    answer, gaps = [a0], [None]
    sync(device)
    t0 = time.perf_counter()
    pos = P
    while len(answer) < L:
        tok, gap = runner.step([answer[-1]], pos)
        answer.append(tok[0])
        gaps.append(gap[0])
        pos += 1
    sync(device)
    return answer, gaps, time.perf_counter() - t0


def decode_ssr(runner, a0: int, P: int, L: int, draft, k: int, device):
    """Greedy SSR decode: chain proposals from ``draft``, verify, accept, roll back."""
    prop = DraftProposer(ProposerConfig(max_tokens=k))
    prop.add_draft(draft)
    answer, gaps = [a0], [None]
    steps = 0
    width_hist = {}
    t_prop = 0.0
    sync(device)
    t0 = time.perf_counter()
    pos = P  # absolute position of answer[-1] (its KV is not in the cache yet)
    while len(answer) < L:
        tp = time.perf_counter()
        p = prop.propose(answer, max_tokens=min(k, L - len(answer) - 1))
        t_prop += time.perf_counter() - tp
        proposal = list(p.tokens)
        toks = [answer[-1]] + proposal
        w = runner.bucket(len(toks))
        width_hist[w] = width_hist.get(w, 0) + 1
        target, tgap = runner.step(toks, pos)
        tp = time.perf_counter()
        acc, bonus = accept_greedy(toks[0], proposal, target)
        prop.record(acc)
        t_prop += time.perf_counter() - tp
        answer.extend(proposal[:acc] + [bonus])
        gaps.extend(tgap[: acc + 1])
        pos += acc + 1
        steps += 1
    sync(device)
    dt = time.perf_counter() - t0
    st = prop.stats
    return dict(
        answer=answer[:L], gaps=gaps[:L], seconds=dt, steps=steps, proposer_s=t_prop,
        accepted_prefix=st.accepted_prefix, accepted_suffix=st.accepted_suffix,
        proposed=st.proposed, steps_prefix=st.steps_prefix, steps_suffix=st.steps_suffix,
        steps_empty=st.steps_empty, width_hist={str(a): b for a, b in sorted(width_hist.items())},
    )


def make_drafts(answer, vocab: int, seed: int, rates, span: int):
    rng = random.Random(seed)
    out = []
    L = len(answer)

    def sub(p):
        d = list(answer)
        n = 0
        for i in range(L):
            if rng.random() < p:
                t = rng.randrange(vocab)
                while t == d[i]:
                    t = rng.randrange(vocab)
                d[i] = t
                n += 1
        return d, n

    for r in rates:
        d, n = sub(r)
        out.append(dict(variant=f"sub {r:.0%}", edit_rate=r, draft=d, edits=n))
    mid = L // 3
    out.append(dict(variant=f"delete {span} @ {mid}", edit_rate=span / L,
                    draft=list(answer[:mid]) + list(answer[mid + span:]), edits=span))
    ins = [rng.randrange(vocab) for _ in range(span)]
    out.append(dict(variant=f"insert {span} @ {mid}", edit_rate=span / L,
                    draft=list(answer[:mid]) + ins + list(answer[mid:]), edits=span))
    out.append(dict(variant="unrelated (random)", edit_rate=1.0,
                    draft=[rng.randrange(vocab) for _ in range(L)], edits=L))
    return out


def first_divergence(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def answer_stats(ans):
    n = len(ans)
    grams = [tuple(ans[i:i + 4]) for i in range(max(0, n - 3))]
    period = None
    tail = 64 if n >= 192 else max(4, n // 3)
    for p in range(1, n - tail + 1):
        if ans[n - tail:] == ans[n - tail - p:n - p]:
            period = p
            break
    return dict(length=n, distinct_tokens=len(set(ans)),
                distinct_4gram_frac=round(len(set(grams)) / max(1, len(grams)), 4),
                tail_period=period)


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="tiny config (CPU smoke test)")
    ap.add_argument("--quick", action="store_true",
                    help="short GPU run for a tight device budget: L=256, k=16 only, 1 timing repeat, "
                         "20 verify repeats, deadline 150 s (explicit flags still win)")
    ap.add_argument("--device", default=None, help="cuda / cpu (default: cuda if available)")
    ap.add_argument("--out", default=None, help="output dir (default $OUT or ./gpu_results)")
    ap.add_argument("--L", type=int, default=None, help="answer tokens (default 512; tiny 64)")
    ap.add_argument("--prompt-len", type=int, default=None, help="prompt tokens (default 256; tiny 32)")
    ap.add_argument("--ks", default=None, help="SSR max proposal lengths, comma list (default 8,16,32)")
    ap.add_argument("--main-k", type=int, default=16, help="k shown in the main SSR table")
    ap.add_argument("--rates", default="0,0.02,0.05,0.10,0.25", help="substitution rates")
    ap.add_argument("--span", type=int, default=None, help="deleted/inserted span (default 32; tiny 8)")
    ap.add_argument("--repeats", type=int, default=None, help="timing repeats of baseline/SSR runs (default 3)")
    ap.add_argument("--verify-repeats", type=int, default=None, help="repeats per verify width (default 50)")
    ap.add_argument("--init-range", type=float, default=0.02, help="initializer_range of the random model")
    ap.add_argument("--dtype", default=None, help="bfloat16 / float32 (default bf16 on cuda, fp32 on cpu)")
    ap.add_argument("--cache", default="auto", choices=["auto", "static", "dynamic"],
                    help="auto: static+cudagraph on cuda (fallbacks), static eager on cpu")
    ap.add_argument("--no-graphs", action="store_true")
    ap.add_argument("--no-fp32-check", action="store_true",
                    help="skip the fp32 re-check that runs when bf16 SSR output diverges")
    ap.add_argument("--deadline-s", type=float, default=None,
                    help="skip remaining optional work after this many seconds (default 400; tiny 240)")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def make_runner(model, args, device, max_len, P, notes):
    want = args.cache
    if want in ("auto", "static"):
        try:
            r = StaticRunner(model, max_len, use_graphs=False)
            return r
        except Exception as e:
            notes.append(f"StaticCache unavailable: {e!r}; using DynamicCache")
            if want == "static":
                raise
    return DynamicRunner(model, max_len)


def setup_runner(model, args, device, prompt, max_len, notes):
    """Create runner, prefill the prompt, capture graphs; fall back on failure."""
    P = len(prompt)
    runner = make_runner(model, args, device, max_len, P, notes)
    try:
        a0, g0 = runner.prefill(prompt)
    except Exception as e:
        if isinstance(runner, DynamicRunner) or args.cache == "static":
            raise
        notes.append(f"static prefill failed: {e!r}; using DynamicCache")
        log(notes[-1])
        runner = DynamicRunner(model, max_len)
        a0, g0 = runner.prefill(prompt)
    if isinstance(runner, StaticRunner) and device.type == "cuda" and not args.no_graphs:
        try:
            t0 = time.perf_counter()
            ref = []
            with torch.inference_mode():
                for w in (1, 5):  # eager reference for the graph check
                    ref.append(runner.step(list(range(7, 7 + w)), P))
            runner.capture(WIDTHS, P)
            for w, (rt, _) in zip((1, 5), ref):
                gt, _ = runner.step(list(range(7, 7 + w)), P)
                if gt != rt:
                    notes.append(f"graph/eager token mismatch at width {w}: {gt} vs {rt}")
            log(f"captured CUDA graphs for widths {WIDTHS} in {time.perf_counter() - t0:.1f}s")
        except Exception as e:
            notes.append(f"CUDA graph capture failed: {e!r}; static cache eager")
            log(notes[-1])
            traceback.print_exc()
            runner.graphs = {}
            runner.name = "static-eager"
            torch.cuda.synchronize()
    elif isinstance(runner, StaticRunner):
        runner.name = "static-eager"
    return runner, a0, g0


def time_verify(runner, start: int, repeats: int, device, vocab: int):
    rows = []
    rng = random.Random(1)
    for k in K_VERIFY:
        w = k + 1
        toks = [rng.randrange(vocab) for _ in range(w)]
        for _ in range(3):
            runner.step(toks, start)
        ts = []
        for _ in range(repeats):
            sync(device)
            t0 = time.perf_counter()
            runner.step(toks, start)
            sync(device)
            ts.append(time.perf_counter() - t0)
        rows.append(dict(k=k, width=w, median_ms=statistics.median(ts) * 1e3, min_ms=min(ts) * 1e3))
    base = rows[0]["median_ms"]
    for r in rows:
        r["vs_decode"] = r["median_ms"] / base
    return rows


def run_all(args, res):
    if args.quick and not args.tiny:
        args.L = args.L or 256
        args.ks = args.ks or "16"
        args.repeats = args.repeats or 1
        args.verify_repeats = args.verify_repeats or 20
        args.deadline_s = args.deadline_s or 150.0
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    tiny = args.tiny
    shape = TINY if tiny else QWEN3_4B
    L = args.L or (64 if tiny else 512)
    P = args.prompt_len or (32 if tiny else 256)
    span = args.span or (8 if tiny else 32)
    repeats = args.repeats or (1 if tiny else 3)
    vrep = args.verify_repeats or (3 if tiny else 50)
    ks = [int(x) for x in (args.ks or ("4,8" if tiny else "8,16,32")).split(",")]
    main_k = args.main_k if args.main_k in ks else ks[min(1, len(ks) - 1)]
    rates = [float(x) for x in args.rates.split(",")]
    deadline = args.deadline_s or (240.0 if tiny else 400.0)
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    max_len = P + L + 2 * max(WIDTHS) + 8

    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    import transformers

    notes = []
    res.update(
        script="benchmarks/gpu/ssr_gpu_check.py", tiny=tiny, device=str(device),
        device_name=torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        torch=torch.__version__, transformers=transformers.__version__, python=platform.python_version(),
        core=CORE_SOURCE, dtype=str(dtype).replace("torch.", ""),
        model=dict(shape, tie_word_embeddings=False, initializer_range=args.init_range, attn="sdpa"),
        L=L, prompt_len=P, ks=ks, main_k=main_k, seed=args.seed, notes=notes, stage_s={},
    )
    log(f"device={res['device_name']} torch={torch.__version__} transformers={transformers.__version__} "
        f"core={CORE_SOURCE} dtype={res['dtype']}")

    t0 = time.perf_counter()
    model = build_model(shape, device, dtype, args.init_range, max_len, args.seed)
    sync(device)
    res["params_M"] = round(sum(p.numel() for p in model.parameters()) / 1e6, 1)
    res["stage_s"]["build_model"] = round(time.perf_counter() - t0, 2)
    log(f"model built: {res['params_M']}M params in {res['stage_s']['build_model']}s")

    rng = random.Random(args.seed)
    prompt = [rng.randrange(shape["vocab_size"]) for _ in range(P)]

    t0 = time.perf_counter()
    runner, a0, _ = setup_runner(model, args, device, prompt, max_len, notes)
    res["cache_mode"] = runner.name
    res["stage_s"]["setup_runner"] = round(time.perf_counter() - t0, 2)
    log(f"runner: {runner.name}")

    # ---- baseline -----------------------------------------------------
    t0 = time.perf_counter()
    base_ans, base_gaps, _ = decode_plain(runner, a0, P, L, device)  # warm-up + reference
    times = []
    for _ in range(repeats):
        ans, _, dt = decode_plain(runner, a0, P, L, device)
        times.append(dt)
        if ans != base_ans:
            notes.append(f"baseline not reproducible run-to-run (first diff {first_divergence(ans, base_ans)})")
    plain_s = statistics.median(times)
    gaps = [g for g in base_gaps[1:] if g is not None]
    res["baseline"] = dict(
        total_ms=plain_s * 1e3, per_token_ms=plain_s * 1e3 / (L - 1), runs_ms=[t * 1e3 for t in times],
        answer_stats=answer_stats(base_ans), min_gap=min(gaps) if gaps else None,
        gaps_below_1e3=sum(g < 1e-3 for g in gaps), gaps_below_1e2=sum(g < 1e-2 for g in gaps),
        answer_head=base_ans[:32],
    )
    res["stage_s"]["baseline"] = round(time.perf_counter() - t0, 2)
    log(f"baseline: {res['baseline']['per_token_ms']:.3f} ms/token ({runner.name}), "
        f"stats {res['baseline']['answer_stats']}")

    # ---- verify cost --------------------------------------------------
    t0 = time.perf_counter()
    vstart = min(P + L // 2, max_len - max(WIDTHS) - 1)
    res["verify_cost"] = dict(kv_prefix=vstart, repeats=vrep, rows=time_verify(runner, vstart, vrep, device, shape["vocab_size"]))
    res["stage_s"]["verify_cost"] = round(time.perf_counter() - t0, 2)
    log("verify cost: " + ", ".join(f"k={r['k']}: {r['median_ms']:.3f}ms" for r in res["verify_cost"]["rows"]))

    # ---- SSR ------------------------------------------------------------
    t0 = time.perf_counter()
    variants = make_drafts(base_ans, shape["vocab_size"], args.seed + 1, rates, span)
    ssr_rows = res["ssr"] = []
    order = [main_k] + [k for k in ks if k != main_k]
    skipped = []
    for k in order:
        for v in variants:
            if time.perf_counter() - T_START > deadline:
                skipped.append(f"{v['variant']} k={k}")
                continue
            first = decode_ssr(runner, a0, P, L, v["draft"], k, device)
            secs = [first["seconds"]]
            for _ in range(max(0, repeats - 1)):
                if time.perf_counter() - T_START > deadline:
                    break
                secs.append(decode_ssr(runner, a0, P, L, v["draft"], k, device)["seconds"])
            div = first_divergence(first["answer"], base_ans)
            row = dict(
                variant=v["variant"], edit_rate=v["edit_rate"], edits=v["edits"], k=k,
                steps=first["steps"], tokens_per_step=(L - 1) / first["steps"],
                accepted_per_step=(first["accepted_prefix"] + first["accepted_suffix"]) / first["steps"],
                accepted_prefix=first["accepted_prefix"], accepted_suffix=first["accepted_suffix"],
                proposed=first["proposed"], steps_prefix=first["steps_prefix"],
                steps_suffix=first["steps_suffix"], steps_empty=first["steps_empty"],
                width_hist=first["width_hist"],
                ssr_ms=statistics.median(secs) * 1e3, plain_ms=plain_s * 1e3,
                proposer_ms=first["proposer_s"] * 1e3,
                identical=div is None, first_divergence=div,
            )
            row["ratio"] = row["ssr_ms"] / row["plain_ms"]
            row["speedup"] = row["plain_ms"] / row["ssr_ms"]
            if div is not None:
                row["gap_at_divergence_baseline"] = base_gaps[div] if div < len(base_gaps) else None
                row["gap_at_divergence_ssr"] = first["gaps"][div] if div < len(first["gaps"]) else None
            ssr_rows.append(row)
            log(f"SSR k={k:2d} {v['variant']:<22} steps={row['steps']:4d} acc/step={row['accepted_per_step']:.2f} "
                f"ratio={row['ratio']:.3f} identical={row['identical']}"
                + ("" if div is None else f" (first divergence @ {div})"))
    if skipped:
        notes.append(f"deadline: skipped SSR runs {skipped}")
    res["stage_s"]["ssr"] = round(time.perf_counter() - t0, 2)
    res["identical_all"] = bool(ssr_rows) and all(r["identical"] for r in ssr_rows)

    # ---- fp32 re-check on divergence -----------------------------------
    if (not res["identical_all"] and not args.no_fp32_check and dtype != torch.float32
            and time.perf_counter() - T_START < deadline - 60):
        t0 = time.perf_counter()
        try:
            res["fp32_check"] = fp32_check(model, args, device, prompt, max_len, rates, span, main_k, notes)
        except Exception as e:
            notes.append(f"fp32 check failed: {e!r}")
            traceback.print_exc()
        res["stage_s"]["fp32_check"] = round(time.perf_counter() - t0, 2)

    res["total_s"] = round(time.perf_counter() - T_START, 2)


def fp32_check(model, args, device, prompt, max_len, rates, span, k, notes):
    """Same model cast to fp32 (TF32 off): is SSR token-identical there?"""
    log("fp32 re-check (bf16 outputs diverged)")
    model.float()
    torch.cuda.empty_cache() if device.type == "cuda" else None
    L2 = min(args.L or 512, 256)
    P = len(prompt)
    runner, a0, _ = setup_runner(model, args, device, prompt, max_len, notes)
    base, _, dt = decode_plain(runner, a0, P, L2, device)
    out = dict(L=L2, cache_mode=runner.name, plain_ms=dt * 1e3, rows=[])
    for v in make_drafts(base, model.config.vocab_size, args.seed + 1, rates, span):
        r = decode_ssr(runner, a0, P, L2, v["draft"], k, device)
        div = first_divergence(r["answer"], base)
        out["rows"].append(dict(variant=v["variant"], k=k, steps=r["steps"], identical=div is None,
                                first_divergence=div, ratio=r["seconds"] * 1e3 / out["plain_ms"]))
        log(f"fp32 SSR {v['variant']:<22} identical={div is None}")
    out["identical_all"] = all(r["identical"] for r in out["rows"])
    return out


def fmt_md(res) -> str:
    lines = []
    b = res["baseline"]
    lines.append(f"# SSR GPU check ({'tiny' if res['tiny'] else 'Qwen3-4B-shaped'}, random weights)\n")
    lines.append(f"- device: {res['device_name']}; torch {res['torch']}, transformers {res['transformers']}; "
                 f"dtype {res['dtype']}; cache/exec: **{res['cache_mode']}**; core: {res['core']}")
    m = res["model"]
    lines.append(f"- model: hidden {m['hidden_size']}, layers {m['num_hidden_layers']}, heads "
                 f"{m['num_attention_heads']}/{m['num_key_value_heads']}, head_dim {m['head_dim']}, "
                 f"ffn {m['intermediate_size']}, vocab {m['vocab_size']} ({res['params_M']}M params, untied "
                 f"embeddings, initializer_range {m['initializer_range']})")
    lines.append(f"- prompt {res['prompt_len']} random tokens, answer L={res['L']} greedy tokens; "
                 f"total script time {res['total_s']} s")
    a = b["answer_stats"]
    lines.append(f"- baseline: **{b['per_token_ms']:.3f} ms/token** ({b['total_ms']:.1f} ms for {res['L'] - 1} "
                 f"decode steps, median of {len(b['runs_ms'])}); answer: {a['distinct_tokens']} distinct tokens, "
                 f"distinct-4-gram fraction {a['distinct_4gram_frac']}, tail period {a['tail_period']}; "
                 f"fp32 top1-top2 gap: min {b['min_gap']:.2e}, {b['gaps_below_1e3']} positions < 1e-3")
    lines.append("")
    lines.append(f"## Verify-step cost (one forward of k+1 tokens at KV prefix {res['verify_cost']['kv_prefix']}, "
                 f"median of {res['verify_cost']['repeats']})\n")
    lines.append("| k proposed | tokens in forward | median ms | vs 1-token decode |")
    lines.append("|---:|---:|---:|---:|")
    for r in res["verify_cost"]["rows"]:
        lines.append(f"| {r['k']} | {r['width']} | {r['median_ms']:.3f} | {r['vs_decode']:.2f}x |")
    lines.append("")
    for k in [res["main_k"]] + [k for k in res["ks"] if k != res["main_k"]]:
        rows = [r for r in res["ssr"] if r["k"] == k]
        if not rows:
            continue
        lines.append(f"## SSR end to end, chain proposals of at most k={k} tokens\n")
        lines.append("| draft | steps | accepted/step | tokens/step | prefix acc | suffix acc | SSR ms | plain ms "
                     "| SSR/plain | speed-up | proposer ms | identical |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for r in rows:
            ident = "yes" if r["identical"] else f"NO (first diff @ {r['first_divergence']})"
            lines.append(f"| {r['variant']} | {r['steps']} | {r['accepted_per_step']:.2f} | {r['tokens_per_step']:.2f} "
                         f"| {r['accepted_prefix']} | {r['accepted_suffix']} | {r['ssr_ms']:.1f} | {r['plain_ms']:.1f} "
                         f"| {r['ratio']:.3f} | {r['speedup']:.2f}x | {r['proposer_ms']:.1f} | {ident} |")
        lines.append("")
    lines.append(f"**All SSR outputs token-identical to the baseline: {res['identical_all']}**\n")
    if "fp32_check" in res:
        fc = res["fp32_check"]
        lines.append(f"fp32 re-check (L={fc['L']}, k={fc['rows'][0]['k'] if fc['rows'] else '-'}, {fc['cache_mode']}): "
                     f"identical for all drafts: {fc['identical_all']} "
                     + ", ".join(f"{r['variant']}: {'ok' if r['identical'] else r['first_divergence']}"
                                 for r in fc["rows"]) + "\n")
    if res["notes"]:
        lines.append("Notes:\n")
        lines.extend(f"- {n}" for n in res["notes"])
        lines.append("")
    lines.append("Stage times (s): " + ", ".join(f"{k} {v}" for k, v in res["stage_s"].items()))
    return "\n".join(lines) + "\n"


def _on_sigterm(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None) -> int:
    import signal

    signal.signal(signal.SIGTERM, _on_sigterm)
    args = parse_args(argv)
    out = Path(args.out or os.environ.get("OUT") or "./gpu_results")
    out.mkdir(parents=True, exist_ok=True)
    res: dict = {}
    try:
        run_all(args, res)
        rc = 0
    except BaseException as e:  # keep partial results (also on KeyboardInterrupt / timeout signal)
        traceback.print_exc()
        res.update(error=repr(e), traceback=traceback.format_exc(), total_s=round(time.perf_counter() - T_START, 2))
        rc = 1
    (out / "results.json").write_text(json.dumps(res, indent=1, default=str))
    try:
        md = fmt_md(res)
    except Exception as e:  # partial results
        md = f"# SSR GPU check: incomplete\n\nerror: {res.get('error')}\n\n(formatting failed: {e!r}; see results.json)\n"
    (out / "results.md").write_text(md)
    print(md)
    log(f"wrote {out}/results.json")
    return rc


if __name__ == "__main__":
    sys.exit(main())
