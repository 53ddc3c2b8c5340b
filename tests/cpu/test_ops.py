"""Tests for the pure-torch ``sgl_kernel`` CPU stand-ins in :mod:`ssr_sglang.cpu.ops`.

Every op is checked against an independent reference: attention against
``torch.nn.functional.scaled_dot_product_attention`` (or, where SDPA cannot express it -- logit
capping, sinks -- a float64 softmax written out per query) with a boolean mask built key by key
from first principles; tree ops against brute-force walks; cache-location ops against plain loops.
"""

from __future__ import annotations

import math
import random

import pytest
import torch
import torch.nn.functional as F

from ssr_sglang.cpu import ops
from ssr_sglang.cpu.attention_ops import _attend_heads as _ATTEND
from ssr_sglang.cpu.attention_ops import decode_attention_cpu, extend_attention_cpu

SEEDS = [0, 1, 2]


@pytest.fixture(scope="module", autouse=True)
def _registered():
    ops.register_torch_ops()


# --------------------------------------------------------------------------- attention helpers


def _visible(q_pos, k_pos, *, prefix, q_idx, tree_block, is_causal, window):
    """Whether the query (absolute position q_pos, index q_idx in its extend block) sees key k_pos."""
    if k_pos >= prefix:  # key in this step's block
        e = k_pos - prefix
        if tree_block is not None:
            if not tree_block[q_idx][e]:
                return False
        elif is_causal and e > q_idx:
            return False
    if window > 0:  # window counts the keys a query sees, itself included
        if q_pos - k_pos >= window:
            return False
        if not is_causal and k_pos - q_pos >= window:
            return False
    return True


def _ref_attention(q, k, v, mask, scale, logit_cap=0.0, sinks=None):
    """q [M,H,D], k/v [L,Hkv,D] (any float dtype), mask [M,L] bool -> [M,H,Dv] float64."""
    h, hkv = q.shape[1], k.shape[1]
    q64, k64, v64 = q.double(), k.double(), v.double()
    k64 = k64.repeat_interleave(h // hkv, dim=1)
    v64 = v64.repeat_interleave(h // hkv, dim=1)
    if logit_cap <= 0 and sinks is None:
        out = F.scaled_dot_product_attention(
            q64.transpose(0, 1), k64.transpose(0, 1), v64.transpose(0, 1),
            attn_mask=mask.unsqueeze(0), scale=scale,
        )
        return out.transpose(0, 1)
    m, L = mask.shape
    out = torch.zeros(m, h, v.shape[-1], dtype=torch.float64)
    for i in range(m):
        for hh in range(h):
            logits = []
            for j in range(L):
                s = float(q64[i, hh] @ k64[j, hh]) * scale
                if logit_cap > 0:
                    s = logit_cap * math.tanh(s / logit_cap)
                logits.append(s if mask[i, j] else -math.inf)
            extra = [float(sinks[hh])] if sinks is not None else []
            mx = max(logits + extra)
            w = [math.exp(s - mx) if s != -math.inf else 0.0 for s in logits]
            denom = sum(w) + sum(math.exp(s - mx) for s in extra)
            out[i, hh] = sum(w[j] * v64[j, hh] for j in range(L)) / denom
    return out


def _random_tree_mask(n, gen):
    """Valid draft tree over n nodes (node 0 the root): mask[i][j] = j is i or an ancestor of i."""
    parent = [-1] + [int(torch.randint(0, i, (1,), generator=gen)) for i in range(1, n)]
    mask = [[False] * n for _ in range(n)]
    for i in range(n):
        j = i
        while j != -1:
            mask[i][j] = True
            j = parent[j]
    return parent, mask


def _make_batch(seed, *, prefix_lens, ext_lens, h, hkv, d, dv, dtype):
    gen = torch.Generator().manual_seed(seed)
    bs = len(prefix_lens)
    seq_lens = [p + e for p, e in zip(prefix_lens, ext_lens)]
    num_slots = sum(seq_lens) + 7
    pool_len = max(seq_lens) + 3
    k_buffer = torch.randn(num_slots, hkv, d, generator=gen).to(dtype)
    v_buffer = torch.randn(num_slots, hkv, dv, generator=gen).to(dtype)
    perm = torch.randperm(num_slots, generator=gen)
    req_to_token = torch.zeros(bs + 2, pool_len, dtype=torch.int32)
    req_pool_indices = torch.randperm(bs + 2, generator=gen)[:bs]
    used = 0
    for i in range(bs):
        req_to_token[req_pool_indices[i], : seq_lens[i]] = perm[used : used + seq_lens[i]].int()
        used += seq_lens[i]
    total = sum(ext_lens)
    q = torch.randn(total, h, d, generator=gen).to(dtype)
    k_ext = torch.randn(total, hkv, d, generator=gen).to(dtype)
    v_ext = torch.randn(total, hkv, dv, generator=gen).to(dtype)
    starts = [sum(ext_lens[:i]) for i in range(bs)]
    # like forward_extend: this step's k/v are already in the cache at their slots
    for i in range(bs):
        slots = req_to_token[req_pool_indices[i], prefix_lens[i] : seq_lens[i]].long()
        k_buffer[slots] = k_ext[starts[i] : starts[i] + ext_lens[i]]
        v_buffer[slots] = v_ext[starts[i] : starts[i] + ext_lens[i]]
    return dict(
        gen=gen, q=q, k_ext=k_ext, v_ext=v_ext, k_buffer=k_buffer, v_buffer=v_buffer,
        req_to_token=req_to_token, req_pool_indices=req_pool_indices,
        seq_lens=torch.tensor(seq_lens, dtype=torch.int64),
        ext_lens=torch.tensor(ext_lens, dtype=torch.int32),
        starts=torch.tensor(starts, dtype=torch.int32),
    )


def _ref_extend(b, prefix_lens, ext_lens, *, scale, logit_cap=0.0, tree_blocks=None,
                is_causal=True, window=0, sinks=None):
    outs = []
    for i, (p, e) in enumerate(zip(prefix_lens, ext_lens)):
        slots = b["req_to_token"][b["req_pool_indices"][i], : p + e].long()
        k, v = b["k_buffer"][slots], b["v_buffer"][slots]
        s = int(b["starts"][i])
        mask = torch.tensor([
            [
                _visible(p + qi, kp, prefix=p, q_idx=qi,
                         tree_block=None if tree_blocks is None else tree_blocks[i],
                         is_causal=is_causal, window=window)
                for kp in range(p + e)
            ]
            for qi in range(e)
        ], dtype=torch.bool).reshape(e, p + e)
        outs.append(_ref_attention(b["q"][s : s + e], k, v, mask, scale, logit_cap, sinks))
    return torch.cat(outs)


def _run_extend(b, *, h, dv, scale, logit_cap=0.0, window=0, tree_mask=None, is_causal=True,
                sinks=None, pass_kv=True, dtype=None, via_torch_op=False):
    o = torch.empty(b["q"].shape[0], h, dv, dtype=dtype or b["q"].dtype)
    args = (
        b["q"], b["k_ext"] if pass_kv else None, b["v_ext"] if pass_kv else None, o,
        b["k_buffer"], b["v_buffer"], 1.0, 1.0, b["req_to_token"], b["req_pool_indices"],
        b["seq_lens"], b["ext_lens"], b["starts"], int(b["ext_lens"].max()), scale, logit_cap,
        False, window, None, sinks, tree_mask, is_causal,
    )
    if via_torch_op:
        torch.ops.sgl_kernel.extend_attention_cpu(*args)
    else:
        extend_attention_cpu(*args)
    return o


def _tol(dtype):
    return dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=1e-4, rtol=1e-4)


# --------------------------------------------------------------------------- extend / verify


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("h,hkv", [(4, 4), (8, 2)])
def test_extend_prefix_causal(seed, dtype, h, hkv):
    prefix, ext = [0, 5, 17], [4, 1, 9]
    b = _make_batch(seed, prefix_lens=prefix, ext_lens=ext, h=h, hkv=hkv, d=16, dv=16, dtype=dtype)
    out = _run_extend(b, h=h, dv=16, scale=0.25)
    ref = _ref_extend(b, prefix, ext, scale=0.25)
    torch.testing.assert_close(out.double(), ref, **_tol(dtype))


@pytest.mark.parametrize("seed", SEEDS)
def test_extend_kv_from_buffer_and_torch_op(seed):
    """k/v None (KV-shared layers) reads this step's keys from the cache; torch.ops entry point."""
    prefix, ext = [3, 0], [6, 5]
    b = _make_batch(seed, prefix_lens=prefix, ext_lens=ext, h=6, hkv=3, d=8, dv=12, dtype=torch.bfloat16)
    out = _run_extend(b, h=6, dv=12, scale=0.3, pass_kv=False, via_torch_op=True)
    ref = _ref_extend(b, prefix, ext, scale=0.3)
    torch.testing.assert_close(out.double(), ref, **_tol(torch.bfloat16))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", [1, 4, 8])
def test_target_verify_tree_mask(seed, n):
    prefix = [7, 2, 11]
    ext = [n] * 3
    b = _make_batch(seed, prefix_lens=prefix, ext_lens=ext, h=8, hkv=2, d=16, dv=16, dtype=torch.bfloat16)
    blocks = [_random_tree_mask(n, b["gen"])[1] for _ in prefix]
    flat = torch.tensor([x for blk in blocks for row in blk for x in row], dtype=torch.bool)
    out = _run_extend(b, h=8, dv=16, scale=0.25, tree_mask=flat, via_torch_op=True)
    ref = _ref_extend(b, prefix, ext, scale=0.25, tree_blocks=blocks)
    torch.testing.assert_close(out.double(), ref, **_tol(torch.bfloat16))
    # uint8 masks (the CUDA kernels accept either) behave the same
    out_u8 = _run_extend(b, h=8, dv=16, scale=0.25, tree_mask=flat.to(torch.uint8))
    torch.testing.assert_close(out_u8, out)


@pytest.mark.parametrize("seed", SEEDS)
def test_verify_batch_invariant(seed):
    """A verify step over several requests (one batched pass, keys padded to the longest) gives each
    request bit for bit what it gets alone: a draft beside a request does not change its tokens."""
    n, prefix = 6, [40, 3, 17, 25]
    b = _make_batch(seed, prefix_lens=prefix, ext_lens=[n] * len(prefix), h=8, hkv=2, d=16, dv=16,
                    dtype=torch.bfloat16)
    blocks = [_random_tree_mask(n, b["gen"])[1] for _ in prefix]
    flat = torch.tensor([x for blk in blocks for row in blk for x in row], dtype=torch.bool)
    together = _run_extend(b, h=8, dv=16, scale=0.25, tree_mask=flat)
    for i in range(len(prefix)):
        one = dict(b, q=b["q"][i * n:(i + 1) * n], req_pool_indices=b["req_pool_indices"][i:i + 1],
                   seq_lens=b["seq_lens"][i:i + 1], ext_lens=b["ext_lens"][i:i + 1],
                   starts=torch.zeros(1, dtype=torch.int32), k_ext=b["k_ext"][i * n:(i + 1) * n],
                   v_ext=b["v_ext"][i * n:(i + 1) * n])
        alone = _run_extend(one, h=8, dv=16, scale=0.25, tree_mask=flat[i * n * n:(i + 1) * n * n])
        assert torch.equal(alone, together[i * n:(i + 1) * n]), f"request {i}"


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("pass_kv", [True, False])
def test_verify_rows_equal_decode_rows(seed, pass_kv, monkeypatch):
    """With SSR_CPU_EXACT_VERIFY=1, every row of a tree verify equals, bit for bit, the decode step of
    its token once its path was accepted (the cached prefix, then its ancestors, then itself), with
    realistic sizes in bf16: attention in the verify pass cannot change a greedy token."""
    from ssr_sglang.cpu import attention_ops

    monkeypatch.setattr(attention_ops, "EXACT_VERIFY", True)
    n, prefix = 8, [300, 57, 610]
    h, hkv, d = 9, 3, 64
    b = _make_batch(seed, prefix_lens=prefix, ext_lens=[n] * len(prefix), h=h, hkv=hkv, d=d, dv=d,
                    dtype=torch.bfloat16)
    trees = [_random_tree_mask(n, b["gen"]) for _ in prefix]
    flat = torch.tensor([x for _, blk in trees for row in blk for x in row], dtype=torch.bool)
    verify = _run_extend(b, h=h, dv=d, scale=0.125, tree_mask=flat, pass_kv=pass_kv)
    rows, lens, queries = [], [], []
    for i, (p, (_, blk)) in enumerate(zip(prefix, trees)):
        slots = b["req_to_token"][b["req_pool_indices"][i]].tolist()
        for r in range(n):
            path = [j for j in range(n) if blk[r][j]]  # ancestors-or-self, in position order
            rows.append(slots[:p] + [slots[p + j] for j in path])
            lens.append(p + len(path))
            queries.append(i * n + r)
    for row, n, qi in zip(rows, lens, queries):  # each token's decode step alone (batch 1)
        out = torch.empty(1, h, d, dtype=torch.bfloat16)
        decode_attention_cpu(b["q"][qi:qi + 1], b["k_buffer"], b["v_buffer"], 1.0, 1.0, out, None, None,
                             torch.zeros(1, dtype=torch.int64), torch.empty(0),
                             torch.tensor([row], dtype=torch.int32), torch.arange(1), torch.tensor([n]),
                             0.125, 0.0)
        assert torch.equal(out, verify[qi:qi + 1]), f"row {qi}"
    monkeypatch.setattr(attention_ops, "EXACT_VERIFY", False)  # the default path is close, not exact
    shared = _run_extend(b, h=h, dv=d, scale=0.125, tree_mask=flat, pass_kv=pass_kv)
    torch.testing.assert_close(shared, verify, **_tol(torch.bfloat16))


@pytest.mark.parametrize("cached", [0, 37])
def test_exact_prefill_rows_equal_decode_rows(cached, monkeypatch):
    """With SSR_CPU_EXACT_VERIFY=1 every prompt token's prefill attention equals, bit for bit, its
    decode step's, at SmolLM2's head sizes, whether the prompt is prefilled whole or after a cached
    prefix of ``cached`` tokens, and beside another prompt: its KV does not depend on what the prefix
    cache held when it arrived or on what was prefilled with it."""
    from ssr_sglang.cpu import attention_ops

    monkeypatch.setattr(attention_ops, "EXACT_VERIFY", True)
    h, hkv, d, length = 9, 3, 64, 120
    b = _make_batch(3, prefix_lens=[cached, 20], ext_lens=[length - cached, 50], h=h, hkv=hkv, d=d, dv=d,
                    dtype=torch.bfloat16)
    out = _run_extend(b, h=h, dv=d, scale=0.125)
    row = b["req_pool_indices"][:1]
    for r in range(length - cached):  # each token's decode step alone, over the keys before it and itself
        one = torch.empty(1, h, d, dtype=torch.bfloat16)
        decode_attention_cpu(b["q"][r:r + 1], b["k_buffer"], b["v_buffer"], 1.0, 1.0, one, None, None,
                             torch.zeros(1, dtype=torch.int64), torch.empty(0), b["req_to_token"], row,
                             torch.tensor([cached + r + 1]), 0.125, 0.0)
        assert torch.equal(one, out[r:r + 1]), f"row {r}"


def test_exact_rows_do_not_depend_on_padding(monkeypatch):
    """In exact mode a query's attention beside a longer one (its keys end-padded in a shared product
    by default) equals, bit for bit, the query alone, at SmolLM2's head sizes (the padded product's
    float32 result differs from the lone one for most lengths, and after rounding to bf16 now and then,
    which is enough to change a greedy token over 30 layers)."""
    from ssr_sglang.cpu import attention_ops

    gen = torch.Generator().manual_seed(0)
    cases = []
    for n in range(20, 120, 5):
        for pad in (1, 3, 7):
            q = torch.randn(2, 9, 64, generator=gen).bfloat16().float()
            k, v = (torch.randn(2, n + pad, 3, 64, generator=gen).bfloat16().float() for _ in range(2))
            cases.append((q, k, v, n, pad))

    def differing() -> int:
        bad = 0
        for q, k, v, n, pad in cases:
            alone = attention_ops._attend_one(q[:1], k[:1, :n], v[:1, :n], torch.tensor([n]), 0.125, 0.0, None)
            beside = attention_ops._attend_one(q, k, v, torch.tensor([n, n + pad]), 0.125, 0.0, None)[:1]
            bad += not torch.equal(alone, beside)
        return bad

    monkeypatch.setattr(attention_ops, "EXACT_VERIFY", False)
    assert differing() > 0  # the default shared product: padding changes a rounding now and then
    monkeypatch.setattr(attention_ops, "EXACT_VERIFY", True)
    assert differing() == 0


def test_exact_rows_do_not_depend_on_batch_size(monkeypatch):
    """In exact mode eight queries of one length in one call equal, bit for bit, each query alone (a
    batched matmul's result for one problem can depend on the batch size)."""
    from ssr_sglang.cpu import attention_ops

    gen = torch.Generator().manual_seed(1)
    cases = []
    for n in range(21, 300, 7):
        q = torch.randn(8, 9, 64, generator=gen).bfloat16().float()
        k, v = (torch.randn(8, n, 3, 64, generator=gen).bfloat16().float() for _ in range(2))
        cases.append((q, k, v, torch.full((8,), n)))

    def differing() -> int:
        return sum(not torch.equal(attention_ops._attend_one(q, k, v, lens, 0.125, 0.0, None),
                                   torch.cat([attention_ops._attend_one(q[i:i + 1], k[i:i + 1], v[i:i + 1],
                                                                        lens[i:i + 1], 0.125, 0.0, None)
                                              for i in range(8)]))
                   for q, k, v, lens in cases)

    # Whether the default path differs depends on the CPU's matmul kernels (it did on an AVX2 EPYC, not on
    # a Xeon with AMX for these shapes), so only the exact mode's guarantee is asserted.
    monkeypatch.setattr(attention_ops, "EXACT_VERIFY", True)
    assert differing() == 0


def test_decode_batch_invariant():
    seq_lens = [1, 30, 7, 64]
    gen, q, k_cache, v_cache, k_new, v_new, loc, r2t, rpi = _decode_case(
        5, h=8, hkv=2, d=16, dv=8, dtype=torch.bfloat16, seq_lens=seq_lens)
    together = torch.empty(len(seq_lens), 8, 8, dtype=torch.bfloat16)
    decode_attention_cpu(q, k_cache, v_cache, 1.0, 1.0, together, k_new, v_new, loc, torch.empty(0), r2t, rpi,
                         torch.tensor(seq_lens), 0.25, 0.0)
    for i, s in enumerate(seq_lens):
        alone = torch.empty(1, 8, 8, dtype=torch.bfloat16)
        decode_attention_cpu(q[i:i + 1], k_cache, v_cache, 1.0, 1.0, alone, None, None, loc[i:i + 1],
                             torch.empty(0), r2t, rpi[i:i + 1], torch.tensor([s]), 0.25, 0.0)
        assert torch.equal(alone, together[i:i + 1]), f"request {i}"


@pytest.mark.parametrize("seed", SEEDS)
def test_extend_logit_cap_and_sinks(seed):
    prefix, ext = [3, 1], [3, 2]
    b = _make_batch(seed, prefix_lens=prefix, ext_lens=ext, h=4, hkv=2, d=8, dv=8, dtype=torch.float32)
    out = _run_extend(b, h=4, dv=8, scale=1.0, logit_cap=2.5)
    ref = _ref_extend(b, prefix, ext, scale=1.0, logit_cap=2.5)
    torch.testing.assert_close(out.double(), ref, **_tol(torch.float32))
    sinks = torch.randn(4, generator=b["gen"])
    out = _run_extend(b, h=4, dv=8, scale=0.5, sinks=sinks)
    ref = _ref_extend(b, prefix, ext, scale=0.5, sinks=sinks)
    torch.testing.assert_close(out.double(), ref, **_tol(torch.float32))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("is_causal", [True, False])
def test_extend_sliding_window_and_noncausal(seed, is_causal):
    prefix, ext = [9, 0, 4], [6, 7, 3]
    b = _make_batch(seed, prefix_lens=prefix, ext_lens=ext, h=4, hkv=1, d=16, dv=16, dtype=torch.float32)
    for window in (0, 4):  # 0: off; 4 = layer.sliding_window_size (3) + 1
        out = _run_extend(b, h=4, dv=16, scale=0.25, window=window, is_causal=is_causal)
        ref = _ref_extend(b, prefix, ext, scale=0.25, window=window, is_causal=is_causal)
        torch.testing.assert_close(out.double(), ref, **_tol(torch.float32))


@pytest.mark.parametrize("window", [9, 0])  # the per-request path (a window), the batched one (none)
def test_extend_query_chunking(monkeypatch, window):
    """Long extends are processed in query chunks; results must not depend on the chunk size."""
    import ssr_sglang.cpu.attention_ops as attn

    prefix, ext = [5, 2], [40, 40]
    b = _make_batch(0, prefix_lens=prefix, ext_lens=ext, h=4, hkv=2, d=8, dv=8, dtype=torch.float32)
    assert attn._batchable(ext, b["starts"].tolist(), b["seq_lens"].tolist(), 4)
    full = _run_extend(b, h=4, dv=8, scale=0.3, window=window)
    calls = []
    monkeypatch.setattr(attn, "_attend_heads", lambda q, *a: calls.append(q.shape[1]) or _ATTEND(q, *a))
    monkeypatch.setattr(attn, "_CHUNK_SCORE_ELEMS", 2 * 4 * 45 * 3)  # 3 queries per chunk (6 per request alone)
    chunked = _run_extend(b, h=4, dv=8, scale=0.3, window=window)
    assert max(calls) <= 6 and len(calls) >= 14, calls
    torch.testing.assert_close(chunked, full)
    ref = _ref_extend(b, prefix, ext, scale=0.3, window=window)
    torch.testing.assert_close(full.double(), ref, **_tol(torch.float32))


def test_extend_layers_of_one_pass_share_a_plan_and_a_new_pass_makes_its_own():
    """The layers of one forward pass (the same index tensors, a KV buffer per layer) read one plan of
    slots and visibility; a pass that reuses a buffer, or index tensors changed in place, gets a new one,
    and every layer's output is what it is computed alone."""
    import ssr_sglang.cpu.attention_ops as attn

    prefix, n = [7, 2, 11], 5
    b = _make_batch(3, prefix_lens=prefix, ext_lens=[n] * 3, h=4, hkv=2, d=8, dv=8, dtype=torch.float32)
    blocks = [_random_tree_mask(n, b["gen"])[1] for _ in prefix]
    flat = torch.tensor([x for blk in blocks for row in blk for x in row], dtype=torch.bool)
    layer2 = dict(b, k_buffer=b["k_buffer"].flip(0).contiguous(), v_buffer=b["v_buffer"].flip(0).contiguous())
    attn._plan = None
    out1 = _run_extend(b, h=4, dv=8, scale=0.25, tree_mask=flat, pass_kv=False)
    plan = attn._plan
    out2 = _run_extend(layer2, h=4, dv=8, scale=0.25, tree_mask=flat, pass_kv=False)
    assert attn._plan is plan  # the second layer of the pass
    torch.testing.assert_close(out2.double(), _ref_extend(layer2, prefix, [n] * 3, scale=0.25, tree_blocks=blocks),
                               **_tol(torch.float32))
    assert torch.equal(_run_extend(b, h=4, dv=8, scale=0.25, tree_mask=flat, pass_kv=False), out1)
    assert attn._plan is not plan  # layer 1's buffer again: a new pass
    # index tensors changed in place (the same objects) before the next layer: the plan follows the values
    b["req_pool_indices"][:] = b["req_pool_indices"].flip(0).clone()
    b["seq_lens"][:] = b["seq_lens"].flip(0).clone()
    plan = attn._plan
    moved = dict(layer2, req_pool_indices=b["req_pool_indices"], seq_lens=b["seq_lens"])
    out3 = _run_extend(moved, h=4, dv=8, scale=0.25, tree_mask=flat, pass_kv=False)
    assert attn._plan is not plan
    ref = _ref_extend(moved, prefix[::-1], [n] * 3, scale=0.25, tree_blocks=blocks)
    torch.testing.assert_close(out3.double(), ref, **_tol(torch.float32))


def test_extend_fp8_cache_scales_and_loose_scalars():
    """fp8 KV buffers are dequantised with key/value scales; int logit_cap and None max_len work."""
    prefix, ext = [4, 2], [3, 2]
    b = _make_batch(5, prefix_lens=prefix, ext_lens=ext, h=4, hkv=2, d=8, dv=8, dtype=torch.float32)
    ks, vs = 0.5, 2.0
    deq_k = (b["k_buffer"] / ks).to(torch.float8_e4m3fn)
    deq_v = (b["v_buffer"] / vs).to(torch.float8_e4m3fn)
    o = torch.empty(5, 4, 8)
    torch.ops.sgl_kernel.extend_attention_cpu(
        b["q"], None, None, o, deq_k, deq_v, ks, vs, b["req_to_token"], b["req_pool_indices"],
        b["seq_lens"], b["ext_lens"], b["starts"], None, 0.3, 0, False, 0, None, None, None, True)
    b["k_buffer"], b["v_buffer"] = deq_k.float() * ks, deq_v.float() * vs
    torch.testing.assert_close(o.double(), _ref_extend(b, prefix, ext, scale=0.3), **_tol(torch.float32))


def test_extend_rejects_cross_attention():
    b = _make_batch(0, prefix_lens=[1], ext_lens=[1], h=2, hkv=2, d=4, dv=4, dtype=torch.float32)
    o = torch.empty(1, 2, 4)
    with pytest.raises(NotImplementedError, match="cross attention"):
        extend_attention_cpu(b["q"], b["k_ext"], b["v_ext"], o, b["k_buffer"], b["v_buffer"], 1.0, 1.0,
                             b["req_to_token"], b["req_pool_indices"], b["seq_lens"], b["ext_lens"],
                             b["starts"], 1, 1.0, 0.0, True, 0, torch.tensor([3]), None, None, False)


# --------------------------------------------------------------------------- decode


def _decode_case(seed, *, h, hkv, d, dv, dtype, seq_lens):
    gen = torch.Generator().manual_seed(seed)
    bs = len(seq_lens)
    num_slots = sum(seq_lens) + 5
    k_cache = torch.randn(num_slots, hkv, d, generator=gen).to(dtype)
    v_cache = torch.randn(num_slots, hkv, dv, generator=gen).to(dtype)
    perm = torch.randperm(num_slots, generator=gen)
    req_to_token = torch.zeros(bs + 1, max(seq_lens) + 2, dtype=torch.int32)
    rpi = torch.randperm(bs + 1, generator=gen)[:bs]
    used = 0
    for i, s in enumerate(seq_lens):
        req_to_token[rpi[i], :s] = perm[used : used + s].int()
        used += s
    loc = torch.stack([req_to_token[rpi[i], s - 1].long() for i, s in enumerate(seq_lens)])
    q = torch.randn(bs, h, d, generator=gen).to(dtype)
    k_new = torch.randn(bs, hkv, d, generator=gen).to(dtype)
    v_new = torch.randn(bs, hkv, dv, generator=gen).to(dtype)
    return gen, q, k_cache, v_cache, k_new, v_new, loc, req_to_token, rpi


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("h,hkv", [(4, 4), (8, 2)])
@pytest.mark.parametrize("logit_cap,window", [(0.0, 0), (3.0, 0), (0.0, 5)])
def test_decode(seed, dtype, h, hkv, logit_cap, window):
    seq_lens = [1, 9, 23]
    gen, q, k_cache, v_cache, k_new, v_new, loc, r2t, rpi = _decode_case(
        seed, h=h, hkv=hkv, d=16, dv=8, dtype=dtype, seq_lens=seq_lens)
    out = torch.empty(len(seq_lens), h, 8, dtype=dtype)
    attn_logits = torch.empty(len(seq_lens), h, 8, 9)
    torch.ops.sgl_kernel.decode_attention_cpu(
        q, k_cache, v_cache, 1.0, 1.0, out, k_new, v_new, loc, attn_logits, r2t, rpi,
        torch.tensor(seq_lens), 0.25, logit_cap, False, window, None, None)
    # the new token's k/v were written into the cache at loc
    torch.testing.assert_close(k_cache[loc], k_new)
    torch.testing.assert_close(v_cache[loc], v_new)
    for i, s in enumerate(seq_lens):
        slots = r2t[rpi[i], :s].long()
        mask = torch.tensor([[_visible(s - 1, kp, prefix=s, q_idx=0, tree_block=None, is_causal=True,
                                       window=window) for kp in range(s)]])
        ref = _ref_attention(q[i : i + 1], k_cache[slots], v_cache[slots], mask, 0.25, logit_cap)
        torch.testing.assert_close(out[i : i + 1].double(), ref, **_tol(dtype))


def test_decode_without_new_kv_and_sinks():
    seq_lens = [4, 6]
    gen, q, k_cache, v_cache, _, _, loc, r2t, rpi = _decode_case(
        3, h=4, hkv=2, d=8, dv=8, dtype=torch.float32, seq_lens=seq_lens)
    before = k_cache.clone()
    sinks = torch.randn(4, generator=gen)
    out = torch.empty(2, 4, 8)
    decode_attention_cpu(q, k_cache, v_cache, 1.0, 1.0, out, None, None, loc, torch.empty(0), r2t, rpi,
                         torch.tensor(seq_lens), 0.5, 0.0, False, 0, None, sinks)
    torch.testing.assert_close(k_cache, before)
    for i, s in enumerate(seq_lens):
        slots = r2t[rpi[i], :s].long()
        ref = _ref_attention(q[i : i + 1], k_cache[slots], v_cache[slots], torch.ones(1, s, dtype=torch.bool),
                             0.5, sinks=sinks)
        torch.testing.assert_close(out[i : i + 1].double(), ref, **_tol(torch.float32))


# --------------------------------------------------------------------------- tree ops


def _random_tree(n, gen_py, max_children=None, max_depth=None):
    parent, depth, kids = [-1], [0], {0: 0}
    for i in range(1, n):
        options = [p for p in range(i)
                   if (max_children is None or kids.get(p, 0) < max_children)
                   and (max_depth is None or depth[p] < max_depth)]
        p = gen_py.choice(options)
        parent.append(p)
        depth.append(depth[p] + 1)
        kids[p] = kids.get(p, 0) + 1
    return parent, depth


def _links_from_parents(parent):
    n = len(parent)
    nxt, sib = [-1] * n, [-1] * n
    for i in range(n):
        children = [k for k in range(n) if parent[k] == i]
        if children:
            nxt[i] = children[0]
        if parent[i] >= 0:
            later = [k for k in range(i + 1, n) if parent[k] == parent[i]]
            sib[i] = later[0] if later else -1
    return nxt, sib


@pytest.mark.parametrize("seed", SEEDS + [3, 4, 5])
def test_verify_tree_greedy(seed):
    rng = random.Random(seed)
    bs, n, steps, vocab = 4, 8, 5, 4
    parents = [_random_tree(n, rng, max_children=vocab)[0] for _ in range(bs)]
    cand = torch.zeros(bs, n, dtype=torch.int64)
    for b in range(bs):  # distinct tokens among siblings, so the accepted path is unique
        for p in range(n):
            children = [k for k in range(n) if parents[b][k] == p]
            for k, tok in zip(children, rng.sample(range(vocab), len(children))):
                cand[b, k] = tok
    links = [_links_from_parents(p) for p in parents]
    ridx = torch.arange(bs * n).view(bs, n)
    nxt = torch.tensor([l[0] for l in links])
    sib = torch.tensor([l[1] for l in links])
    target = torch.randint(0, vocab, (bs, n), generator=torch.Generator().manual_seed(seed))
    predicts = torch.full((bs * n,), -7, dtype=torch.int32)
    accept_index = torch.full((bs, steps), -1, dtype=torch.int32)
    accept_num = torch.full((bs,), -3, dtype=torch.int32)
    ops.PYTHON_OPS["verify_tree_greedy_cpu"](
        predicts=predicts, accept_index=accept_index, accept_token_num=accept_num, candidates=cand,
        retrive_index=ridx, retrive_next_token=nxt, retrive_next_sibling=sib, target_predict=target)

    exp_pred = torch.full((bs * n,), -7, dtype=torch.int32)
    exp_acc = torch.full((bs, steps), -1, dtype=torch.int32)
    for b in range(bs):
        # brute force: among all root paths whose every token matches the target at its parent,
        # the longest (capped at steps-1 drafts) is the accepted one.
        best = [0]
        for node in range(n):
            path = [node]
            while path[-1] != 0:
                path.append(parents[b][path[-1]])
            path.reverse()
            ok = all(cand[b, path[t + 1]] == target[b, path[t]] for t in range(len(path) - 1))
            if ok and len(path) > len(best) and len(path) <= steps:
                best = path
        for t, node in enumerate(best):
            exp_acc[b, t] = b * n + node
            exp_pred[b * n + node] = target[b, node]
        assert accept_num[b] == len(best) - 1
    torch.testing.assert_close(accept_index, exp_acc)
    torch.testing.assert_close(predicts, exp_pred)
    # the torch.ops entry point does the same
    p2, a2, n2 = torch.full_like(predicts, -7), torch.full_like(accept_index, -1), torch.zeros_like(accept_num)
    torch.ops.sgl_kernel.verify_tree_greedy_cpu(p2, a2, n2, cand, ridx, nxt, sib, target)
    torch.testing.assert_close((p2, a2, n2), (predicts, accept_index, accept_num))


def _brute_reconstruct(mask, seq_len, n, b):
    pos, nxt, sib = [], [], []
    for t in range(n):
        anc = [j for j in range(t) if mask[t][j]]
        pos.append(seq_len + len(anc))
        children = [k for k in range(t + 1, n) if mask[k][t]]
        nxt.append(children[0] if children else -1)
        p = max(anc) if anc else -1
        s = -1
        if p >= 0:
            for k in range(t + 1, n):
                # k is a sibling if p is an ancestor of k and nothing between p and k is
                if mask[k][p] and not any(mask[k][j] for j in range(p + 1, k)):
                    s = k
                    break
        sib.append(s)
    return pos, [b * n + t for t in range(n)], nxt, sib


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", ["tree", "random"])
def test_reconstruct_indices_from_tree_mask(seed, kind):
    gen = torch.Generator().manual_seed(seed)
    bs, n = 3, 7
    masks = []
    for _ in range(bs):
        if kind == "tree":
            masks.append(_random_tree_mask(n, gen)[1])
        else:
            masks.append((torch.rand(n, n, generator=gen) < 0.4).tolist())
    flat = torch.tensor([x for m in masks for row in m for x in row], dtype=torch.bool)
    seq = torch.randint(0, 50, (bs,), generator=gen)
    positions = torch.full((bs * n,), -9, dtype=torch.int64)
    ri, rn, rs = (torch.full((bs, n), -9, dtype=torch.int64) for _ in range(3))
    ops.PYTHON_OPS["reconstruct_indices_from_tree_mask"](flat, seq, positions, ri, rn, rs, bs, n)
    for b in range(bs):
        pos, idx, nxt, sib = _brute_reconstruct(masks[b], int(seq[b]), n, b)
        assert positions[b * n : (b + 1) * n].tolist() == pos
        assert ri[b].tolist() == idx
        assert rn[b].tolist() == nxt
        assert rs[b].tolist() == sib


def _eagle_inputs(parent, topk, depth):
    """Encode a draft tree as EAGLE's (parent_list row, selected_index row)."""
    n = len(parent)
    width = topk * (depth - 1) + 1
    slot = {0: 0}  # node -> slot in parent_list whose children ids are slot*topk + c
    ids = [None] * n
    parent_list = [-1] * width
    next_slot = 1
    for i in range(1, n):
        p = parent[i]
        if p not in slot:
            slot[p] = next_slot
            parent_list[next_slot] = ids[p]
            next_slot += 1
        c = sum(1 for k in range(1, i) if parent[k] == p)
        ids[i] = slot[p] * topk + c
    return parent_list, ids[1:]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", [0, 1])
def test_build_tree_kernel_efficient(seed, mode):
    rng = random.Random(seed)
    bs, n, topk, depth = 3, 7, 3, 4
    trees = [_random_tree(n, rng, max_children=topk, max_depth=depth - 1) for _ in range(bs)]
    enc = [_eagle_inputs(p, topk, depth) for p, _ in trees]
    parent_list = torch.tensor([e[0] for e in enc], dtype=torch.int64)
    selected = torch.tensor([e[1] for e in enc], dtype=torch.int64)
    seq = torch.tensor([rng.randint(1, 6) for _ in range(bs)], dtype=torch.int64)
    if mode == 1:
        mask = torch.zeros(bs * n * n, dtype=torch.bool)
    else:
        mask = torch.ones(int((seq.sum() + bs * n) * n), dtype=torch.bool)  # prefix pre-filled True
    positions = torch.zeros(bs * n, dtype=torch.int64)
    ri = torch.zeros(bs, n, dtype=torch.int64)
    rn, rs = torch.full((bs, n), -1, dtype=torch.int64), torch.full((bs, n), -1, dtype=torch.int64)
    torch.ops.sgl_kernel.build_tree_kernel_efficient_cpu(
        parent_list, selected, seq, mask, positions, ri, rn, rs, topk, depth, n, mode)
    off = 0
    for b, (parent, dep) in enumerate(trees):
        nxt, sib = _links_from_parents(parent)
        assert rn[b].tolist() == nxt
        assert rs[b].tolist() == sib
        assert ri[b].tolist() == [b * n + t for t in range(n)]
        assert positions[b * n : (b + 1) * n].tolist() == [int(seq[b]) + d for d in dep]
        width = n if mode == 1 else int(seq[b]) + n
        rows = mask[off : off + n * width].view(n, width)
        off += n * width
        if mode == 0:
            assert rows[:, : int(seq[b])].all()
        block = rows[:, width - n :]
        for t in range(n):
            anc = set()
            j = t
            while j != -1:
                anc.add(j)
                j = parent[j]
            assert block[t].tolist() == [j in anc for j in range(n)]


# --------------------------------------------------------------------------- cache locations


def _pool(seed, bs=4, pool_len=32):
    gen = torch.Generator().manual_seed(seed)
    r2t = torch.randint(0, 10_000, (bs + 3, pool_len), generator=gen, dtype=torch.int32)
    rpi = torch.randperm(bs + 3, generator=gen)[:bs]
    start = torch.randint(0, 12, (bs,), generator=gen)
    end = start + torch.randint(0, 9, (bs,), generator=gen)
    return gen, r2t, rpi, start, end


@pytest.mark.parametrize("seed", SEEDS)
def test_assign_req_to_token_pool(seed):
    gen, r2t, rpi, start, end = _pool(seed)
    total = int((end - start).sum())
    locs = torch.randint(0, 10_000, (total,), generator=gen)
    exp = r2t.clone()
    o = 0
    for i in range(len(rpi)):
        for j in range(int(start[i]), int(end[i])):
            exp[rpi[i], j] = int(locs[o])
            o += 1
    ops.PYTHON_OPS["assign_req_to_token_pool_cpu"](rpi, r2t, start, end, locs, r2t.shape[1])
    assert torch.equal(r2t, exp)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("via_torch_op", [False, True])
def test_assign_extend_cache_locs(seed, via_torch_op):
    gen, r2t, rpi, start, end = _pool(seed)
    total = int((end - start).sum())
    out = torch.full((total + 3,), -1, dtype=torch.int64)  # callers may over-allocate
    exp = out.clone()
    o = 0
    for i in range(len(rpi)):
        for j in range(int(start[i]), int(end[i])):
            exp[o] = int(r2t[rpi[i], j])
            o += 1
    fn = torch.ops.sgl_kernel.assign_extend_cache_locs_cpu if via_torch_op else ops.PYTHON_OPS[
        "assign_extend_cache_locs_cpu"]
    fn(rpi, r2t, start.int(), end.int(), out, r2t.shape[1])
    assert torch.equal(out, exp)


@pytest.mark.parametrize("seed", SEEDS)
def test_assign_draft_cache_locs_contiguous(seed):
    gen, r2t, rpi, start, _ = _pool(seed)
    topk, steps = 2, 3
    out = torch.empty(len(rpi) * topk * steps, dtype=torch.int64)
    ops.PYTHON_OPS["assign_draft_cache_locs_contiguous_cpu"](rpi, r2t, start, out, r2t.shape[1], topk, steps)
    exp = []
    for i in range(len(rpi)):
        for j in range(topk * steps):
            exp.append(int(r2t[rpi[i], int(start[i]) + j]))
    assert out.tolist() == exp


@pytest.mark.parametrize("seed", SEEDS)
def test_build_draft_decode_metadata(seed):
    gen, r2t, rpi, start, _ = _pool(seed)
    topk, steps = 3, 2
    pool_len = r2t.shape[1]
    out = ops.PYTHON_OPS["build_draft_decode_metadata_cpu"](r2t, rpi, start, topk, steps, pool_len)
    assert out.shape == (len(rpi) * topk, pool_len) and out.dtype == r2t.dtype
    for b in range(len(rpi)):
        sl = int(start[b])
        for t in range(topk):
            row = out[b * topk + t]
            exp = [int(r2t[rpi[b], j]) for j in range(sl)] + [
                int(r2t[rpi[b], sl + t * steps + s]) for s in range(steps)]
            assert row[: sl + steps].tolist() == exp


@pytest.mark.parametrize("seed", SEEDS)
def test_fill_bonus_tokens(seed):
    gen = torch.Generator().manual_seed(seed)
    bs, stride = 5, 4
    tokens = torch.randint(0, 1000, (bs, stride), generator=gen, dtype=torch.int32)
    lens = torch.randint(1, stride + 1, (bs,), generator=gen, dtype=torch.int32)
    bonus = torch.empty(bs, dtype=torch.int32)
    ops.PYTHON_OPS["fill_bonus_tokens_cpu"](tokens, lens, bonus, stride)
    assert bonus.tolist() == [int(tokens[i, int(lens[i]) - 1]) for i in range(bs)]


@pytest.mark.parametrize("seed", SEEDS)
def test_fill_accept_out_cache_loc(seed):
    gen = torch.Generator().manual_seed(seed)
    bs, steps, n = 4, 3, 5
    out_cache_loc = torch.randint(0, 10_000, (bs * n,), generator=gen)
    accept_index = torch.randint(0, bs * n, (bs, steps), generator=gen, dtype=torch.int32)
    accept_index[torch.rand(bs, steps, generator=gen) < 0.4] = -1
    dst = torch.full((bs * steps,), -5, dtype=torch.int64)
    ops.PYTHON_OPS["fill_accept_out_cache_loc_cpu"](accept_index, out_cache_loc, dst)
    exp = [int(out_cache_loc[i]) for i in accept_index.reshape(-1).tolist() if i != -1]
    assert dst.tolist() == exp + [-5] * (bs * steps - len(exp))


@pytest.mark.parametrize("seed", SEEDS)
def test_copy_all_layer_kv_cache(seed):
    gen = torch.Generator().manual_seed(seed)
    bufs = [torch.randn(12, 2, 4, generator=gen).to(torch.bfloat16), torch.randn(12, 3, generator=gen)]
    ptrs = torch.tensor([b.data_ptr() for b in bufs], dtype=torch.uint64)
    strides = torch.tensor([b.stride(0) * b.dtype.itemsize for b in bufs])
    src = torch.randperm(12, generator=gen)[:5]
    tgt = torch.randperm(12, generator=gen)[:5]  # may overlap src: all reads happen first
    if seed % 2:  # rows onto themselves (skipped), beside real moves
        rest = [int(i) for i in torch.randperm(12, generator=gen) if int(i) not in src[:2].tolist()]
        tgt = torch.cat([src[:2], torch.tensor(rest[:3])])
    expected = []
    for b in bufs:
        e = b.clone()
        vals = [b[int(s)].clone() for s in src]
        for t, v in zip(tgt, vals):
            e[int(t)] = v
        expected.append(e)
    ops.PYTHON_OPS["copy_all_layer_kv_cache_cpu"](ptrs, strides, tgt, src)
    for b, e in zip(bufs, expected):
        assert torch.equal(b, e)
    ops.PYTHON_OPS["copy_all_layer_kv_cache_cpu"](ptrs, strides, src[:3], src[:3])  # nothing moves
    for b, e in zip(bufs, expected):
        assert torch.equal(b, e)


def test_store_cache():
    k_cache, v_cache = torch.zeros(6, 2, 3), torch.zeros(6, 2, 3)
    k, v = torch.randn(2, 6), torch.randn(2, 6)
    idx = torch.tensor([4, 1])
    torch.ops.sgl_kernel.store_cache_cpu(k, v, k_cache, v_cache, idx, 6)
    assert torch.equal(k_cache.view(6, 6)[idx], k) and torch.equal(v_cache.view(6, 6)[idx], v)
    assert k_cache.view(6, 6)[[0, 2, 3, 5]].abs().sum() == 0


# --------------------------------------------------------------------------- registration


def test_registration():
    ops.register_torch_ops()  # idempotent
    for name in ["extend_attention_cpu", "decode_attention_cpu", "store_cache_cpu", *ops.PYTHON_OPS]:
        assert hasattr(torch.ops.sgl_kernel, name), name
    assert not hasattr(torch.ops.sgl_kernel, "convert_weight_packed")
    for name in ["copy_all_layer_kv_cache_cpu", "assign_req_to_token_pool_cpu",
                 "assign_extend_cache_locs_cpu", "assign_draft_cache_locs_contiguous_cpu",
                 "fill_bonus_tokens_cpu", "fill_accept_out_cache_loc_cpu", "verify_tree_greedy_cpu",
                 "build_tree_kernel_efficient_cpu", "build_draft_decode_metadata_cpu",
                 "reconstruct_indices_from_tree_mask"]:
        assert callable(ops.PYTHON_OPS[name])
    schema = str(torch.ops.sgl_kernel.decode_attention_cpu.default._schema)
    assert "Tensor(a!) k_cache" in schema and "Tensor(c!) output" in schema


def test_cache_loc_segment_past_row_end_spills_like_the_triton_kernel():
    """A request at the context limit: its verify block runs past the row; must not raise."""
    from ssr_sglang.cpu.ops import assign_extend_cache_locs_cpu, assign_req_to_token_pool_cpu

    table = torch.zeros(3, 8, dtype=torch.int32)
    assign_req_to_token_pool_cpu(torch.tensor([0]), table, torch.tensor([5]), torch.tensor([11]),
                                 torch.arange(1, 7, dtype=torch.int64), 8)
    assert table.view(-1)[5:11].tolist() == [1, 2, 3, 4, 5, 6]
    out = torch.zeros(6, dtype=torch.int64)
    assign_extend_cache_locs_cpu(torch.tensor([0]), table, torch.tensor([5]), torch.tensor([11]), out, 8)
    assert out.tolist() == [1, 2, 3, 4, 5, 6]
