"""Pure-torch stand-ins for the ``sgl_kernel`` CPU ops SGLang 0.5.23's CPU engine needs.

This module is the CPU fallback used only when no working ``sgl_kernel`` is importable (no CPU
build of sgl-kernel is installed; the CUDA wheel fails without ``libcuda.so.1``). It covers plain
serving plus NGRAM/EAGLE speculative decoding with the ``intel_amx`` attention backend, and nothing
that SGLang only uses once it believes AMX kernels exist (so ``convert_weight_packed`` is never
defined: SGLang takes its presence as "AMX kernels available" and would route every layer through
many more ops).

Python names (``from sgl_kernel import X`` / ``from sgl_kernel.speculative import X``), in
:data:`PYTHON_OPS`:

* ``copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc)``
* ``assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start_offset, end_offset,
  out_cache_loc, pool_len)``
* ``assign_extend_cache_locs_cpu(req_pool_indices, req_to_token, start_offset, end_offset,
  out_cache_loc, pool_len)``
* ``assign_draft_cache_locs_contiguous_cpu(req_pool_indices, req_to_token, seq_lens,
  out_cache_loc, pool_len, topk, num_steps)``
* ``fill_bonus_tokens_cpu(accept_tokens, accept_lens, bonus_tokens, accept_stride)``
* ``fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, accept_out_cache_loc)``
* ``verify_tree_greedy_cpu(predicts, accept_index, accept_token_num, candidates, retrive_index,
  retrive_next_token, retrive_next_sibling, target_predict)``
* ``build_tree_kernel_efficient_cpu(parent_list, selected_index, verified_seq_len, tree_mask,
  positions, retrive_index, retrive_next_token, retrive_next_sibling, topk, depth,
  draft_token_num, tree_mask_mode)``
* ``build_draft_decode_metadata_cpu(req_to_token, req_pool_indices, seq_lens, topk, num_steps,
  pool_len) -> Tensor``
* ``reconstruct_indices_from_tree_mask(tree_mask, verified_seq_len, positions, retrive_index,
  retrive_next_token, retrive_next_sibling, batch_size, draft_token_num)``

``torch.ops.sgl_kernel.*`` (defined by :func:`register_torch_ops`): all of the above, plus
``extend_attention_cpu``, ``decode_attention_cpu`` (see :mod:`ssr_sglang.cpu.attention_ops`) and
``store_cache_cpu``.

Mutating ops write into the tensors they are given, in place, and return None, as the callers in
SGLang expect. Semantics follow SGLang's Triton/CUDA reference kernels for the same ops.
"""

from __future__ import annotations

import ctypes
import warnings
from typing import Callable, Optional

import torch

from ssr_sglang.cpu.attention_ops import decode_attention_cpu, extend_attention_cpu

__all__ = [
    "PYTHON_OPS",
    "SUBMODULES",
    "TORCH_OP_SCHEMAS",
    "register_torch_ops",
    "extend_attention_cpu",
    "decode_attention_cpu",
]


# --------------------------------------------------------------------------- KV cache moves


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor, src_loc: torch.Tensor
) -> None:
    """For every buffer ``b`` (raw base address ``data_ptrs[b]``, row size ``strides[b]`` bytes),
    copy row ``src_loc[j]`` to row ``tgt_loc[j]``. All sources are read before any target is
    written, so overlapping moves are safe (as in the Triton kernel)."""
    tgt = tgt_loc.reshape(-1).long()
    src = src_loc.reshape(-1).long()
    if tgt.numel() == 0:
        return
    if tgt.numel() != src.numel():
        raise ValueError("copy_all_layer_kv_cache_cpu: tgt_loc and src_loc differ in length")
    moved = tgt != src  # a row onto itself is no move (a verify step's accepted chain mostly stays put)
    if not bool(moved.all()):
        tgt, src = tgt[moved], src[moved]
        if tgt.numel() == 0:
            return
    num_rows = int(torch.maximum(tgt.max(), src.max()).item()) + 1
    ptrs = data_ptrs.reshape(-1)
    if ptrs.dtype == torch.uint64:
        ptrs = ptrs.view(torch.int64)  # addresses fit in 63 bits; uint64 tolist support is patchy
    ptrs = ptrs.tolist()
    for ptr, row_bytes in zip(ptrs, strides.reshape(-1).tolist()):
        row_bytes = int(row_bytes)
        if row_bytes <= 0:
            continue
        raw = (ctypes.c_uint8 * (num_rows * row_bytes)).from_address(int(ptr))
        rows = torch.frombuffer(raw, dtype=torch.uint8).view(num_rows, row_bytes)
        rows[tgt] = rows[src]


def store_cache_cpu(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    indices: torch.Tensor,
    row_dim: int,
) -> None:
    """``k_cache.view(-1, row_dim)[indices] = k`` and likewise for ``v`` (only reached by SGLang
    with AMX kernels, i.e. never with these stand-ins; provided for completeness)."""
    idx = indices.reshape(-1).long()
    k_cache.view(-1, row_dim)[idx] = k.reshape(-1, row_dim).to(k_cache.dtype)
    v_cache.view(-1, row_dim)[idx] = v.reshape(-1, row_dim).to(v_cache.dtype)


# --------------------------------------------------------------------------- cache locations


def _segments(start_offset: torch.Tensor, end_offset: torch.Tensor):
    starts = [int(x) for x in start_offset.reshape(-1).tolist()]
    ends = [int(x) for x in end_offset.reshape(-1).tolist()]
    out = 0
    for s, e in zip(starts, ends):
        n = max(0, e - s)
        yield s, n, out
        out += n


def _table_segments(req_pool_indices, req_to_token, start_offset, end_offset):
    """``(flat table offset, length, packed offset)`` per non-empty segment.

    Addressed like the Triton kernels, on the flat table (``row * row_len + start``): a segment that
    runs past its row's end (a request at the context limit with a full verify block) continues into
    the following memory instead of raising; only the table's own end clips it.
    """
    rows = [int(x) for x in req_pool_indices.reshape(-1).tolist()]
    row_len, size = req_to_token.shape[1], req_to_token.numel()
    for row, (s, n, o) in zip(rows, _segments(start_offset, end_offset)):
        at = row * row_len + s
        n = min(n, size - at)
        if n > 0:
            yield at, n, o


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Scatter: ``req_to_token[rpi[i], start[i]:end[i]] = out_cache_loc[packed segment i]`` (see ``_table_segments``)."""
    del pool_len
    _copy_segments(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, to_table=True)


def assign_extend_cache_locs_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Gather: ``out_cache_loc[packed segment i] = req_to_token[rpi[i], start[i]:end[i]]``
    (entries past the packed total are left untouched)."""
    del pool_len
    _copy_segments(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, to_table=False)


def _copy_segments(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, to_table: bool) -> None:
    """Copy each request's packed segment of ``out_cache_loc`` into its row of ``req_to_token``, or back."""
    flat = out_cache_loc.reshape(-1) if to_table else out_cache_loc.view(-1)  # only a write needs a view
    table = req_to_token.view(-1)
    for at, n, o in _table_segments(req_pool_indices, req_to_token, start_offset, end_offset):
        if to_table:
            table[at : at + n] = flat[o : o + n].to(table.dtype)
        else:
            flat[o : o + n] = table[at : at + n].to(flat.dtype)


def assign_draft_cache_locs_contiguous_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    seq_lens: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
    topk: int,
    num_steps: int,
) -> None:
    """``out_cache_loc[i*topk*num_steps : +topk*num_steps] =
    req_to_token[rpi[i], seq_lens[i] : seq_lens[i] + topk*num_steps]``."""
    del pool_len
    n = int(topk) * int(num_steps)
    rows = [int(x) for x in req_pool_indices.reshape(-1).tolist()]
    lens = [int(x) for x in seq_lens.reshape(-1).tolist()]
    flat = out_cache_loc.view(-1)
    for i, (row, s) in enumerate(zip(rows, lens)):
        flat[i * n : (i + 1) * n] = req_to_token[row, s : s + n].to(flat.dtype)


def build_draft_decode_metadata_cpu(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    topk: int,
    num_steps: int,
    pool_len: int,
) -> torch.Tensor:
    """Expanded ``req_to_token`` for multi-step draft decode: row ``b*topk + t`` holds request
    ``b``'s committed prefix (``seq_lens[b]`` slots) followed by candidate ``t``'s ``num_steps``
    draft slots, which sit at ``seq_lens[b] + t*num_steps`` in the original row. Other entries
    are zero."""
    topk, num_steps = int(topk), int(num_steps)
    rows = [int(x) for x in req_pool_indices.reshape(-1).tolist()]
    lens = [int(x) for x in seq_lens.reshape(-1).tolist()]
    out = torch.zeros((len(rows) * topk, int(pool_len)), dtype=req_to_token.dtype)
    for b, (row, sl) in enumerate(zip(rows, lens)):
        src = req_to_token[row]
        for t in range(topk):
            dst = out[b * topk + t]
            dst[:sl] = src[:sl]
            d0 = sl + t * num_steps
            dst[sl : sl + num_steps] = src[d0 : d0 + num_steps]
    return out


# --------------------------------------------------------------------------- spec-decode bookkeeping


def fill_bonus_tokens_cpu(
    accept_tokens: torch.Tensor,
    accept_lens: torch.Tensor,
    bonus_tokens: torch.Tensor,
    accept_stride: int,
) -> None:
    """``bonus_tokens[i] = accept_tokens.flat[accept_stride*i + accept_lens[i] - 1]`` (the last
    accepted token; ``accept_lens`` includes the bonus token)."""
    bs = accept_lens.numel()
    if bs == 0:
        return
    idx = torch.arange(bs, dtype=torch.int64) * int(accept_stride) + accept_lens.reshape(-1).long() - 1
    bonus_tokens.view(-1)[:bs] = accept_tokens.reshape(-1)[idx].to(bonus_tokens.dtype)


def fill_accept_out_cache_loc_cpu(
    accept_index: torch.Tensor, out_cache_loc: torch.Tensor, accept_out_cache_loc: torch.Tensor
) -> None:
    """Compact: ``accept_out_cache_loc[:n] = out_cache_loc[accept_index[accept_index >= 0]]`` in
    order (``-1`` marks a rejected slot); later entries are left untouched."""
    idx = accept_index.reshape(-1).long()
    idx = idx[idx >= 0]
    n = idx.numel()
    if n:
        accept_out_cache_loc.view(-1)[:n] = out_cache_loc.reshape(-1)[idx].to(accept_out_cache_loc.dtype)


def verify_tree_greedy_cpu(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    target_predict: torch.Tensor,
) -> None:
    """Greedy tree verification, in place.

    For each request ``b`` (``n = candidates.shape[1]`` draft nodes, node 0 the root), walk down
    from the root: at each level take the first child (``retrive_next_token``) and its siblings
    (``retrive_next_sibling``) in order, accepting the first whose candidate token equals the
    target model's prediction at the last accepted node; stop when none matches or after
    ``accept_index.shape[1] - 1`` accepted drafts. Writes ``accept_index[b, 0] =
    retrive_index[b, 0]`` and ``accept_index[b, k]`` = flat index of the k-th accepted draft
    (other entries untouched, callers pre-fill -1), ``accept_token_num[b]`` = number of accepted
    drafts (bonus excluded), and ``predicts[flat]`` = target token for every accepted node
    including the last one (which yields the bonus token). Flat indices address
    ``predicts`` / ``target_predict`` viewed as ``[bs * n]``.
    """
    bs, n = candidates.shape[0], candidates.shape[1]
    steps = accept_index.shape[1]
    cand = candidates.reshape(bs, n).tolist()
    ridx = retrive_index.reshape(bs, n).tolist()
    nxt = retrive_next_token.reshape(bs, n).tolist()
    sib = retrive_next_sibling.reshape(bs, n).tolist()
    target = target_predict.reshape(-1).tolist()
    pred_flat = predicts.view(-1)
    pred_idx: list[int] = []
    pred_val: list[int] = []
    acc_rows: list[list[int]] = []
    acc_num: list[int] = []
    for b in range(bs):
        last = int(ridx[b][0])
        accepted = [last]
        cur = 0
        for _ in range(1, steps):
            cur = int(nxt[b][cur])
            want = target[last]
            while cur != -1:
                if cand[b][cur] == want:
                    pred_idx.append(last)
                    pred_val.append(want)
                    last = int(ridx[b][cur])
                    accepted.append(last)
                    break
                cur = int(sib[b][cur])
            if cur == -1:
                break
        pred_idx.append(last)
        pred_val.append(target[last])
        acc_rows.append(accepted)
        acc_num.append(len(accepted) - 1)
    if pred_idx:
        pred_flat[torch.tensor(pred_idx, dtype=torch.int64)] = torch.tensor(pred_val).to(predicts.dtype)
    for b, row in enumerate(acc_rows):
        accept_index[b, : len(row)] = torch.tensor(row).to(accept_index.dtype)
    if bs:
        accept_token_num.view(-1)[:bs] = torch.tensor(acc_num).to(accept_token_num.dtype)


def build_tree_kernel_efficient_cpu(
    parent_list: torch.Tensor,
    selected_index: torch.Tensor,
    verified_seq_len: torch.Tensor,
    tree_mask: torch.Tensor,
    positions: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    topk: int,
    depth: int,
    draft_token_num: int,
    tree_mask_mode: int,
) -> None:
    """Build the EAGLE draft tree (mask, positions, retrieve links) from top-k selections, in place.

    ``selected_index[b, i-1]`` is the candidate id of draft node ``i`` (node 0 is the verified
    root); its parent candidate is ``parent_list[b, selected_index // topk]`` (0 = the root).
    ``retrive_next_token`` / ``retrive_next_sibling`` must be pre-filled with -1 by the caller.
    ``tree_mask_mode`` 1 (QLEN_ONLY): ``tree_mask`` is ``[bs, n, n]`` flat, rows fully written.
    Mode 0 (FULL_MASK): rows are ``seq_len + n`` wide and only each row's draft block is written
    (the caller pre-fills the prefix columns). Mode 2 (bit-packed) is not supported.
    """
    mode = int(tree_mask_mode)
    if mode not in (0, 1):
        raise NotImplementedError(
            f"build_tree_kernel_efficient_cpu: tree_mask_mode {mode} is not supported on CPU "
            "(only FULL_MASK=0 and QLEN_ONLY=1)"
        )
    topk, depth, n = int(topk), int(depth), int(draft_token_num)
    bs = verified_seq_len.numel()
    seq_lens = [int(x) for x in verified_seq_len.reshape(-1).tolist()]
    sel_all = selected_index.reshape(bs, -1).tolist() if bs else []
    par_all = parent_list.reshape(bs, -1).tolist() if bs else []
    nxt = retrive_next_token.reshape(bs, n).tolist() if bs else []
    sib = retrive_next_sibling.reshape(bs, n).tolist() if bs else []
    pos_out = [0] * (bs * n)
    mask_flat = tree_mask.view(-1)
    mask_off = 0
    for b in range(bs):
        sel, par, seq_len = sel_all[b], par_all[b], seq_lens[b]

        def node_of(token_idx: int) -> int:
            try:
                return sel.index(token_idx)
            except ValueError:
                return -1

        for i in range(n - 1, 0, -1):
            ptb = sel[i - 1] // topk
            parent_pos = 0
            if ptb > 0:
                p = node_of(par[ptb])
                if p < 0:
                    warnings.warn(
                        f"build_tree_kernel_efficient_cpu: invalid eagle tree, parent of node {i} "
                        "not found; ignoring the node"
                    )
                    continue
                parent_pos = p + 1
            if nxt[b][parent_pos] != -1:
                sib[b][i] = nxt[b][parent_pos]
            nxt[b][parent_pos] = i

        row_width = n if mode == 1 else seq_len + n
        col0 = 0 if mode == 1 else seq_len
        block = torch.zeros((n, n), dtype=torch.bool)
        block[:, 0] = True
        pos_out[b * n] = seq_len
        for tid in range(1, n):
            position = 0
            cur = tid - 1
            while position < depth:
                position += 1
                block[tid, cur + 1] = True
                ptb = sel[cur] // topk
                if ptb == 0:
                    break
                cur = node_of(par[ptb])
                if cur < 0:
                    warnings.warn(
                        f"build_tree_kernel_efficient_cpu: invalid eagle tree, ancestor of node {tid} "
                        "not found"
                    )
                    break
            pos_out[b * n + tid] = position + seq_len
        rows = mask_flat[mask_off : mask_off + n * row_width].view(n, row_width)
        rows[:, col0 : col0 + n] = block.to(mask_flat.dtype)
        mask_off += n * row_width

    if bs:
        ar = torch.arange(bs * n, dtype=torch.int64).view(bs, n)
        retrive_index.view(bs, n)[:] = ar.to(retrive_index.dtype)
        retrive_next_token.view(bs, n)[:] = torch.tensor(nxt).to(retrive_next_token.dtype)
        retrive_next_sibling.view(bs, n)[:] = torch.tensor(sib).to(retrive_next_sibling.dtype)
        positions.view(-1)[: bs * n] = torch.tensor(pos_out).to(positions.dtype)


def reconstruct_indices_from_tree_mask(
    tree_mask: torch.Tensor,
    verified_seq_len: torch.Tensor,
    positions: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    batch_size: int,
    draft_token_num: int,
) -> None:
    """NGRAM verify metadata from a ``[bs, n, n]`` (flat, bool/uint8) tree mask, in place.

    With ``anc[i, j] = mask[i, j] and j < i`` (``j`` is an ancestor of ``i``):
    ``positions[b*n + i] = verified_seq_len[b] + #anc[i]``; ``retrive_index[b, i] = b*n + i``;
    ``parent[i]`` = largest ancestor of ``i`` (-1 if none); ``retrive_next_token[b, i]`` = smallest
    ``k > i`` with ``anc[k, i]``, else -1; ``retrive_next_sibling[b, i]`` = smallest ``k > i`` with
    ``parent[k] == parent[i]`` when ``parent[i] >= 0``, else -1.
    """
    bs, n = int(batch_size), int(draft_token_num)
    if bs == 0:
        return
    mask = tree_mask.reshape(-1)[: bs * n * n].view(bs, n, n).bool()
    order = torch.arange(n)
    anc = mask & (order[None, :] < order[:, None])[None]  # [bs, i, j]
    depth = anc.sum(-1)
    positions.view(-1)[: bs * n] = (depth + verified_seq_len.reshape(bs, 1).long()).reshape(-1).to(
        positions.dtype
    )
    retrive_index.view(bs, n)[:] = torch.arange(bs * n).view(bs, n).to(retrive_index.dtype)

    big = n  # sentinel larger than any node id
    parent = torch.where(anc, order[None, None, :], -1).amax(-1)  # [bs, i]
    # first child of i: min k with anc[k, i]
    child = torch.where(anc, order[None, :, None], big).amin(1)  # over k -> [bs, i]
    retrive_next_token.view(bs, n)[:] = torch.where(child < big, child, -1).to(retrive_next_token.dtype)
    later = order[:, None] > order[None, :]  # [k, i]: k > i
    same = (parent[:, :, None] == parent[:, None, :]) & later[None]  # [bs, k, i]
    sibling = torch.where(same, order[None, :, None], big).amin(1)  # [bs, i]
    sibling = torch.where((parent >= 0) & (sibling < big), sibling, -1)
    retrive_next_sibling.view(bs, n)[:] = sibling.to(retrive_next_sibling.dtype)


# --------------------------------------------------------------------------- registration

PYTHON_OPS: dict[str, Callable] = {
    "copy_all_layer_kv_cache_cpu": copy_all_layer_kv_cache_cpu,
    "assign_req_to_token_pool_cpu": assign_req_to_token_pool_cpu,
    "assign_extend_cache_locs_cpu": assign_extend_cache_locs_cpu,
    "assign_draft_cache_locs_contiguous_cpu": assign_draft_cache_locs_contiguous_cpu,
    "fill_bonus_tokens_cpu": fill_bonus_tokens_cpu,
    "fill_accept_out_cache_loc_cpu": fill_accept_out_cache_loc_cpu,
    "verify_tree_greedy_cpu": verify_tree_greedy_cpu,
    "build_tree_kernel_efficient_cpu": build_tree_kernel_efficient_cpu,
    "build_draft_decode_metadata_cpu": build_draft_decode_metadata_cpu,
    "reconstruct_indices_from_tree_mask": reconstruct_indices_from_tree_mask,
}

# ``sgl_kernel.<sub>`` submodules SGLang imports Python names from on this path (every name in
# PYTHON_OPS is served in each): ``from sgl_kernel.speculative import
# reconstruct_indices_from_tree_mask`` (kernels/ops/speculative/reconstruct_tree.py).
SUBMODULES: frozenset[str] = frozenset({"speculative"})

# name -> (schema, implementation); mutated arguments carry alias annotations.
TORCH_OP_SCHEMAS: dict[str, tuple[str, Callable]] = {
    "extend_attention_cpu": (
        "extend_attention_cpu(Tensor q_extend, Tensor? k_extend, Tensor? v_extend, Tensor(a!) o_extend, "
        "Tensor k_buffer, Tensor v_buffer, float key_scale, float value_scale, Tensor req_to_token, "
        "Tensor req_pool_indices, Tensor seq_lens, Tensor extend_seq_lens, Tensor extend_start_loc, "
        "int? max_len_extend, float sm_scale, float logit_cap, bool is_cross_attention, "
        "int sliding_window_size, Tensor? encoder_lens, Tensor? sinks, Tensor? tree_mask, "
        "bool is_causal) -> ()",
        extend_attention_cpu,
    ),
    "decode_attention_cpu": (
        "decode_attention_cpu(Tensor query, Tensor(a!) k_cache, Tensor(b!) v_cache, float key_scale, "
        "float value_scale, Tensor(c!) output, Tensor? key, Tensor? value, Tensor loc, Tensor attn_logits, "
        "Tensor req_to_token, Tensor req_pool_indices, Tensor seq_lens, float sm_scale, float logit_cap, "
        "bool is_cross_attention, int sliding_window_size, Tensor? encoder_lens, Tensor? sinks) -> ()",
        decode_attention_cpu,
    ),
    "store_cache_cpu": (
        "store_cache_cpu(Tensor k, Tensor v, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor indices, "
        "int row_dim) -> ()",
        store_cache_cpu,
    ),
    "copy_all_layer_kv_cache_cpu": (
        "copy_all_layer_kv_cache_cpu(Tensor data_ptrs, Tensor strides, Tensor tgt_loc, Tensor src_loc) -> ()",
        copy_all_layer_kv_cache_cpu,
    ),
    "assign_req_to_token_pool_cpu": (
        "assign_req_to_token_pool_cpu(Tensor req_pool_indices, Tensor(a!) req_to_token, Tensor start_offset, "
        "Tensor end_offset, Tensor out_cache_loc, int pool_len) -> ()",
        assign_req_to_token_pool_cpu,
    ),
    "assign_extend_cache_locs_cpu": (
        "assign_extend_cache_locs_cpu(Tensor req_pool_indices, Tensor req_to_token, Tensor start_offset, "
        "Tensor end_offset, Tensor(a!) out_cache_loc, int pool_len) -> ()",
        assign_extend_cache_locs_cpu,
    ),
    "assign_draft_cache_locs_contiguous_cpu": (
        "assign_draft_cache_locs_contiguous_cpu(Tensor req_pool_indices, Tensor req_to_token, Tensor seq_lens, "
        "Tensor(a!) out_cache_loc, int pool_len, int topk, int num_steps) -> ()",
        assign_draft_cache_locs_contiguous_cpu,
    ),
    "build_draft_decode_metadata_cpu": (
        "build_draft_decode_metadata_cpu(Tensor req_to_token, Tensor req_pool_indices, Tensor seq_lens, "
        "int topk, int num_steps, int pool_len) -> Tensor",
        build_draft_decode_metadata_cpu,
    ),
    "fill_bonus_tokens_cpu": (
        "fill_bonus_tokens_cpu(Tensor accept_tokens, Tensor accept_lens, Tensor(a!) bonus_tokens, "
        "int accept_stride) -> ()",
        fill_bonus_tokens_cpu,
    ),
    "fill_accept_out_cache_loc_cpu": (
        "fill_accept_out_cache_loc_cpu(Tensor accept_index, Tensor out_cache_loc, "
        "Tensor(a!) accept_out_cache_loc) -> ()",
        fill_accept_out_cache_loc_cpu,
    ),
    "verify_tree_greedy_cpu": (
        "verify_tree_greedy_cpu(Tensor(a!) predicts, Tensor(b!) accept_index, Tensor(c!) accept_token_num, "
        "Tensor candidates, Tensor retrive_index, Tensor retrive_next_token, Tensor retrive_next_sibling, "
        "Tensor target_predict) -> ()",
        verify_tree_greedy_cpu,
    ),
    "build_tree_kernel_efficient_cpu": (
        "build_tree_kernel_efficient_cpu(Tensor parent_list, Tensor selected_index, Tensor verified_seq_len, "
        "Tensor(a!) tree_mask, Tensor(b!) positions, Tensor(c!) retrive_index, Tensor(d!) retrive_next_token, "
        "Tensor(e!) retrive_next_sibling, int topk, int depth, int draft_token_num, int tree_mask_mode) -> ()",
        build_tree_kernel_efficient_cpu,
    ),
    "reconstruct_indices_from_tree_mask": (
        "reconstruct_indices_from_tree_mask(Tensor tree_mask, Tensor verified_seq_len, Tensor(a!) positions, "
        "Tensor(b!) retrive_index, Tensor(c!) retrive_next_token, Tensor(d!) retrive_next_sibling, "
        "int batch_size, int draft_token_num) -> ()",
        reconstruct_indices_from_tree_mask,
    ),
}

_LIBRARY: Optional[torch.library.Library] = None


def _op_exists(name: str) -> bool:
    try:
        getattr(torch.ops.sgl_kernel, name)
        return True
    except (AttributeError, RuntimeError):
        return False


def register_torch_ops() -> None:
    """Define ``torch.ops.sgl_kernel.<name>`` for every op in :data:`TORCH_OP_SCHEMAS` (CPU impls).

    Idempotent; an op that already exists (e.g. from a real ``sgl_kernel`` in this process) is left
    alone. Never defines ``convert_weight_packed``.
    """
    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = torch.library.Library("sgl_kernel", "FRAGMENT")
    for name, (schema, fn) in TORCH_OP_SCHEMAS.items():
        if _op_exists(name):
            continue
        _LIBRARY.define(schema)
        _LIBRARY.impl(name, fn, "CPU")
