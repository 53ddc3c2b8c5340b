"""Tests for the Gated DeltaNet stand-ins in :mod:`ssr_sglang.cpu.gdn_ops` (hybrid Qwen3.5 / Qwen3-Next).

References are independent of the code under test: the delta rule against transformers' chunked
torch fallback (a different algorithm: WY-form chunks) and a per-path replay written out here; the
convolution against ``torch.nn.functional.conv1d``; norms against transformers' Qwen3.5 modules; the
Qwen3-Next split against transformers' ``fix_query_key_value_ordering``; tree parents against the
tree as it was built.
"""

from __future__ import annotations

import random
import types

import pytest
import torch
import torch.nn.functional as F

from ssr_sglang.cpu import gdn_ops

SEEDS = [0, 1, 2]


@pytest.fixture(scope="module", autouse=True)
def _registered():
    gdn_ops.register_torch_ops()


def _qkv(gen, t, h, hv, k, v):
    q = torch.randn(1, t, h, k, generator=gen)
    kk = torch.randn(1, t, h, k, generator=gen)
    vv = torch.randn(1, t, hv, v, generator=gen)
    return q, kk, vv


# --------------------------------------------------------------------------- delta rule


@pytest.mark.parametrize("seed", SEEDS)
def test_chunk_rule_matches_transformers_chunked_fallback(seed):
    from transformers.models.qwen3_5.modeling_qwen3_5 import torch_chunk_gated_delta_rule

    gen = torch.Generator().manual_seed(seed)
    h, hv, kd, vd = 2, 4, 8, 6
    lens = [5, 70, 1]  # one sequence spans two of transformers' 64-token chunks
    total = sum(lens)
    q, k, v = _qkv(gen, total, h, hv, kd, vd)
    g = -torch.rand(1, total, hv, generator=gen)  # log decay < 0
    beta = torch.rand(1, total, hv, generator=gen)
    pool = torch.randn(6, hv, vd, kd, generator=gen) * 0.1
    slots = torch.tensor([4, 1, 2])
    pool[2] = 0
    before = pool.clone()
    cu = torch.tensor([0, lens[0], lens[0] + lens[1], total])
    o, _, _ = gdn_ops.chunk_gated_delta_rule_cpu(q=q, k=k, v=v, g=g, beta=beta, initial_state=pool, cu_seqlens=cu,
                                                 head_first=False, use_qk_l2norm_in_kernel=True,
                                                 initial_state_indices=slots)
    rep = hv // h
    for i, (s, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        init = before[slots[i]].transpose(-1, -2)[None]  # transformers: [B, H, K, V]
        ref_o, ref_state = torch_chunk_gated_delta_rule(
            q[:, s:e].repeat_interleave(rep, 2), k[:, s:e].repeat_interleave(rep, 2), v[:, s:e], g[:, s:e],
            beta[:, s:e], initial_state=init, output_final_state=True, use_qk_l2norm_in_kernel=True)
        torch.testing.assert_close(o[:, s:e], ref_o, atol=2e-4, rtol=2e-4)
        torch.testing.assert_close(pool[slots[i]], ref_state[0].transpose(-1, -2), atol=2e-4, rtol=2e-4)
    assert torch.equal(pool[[0, 3, 5]], before[[0, 3, 5]])  # other slots untouched


def _replay(h0, q, k, v, a, b, A_log, dt_bias, path, scale):
    """The delta rule written out per head over the tokens of ``path`` (float64), from state ``h0 [HV, V, K]``;
    returns the output of the last token and the state after it."""
    hv = v.shape[1]
    rep = hv // q.shape[1]
    h = h0.double().clone()
    out = None
    for t in path:
        out = torch.zeros(hv, v.shape[2], dtype=torch.float64)
        for j in range(hv):
            qj, kj = q[t, j // rep].double(), k[t, j // rep].double()
            qj = qj / torch.sqrt((qj ** 2).sum() + 1e-6) * scale
            kj = kj / torch.sqrt((kj ** 2).sum() + 1e-6)
            x = float(a[t, j]) + float(dt_bias[j])
            decay = torch.exp(torch.tensor(-torch.exp(A_log[j].double()).item() * F.softplus(torch.tensor(x)).item()))
            beta = torch.sigmoid(b[t, j].double())
            hj = h[j] * decay  # [V, K]
            err = v[t, j].double() - hj @ kj
            hj = hj + beta * torch.outer(err, kj)
            h[j] = hj
            out[j] = hj @ qj
    return out, h


@pytest.mark.parametrize("seed", SEEDS)
def test_target_verify_follows_each_tree_path(seed):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    h, hv, kd, vd = 1, 2, 8, 4
    sizes = [7, 5]
    parents = []
    for n in sizes:  # node 0 is the root; every other node's parent comes earlier
        parents.append([0] + [rng.randrange(0, i) for i in range(1, n)])
    width = max(sizes)
    total = width * len(sizes)  # SGLang lays verify rows out draft_token_num per request
    q, k, v = _qkv(gen, total, h, hv, kd, vd)
    a = torch.randn(total, hv, generator=gen)
    b = torch.randn(total, hv, generator=gen)
    A_log = torch.randn(hv, generator=gen) * 0.5
    dt_bias = torch.randn(hv, generator=gen)
    pool = torch.randn(5, hv, vd, kd, generator=gen) * 0.3
    before = pool.clone()
    slots = torch.tensor([3, 0])
    inter = torch.zeros(4, width, hv, vd, kd)
    inter_idx = torch.tensor([2, 0, 1, 3])
    parent_t = torch.zeros(len(sizes), width, dtype=torch.int64)
    for i, p in enumerate(parents):
        parent_t[i, : len(p)] = torch.tensor(p)
    cu = torch.tensor([0, width, 2 * width])
    sizes_full = [width] * len(sizes)  # pad the first request's tree with nodes under the root
    for i, n in enumerate(sizes):
        parents[i] = parents[i] + [0] * (width - n)
    o = torch.ops.sgl_kernel.fused_sigmoid_gating_delta_rule_update_cpu(
        A_log=A_log, dt_bias=dt_bias, q=q, k=k, v=v, a=a, b=b, initial_state_source=pool,
        initial_state_indices=slots, cu_seqlens=cu, use_qk_l2norm_in_kernel=True, softplus_beta=1.0,
        softplus_threshold=20.0, is_kda=False, disable_state_update=True, intermediate_states_buffer=inter,
        intermediate_state_indices=inter_idx, cache_steps=width, retrieve_parent_token=parent_t)
    assert torch.equal(pool, before)  # verify leaves the pool to the commit
    scale = kd ** -0.5
    for i, n in enumerate(sizes_full):
        for node in range(n):
            path, cur = [node], node
            while cur != 0:
                cur = parents[i][cur]
                path.append(cur)
            rows = [i * width + t for t in reversed(path)]
            ref_o, ref_h = _replay(before[slots[i]], q[0], k[0], v[0], a, b, A_log, dt_bias, rows, scale)
            torch.testing.assert_close(o[0, i * width + node].double(), ref_o, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(inter[inter_idx[i], node].double(), ref_h, atol=1e-4, rtol=1e-4)


def test_decode_steps_equal_prefill_exactly():
    """A token decoded computes bit for bit what it computes inside a prefill (verify and forked drafts
    rely on it): prefill through fused_gdn_gating + chunk rule, decode one token at a time."""
    gen = torch.Generator().manual_seed(7)
    h, hv, kd, vd, t = 2, 4, 8, 8, 9
    q, k, v = _qkv(gen, t, h, hv, kd, vd)
    q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
    a = torch.randn(t, hv, generator=gen).bfloat16()
    b = torch.randn(t, hv, generator=gen).bfloat16()
    A_log, dt_bias = torch.randn(hv, generator=gen), torch.randn(hv, generator=gen)
    pool_p = torch.zeros(2, hv, vd, kd)
    g, beta = torch.ops.sgl_kernel.fused_gdn_gating_cpu(A_log, a, b, dt_bias)
    o_p, _, _ = gdn_ops.chunk_gated_delta_rule_cpu(q=q, k=k, v=v, g=g, beta=beta, initial_state=pool_p,
                                                   cu_seqlens=torch.tensor([0, t]), head_first=False,
                                                   use_qk_l2norm_in_kernel=True, initial_state_indices=torch.tensor([1]))
    pool_d = torch.zeros(2, hv, vd, kd)
    outs = []
    for i in range(t):
        outs.append(torch.ops.sgl_kernel.fused_sigmoid_gating_delta_rule_update_cpu(
            A_log=A_log, dt_bias=dt_bias, q=q[:, i:i + 1], k=k[:, i:i + 1], v=v[:, i:i + 1], a=a[i:i + 1],
            b=b[i:i + 1], initial_state_source=pool_d, initial_state_indices=torch.tensor([1]),
            cu_seqlens=torch.tensor([0, 1]), use_qk_l2norm_in_kernel=True))
    assert torch.equal(torch.cat(outs, dim=1), o_p)
    assert torch.equal(pool_d, pool_p)


def test_gates():
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(5, 4, generator=gen) * 30  # past the softplus threshold too
    b = torch.randn(5, 4, generator=gen)
    A_log, dt_bias = torch.randn(4, generator=gen), torch.randn(4, generator=gen)
    g, beta = torch.ops.sgl_kernel.fused_gdn_gating_cpu(A_log, a, b, dt_bias)
    assert g.shape == beta.shape == (1, 5, 4) and g.dtype == torch.float32
    torch.testing.assert_close(g[0], -A_log.exp() * F.softplus(a + dt_bias))
    torch.testing.assert_close(beta[0], torch.sigmoid(b))


# --------------------------------------------------------------------------- short convolution


def _conv_ref(seq, weight, bias, silu=True):
    """``seq [dim, n]`` (already preceded by its W-1 history) -> ``[dim, n - W + 1]`` via F.conv1d."""
    out = F.conv1d(seq[None].double(), weight[:, None, :].double(), bias.double() if bias is not None else None,
                   groups=seq.shape[0])[0]
    return F.silu(out) if silu else out


@pytest.mark.parametrize("seed", SEEDS)
def test_conv_fn_matches_conv1d(seed):
    gen = torch.Generator().manual_seed(seed)
    dim, width = 6, 4
    lens = [1, 5, 9]
    x = torch.randn(dim, sum(lens), generator=gen)
    weight, bias = torch.randn(dim, width, generator=gen), torch.randn(dim, generator=gen)
    states = torch.randn(4, dim, width - 1, generator=gen)
    before = states.clone()
    slots, has_init = torch.tensor([2, 0, 3]), torch.tensor([True, False, True])
    cu = torch.tensor([0, 1, 6, 15])
    out = gdn_ops.causal_conv1d_fn_cpu(x, weight, bias, activation="silu", conv_states=states,
                                       has_initial_state=has_init, cache_indices=slots, query_start_loc=cu)
    for i, (s, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        hist = before[slots[i]] if has_init[i] else torch.zeros(dim, width - 1)
        seq = torch.cat([hist, x[:, s:e]], dim=1)
        torch.testing.assert_close(out[:, s:e].double(), _conv_ref(seq, weight, bias), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(states[slots[i]], seq[:, -(width - 1):])
    assert torch.equal(states[1], before[1])


@pytest.mark.parametrize("seed", SEEDS)
def test_conv_update_tree_windows_and_parents(seed):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    dim, width, n, batch = 5, 4, 7, 2
    trees = []
    nxt = torch.full((batch, n), -1, dtype=torch.int64)
    sib = torch.full((batch, n), -1, dtype=torch.int64)
    for bi in range(batch):
        parent = [0] + [rng.randrange(0, i) for i in range(1, n)]
        trees.append(parent)
        for node in range(1, n):  # first child / next sibling links, children in node order
            kids = [c for c in range(1, n) if parent[c] == parent[node]]
            if kids[0] == node:
                nxt[bi, parent[node]] = node
            at = kids.index(node)
            if at + 1 < len(kids):
                sib[bi, node] = kids[at + 1]
    x = torch.randn(batch, dim, n, generator=gen)
    weight, bias = torch.randn(dim, width, generator=gen), torch.randn(dim, generator=gen)
    states = torch.randn(3, dim, width - 1, generator=gen)
    before = states.clone()
    slots = torch.tensor([2, 0])
    inter = torch.zeros(3, n, dim, width - 1)
    inter_idx = torch.tensor([1, 2])
    got_parent = torch.zeros(batch, n, dtype=torch.int64)
    out = gdn_ops.causal_conv1d_update_cpu(x, states, weight, bias, "silu", conv_state_indices=slots,
                                           intermediate_conv_window=inter, intermediate_state_indices=inter_idx,
                                           retrieve_next_token=nxt, retrieve_next_sibling=sib,
                                           retrieve_parent_token=got_parent)
    for bi in range(batch):
        assert got_parent[bi].tolist() == trees[bi]
        for node in range(n):
            path, cur = [node], node
            while cur != 0:
                cur = trees[bi][cur]
                path.append(cur)
            seq = torch.cat([before[slots[bi]], x[bi][:, list(reversed(path))]], dim=1)
            torch.testing.assert_close(out[bi, :, node].double(), _conv_ref(seq, weight, bias)[:, -1],
                                       atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(inter[inter_idx[bi], node], seq[:, -(width - 1):])
        # the slot gets the last W-1 inputs in row order, as SGLang's kernel writes (the commit fixes it)
        torch.testing.assert_close(states[slots[bi]], torch.cat([before[slots[bi]], x[bi]], 1)[:, -(width - 1):])


def test_conv_decode_continues_prefill_exactly():
    gen = torch.Generator().manual_seed(5)
    dim, width, t = 4, 4, 6
    x = torch.randn(dim, t, generator=gen).bfloat16()
    weight, bias = torch.randn(dim, width, generator=gen).bfloat16(), None
    s1, s2 = torch.zeros(1, dim, width - 1, dtype=torch.bfloat16), torch.zeros(1, dim, width - 1, dtype=torch.bfloat16)
    full = gdn_ops.causal_conv1d_fn_cpu(x, weight, bias, "silu", s1, torch.tensor([False]), torch.tensor([0]),
                                        torch.tensor([0, t]))
    steps = [gdn_ops.causal_conv1d_update_cpu(x[:, i][None], s2, weight, bias, "silu",
                                              conv_state_indices=torch.tensor([0]))[0] for i in range(t)]
    assert torch.equal(torch.stack(steps, 1), full)
    assert torch.equal(s1, s2)


# --------------------------------------------------------------------------- norms, gates, splits


def test_gated_and_gemma_norms_match_transformers():
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5RMSNorm, Qwen3_5RMSNormGated

    gen = torch.Generator().manual_seed(11)
    x = torch.randn(6, 16, generator=gen).bfloat16()
    z = torch.randn(6, 16, generator=gen).bfloat16()
    gated = Qwen3_5RMSNormGated(16, eps=1e-6).bfloat16()
    with torch.no_grad():
        gated.weight.copy_(torch.randn(16, generator=gen))
        ref = gated(x, z)
    assert torch.equal(torch.ops.sgl_kernel.fused_rmsnorm_gated_cpu(x, gated.weight, z, 1e-6), ref)

    heads, hd = 3, 8
    q = torch.randn(4, heads * hd, generator=gen).bfloat16()
    k = torch.randn(4, hd, generator=gen).bfloat16()
    qn, kn = Qwen3_5RMSNorm(hd, eps=1e-6), Qwen3_5RMSNorm(hd, eps=1e-6)
    with torch.no_grad():
        qn.weight.copy_(torch.randn(hd, generator=gen))
        kn.weight.copy_(torch.randn(hd, generator=gen))
        ref_q, ref_k = qn(q.view(4, heads, hd)), kn(k.view(4, 1, hd))
    got_q, got_k = torch.ops.sgl_kernel.fused_qk_gemma_rmsnorm_cpu(q, k, qn.weight.data, kn.weight.data, 1e-6, hd)
    assert torch.equal(got_q.view(4, heads, hd), ref_q) and torch.equal(got_k.view(4, 1, hd), ref_k)

    gate = torch.randn(4, heads, hd, generator=gen).bfloat16()
    q_gate = torch.cat([q.view(4, heads, hd), gate], dim=-1).reshape(4, -1)  # per head [q | gate]
    g_q, g_k, g_gate = torch.ops.sgl_kernel.fused_qk_gemma_rmsnorm_with_gate_cpu(
        q_gate, k, qn.weight.data, kn.weight.data, 1e-6, hd, heads)
    assert torch.equal(g_q.view(4, heads, hd), ref_q) and torch.equal(g_k.view(4, 1, hd), ref_k)
    assert torch.equal(g_gate.view(4, heads, hd), gate)

    out = q.clone()
    torch.ops.sgl_kernel.fused_sigmoid_mul_cpu(out, gate)
    torch.testing.assert_close(out, (q.float() * torch.sigmoid(gate.float()).view(4, -1)).bfloat16())


def test_qkvzba_splits():
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet

    gen = torch.Generator().manual_seed(13)
    nk, nv, hk, hv, t = 2, 4, 3, 5, 6
    kd, vd = nk * hk, nv * hv
    qkvz = torch.randn(t, 2 * kd + 2 * vd, generator=gen)
    ba = torch.randn(t, 2 * nv, generator=gen)
    mixed, z, b, a = torch.ops.sgl_kernel.fused_qkvzba_split_reshape_cat_contiguous_cpu(qkvz, ba, nk, nv, hk, hv)
    q_, k_, v_, z_ = qkvz.split([kd, kd, vd, vd], dim=-1)
    assert torch.equal(mixed, torch.cat([q_, k_, v_], -1)) and torch.equal(z, z_.reshape(t, nv, hv))
    assert torch.equal(b, ba[:, :nv]) and torch.equal(a, ba[:, nv:])

    me = types.SimpleNamespace(num_k_heads=nk, num_v_heads=nv, head_k_dim=hk, head_v_dim=hv)
    rq, rk, rv, rz, rb, ra = Qwen3NextGatedDeltaNet.fix_query_key_value_ordering(me, qkvz[None], ba[None])
    mixed, z, b, a = torch.ops.sgl_kernel.fused_qkvzba_split_reshape_cat_cpu(qkvz, ba, nk, nv, hk, hv)
    ref_mixed = torch.cat([rq.reshape(t, -1), rk.reshape(t, -1), rv.reshape(t, -1)], -1)
    assert torch.equal(mixed, ref_mixed) and torch.equal(z, rz[0]) and torch.equal(b, rb[0]) and torch.equal(a, ra[0])


def test_commit_scatter_takes_each_requests_accepted_step():
    gen = torch.Generator().manual_seed(17)
    layers, slots, rows, steps = 2, 5, 3, 4
    dst = torch.randn(layers, slots, 2, 3, generator=gen)
    src = torch.randn(layers, rows, steps, 2, 3, generator=gen)
    before = dst.clone()
    gdn_ops.scatter_accepted_steps(dst, src, torch.tensor([4, 1, 2]), torch.tensor([2, -1, 0]))
    assert torch.equal(dst[:, 4], src[:, 0, 2]) and torch.equal(dst[:, 2], src[:, 2, 0])
    assert torch.equal(dst[:, [0, 1, 3]], before[:, [0, 1, 3]])  # step -1: nothing accepted to commit
    gdn_ops.scatter_accepted_steps(dst, src, torch.tensor([0]), torch.tensor([3]), src_indices=torch.tensor([1]))
    assert torch.equal(dst[:, 0], src[:, 1, 3])


def test_served_by_the_sgl_kernel_shim():
    import sgl_kernel
    import sgl_kernel.mamba as mamba

    assert getattr(sgl_kernel, "__ssr_stand_in__", False), "tests run on the CPU stand-ins"
    for name in gdn_ops.PYTHON_OPS:
        assert getattr(mamba, name) is gdn_ops.PYTHON_OPS[name]
    for name in gdn_ops.TORCH_OP_SCHEMAS:
        assert callable(getattr(torch.ops.sgl_kernel, name))
