"""Pure-torch stand-ins for ``sgl_kernel``'s CPU attention ops (used by SGLang's ``intel_amx``
attention backend): ``extend_attention_cpu`` and ``decode_attention_cpu``.

This is the CPU fallback used only when no working ``sgl_kernel`` is importable; see
:mod:`ssr_sglang.cpu.ops`, which registers these as ``torch.ops.sgl_kernel.*``.

Conventions (taken from ``sglang/srt/layers/attention/intel_amx_backend.py`` and SGLang's Triton
extend/decode kernels):

* KV buffers are ``[num_slots, num_kv_heads, head_dim]``; ``req_to_token[req_pool_indices[i]]``
  lists request ``i``'s slots in position order.
* ``seq_lens`` counts every key a request attends to (prefix + this step's tokens).
* ``sliding_window_size`` is the backend's ``layer.sliding_window_size + 1``: the number of keys a
  query sees, itself included (query at position ``p`` sees keys ``k`` with ``p - k < window``;
  for non-causal layers also ``k - p < window``). A value ``<= 0`` means no window.
* ``tree_mask`` (TARGET_VERIFY, EAGLE QLEN_ONLY / NGRAM) is bool/uint8, flattened per request as
  ``[extend_len, extend_len]`` row-major (``[i, j]``: draft ``i`` may attend draft ``j``), the
  requests' blocks concatenated. The committed prefix stays fully visible.
* ``sinks`` (one logit per query head) join the softmax denominator only, as in the Triton kernels.
* Scores, softmax and the weighted sum run in float32; outputs are written in the output's dtype.
  KV buffers stored as fp8 are dequantised with ``key_scale`` / ``value_scale``.

Exact rows (``SSR_CPU_EXACT_VERIFY=1``): a prefill query, like a decode query, is computed alone over
exactly the keys it sees (:func:`_extend_exact_rows`), whatever the prefix cache held and whatever was
prefilled beside it. A tree-verify query is computed as one query over
exactly the keys it sees (the cached prefix, then its ancestors and itself, in position order), with
no padding (queries of equal length share one product) -- the same computation as the decode step of
that token after its path was accepted, alone or in any batch (decode steps group by length in this
mode too), so verify and decode attention agree bit for bit. By default verify queries of
a request share one product over all its keys, masked: a matmul over more query rows, or over masked
keys between visible ones, rounds differently in float32, and in a bf16 model that flips a rounding
now and then. The exact rows cost more (every row reads its whole prefix).
"""

from __future__ import annotations

from typing import Optional

import torch

from ssr_sglang import settings

EXACT_VERIFY = settings.get("SSR_CPU_EXACT_VERIFY")

# Upper bound on float32 score elements of one batched extend call (else a loop over requests).
_MAX_SCORE_ELEMS = 1 << 24
# Queries go in chunks of at most this many float32 score elements (4 MB): the softmax's temporaries then
# stay in cache and are not mapped afresh from the OS on every call (one pass over a long prefill's scores
# was slower, by how much depending on the process's allocator state). A verify step is one chunk.
_CHUNK_SCORE_ELEMS = 1 << 20

_FP8_DTYPES = tuple(
    getattr(torch, name)
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
    if hasattr(torch, name)
)


def _rows(buffer: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """``buffer[slots]`` for an index tensor of any shape (``index_select`` on the flattened slots: the
    same values, several times faster than advanced indexing for small rows)."""
    return buffer.index_select(0, slots.reshape(-1)).view(*slots.shape, *buffer.shape[1:])


def _load_kv(buffer: torch.Tensor, slots: torch.Tensor, scale: float) -> torch.Tensor:
    """Rows ``slots`` of a KV buffer as float32 (dequantised when the buffer is fp8)."""
    rows = _rows(buffer, slots).float()
    if buffer.dtype in _FP8_DTYPES and scale != 1.0:
        rows = rows * scale
    return rows


def _load_raw(buffer: torch.Tensor, slots: torch.Tensor, scale: float) -> torch.Tensor:
    """Rows ``slots`` of a KV buffer in the buffer's dtype (float32 when fp8 must be dequantised); the
    float32 copy is made once, in the layout the product needs (:func:`_attend_one`, :func:`_heads`)."""
    if buffer.dtype in _FP8_DTYPES:
        return _load_kv(buffer, slots, scale)
    return _rows(buffer, slots)


def _check_unsupported(is_cross_attention: bool, op: str) -> None:
    if is_cross_attention:
        raise NotImplementedError(
            f"{op}: cross attention (encoder-decoder models) is not supported by ssr-sglang's "
            "pure-torch CPU stand-in"
        )


def _attend(
    q: torch.Tensor,  # [B, M, H, Dq] float32
    k: torch.Tensor,  # [B, L, Hkv, Dq] float32
    v: torch.Tensor,  # [B, L, Hkv, Dv] float32
    visible: Optional[torch.Tensor],  # [B, M, L] bool, None = everything visible
    sm_scale: float,
    logit_cap: float,
    sinks: Optional[torch.Tensor],  # [H] float32 or None
) -> torch.Tensor:
    """:func:`_attend_heads` for keys and values in position-major layout; returns ``[B, M, H, Dv]``."""
    return _attend_heads(q, _heads(k), _heads(v), visible, sm_scale, logit_cap, sinks)


def _heads(x: torch.Tensor) -> torch.Tensor:
    """``[B, L, Hkv, D]`` keys or values as a contiguous float32 ``[B, Hkv, L, D]`` (one copy)."""
    b, length, hkv, d = x.shape
    return torch.empty(b, hkv, length, d, dtype=torch.float32).copy_(x.permute(0, 2, 1, 3))


def _attend_heads(
    q: torch.Tensor,  # [B, M, H, Dq] float32
    k: torch.Tensor,  # [B, Hkv, L, Dq] float32, contiguous
    v: torch.Tensor,  # [B, Hkv, L, Dv] float32, contiguous
    visible: Optional[torch.Tensor],  # [B, M, L] bool, None = everything visible
    sm_scale: float,
    logit_cap: float,
    sinks: Optional[torch.Tensor],  # [H] float32 or None
) -> torch.Tensor:
    """Softmax attention of ``M`` queries over ``L`` keys for ``B`` requests at once, GQA-aware.

    Returns ``[B, M, H, Dv]``. The query heads that share a key head are the rows of one product with
    that head's keys (two batched matrix products over ``B * Hkv`` problems, no copy of the keys per
    query head). Every dot product reduces over the head dimension, and a key that is not visible
    contributes an exact zero, so a request's result does not depend on the others in the batch or on
    how far its keys are padded.
    """
    b, m, h, dq = q.shape
    hkv, length = k.shape[1], k.shape[2]
    if h % hkv != 0:
        raise ValueError(f"number of query heads ({h}) is not a multiple of kv heads ({hkv})")
    group = h // hkv
    qg = q.reshape(b, m, hkv, group, dq).permute(0, 2, 3, 1, 4).reshape(b, hkv, group * m, dq)
    scores = torch.matmul(qg, k.transpose(-1, -2)).mul_(sm_scale).view(b, hkv, group, m, length)
    if logit_cap > 0:
        scores = logit_cap * torch.tanh(scores / logit_cap)
    if visible is not None:
        scores.masked_fill_(~visible[:, None, None], float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    if sinks is not None:
        row_max = torch.maximum(row_max, sinks.view(1, hkv, group, 1, 1))
    # Fully masked rows (no visible key, no sink) would give NaN; they produce zeros instead.
    row_max = torch.nan_to_num(row_max, nan=0.0, neginf=0.0)
    probs = scores.sub_(row_max).exp_()
    denom = probs.sum(dim=-1, keepdim=True)
    if sinks is not None:
        denom = denom + torch.exp(sinks.view(1, hkv, group, 1, 1) - row_max)
    out = torch.matmul(probs.view(b, hkv, group * m, length), v).view(b, hkv, group, m, v.shape[-1])
    out = out / torch.where(denom > 0, denom, torch.ones_like(denom))
    return out.permute(0, 3, 1, 2, 4).reshape(b, m, h, v.shape[-1])


def _attend_one(q, k, v, lens, sm_scale: float, logit_cap: float, sinks) -> torch.Tensor:
    """Attention of one query over its own keys, for ``B`` independent problems (see
    :func:`_attend_padded`); returns ``[B, H, Dv]``.

    In exact mode the problems run in groups of equal length, each over exactly its own keys: a
    product over end-padded (masked) keys can round differently from the same product without them,
    so a row's result would depend on the longest row beside it; and the products are sums of
    elementwise products (:func:`_attend_padded`), since a batched matmul's result for one problem
    depends on how many run beside it. So a tree-verify row, a decode step alone and a decode step in
    any batch compute alike. Example: ``lens = [40, 42, 40]`` -> one call for problems 0 and 2 over
    40 keys, one for problem 1 over 42.
    """
    width = k.shape[1]
    if not EXACT_VERIFY or bool((lens == width).all()):
        return _attend_padded(q, k, v, lens, sm_scale, logit_cap, sinks)
    out = torch.empty(q.shape[0], q.shape[1], v.shape[-1], dtype=torch.float32)
    for n in torch.unique(lens).tolist():
        idx = (lens == n).nonzero().flatten()
        out[idx] = _attend_padded(q[idx], k[idx, :n], v[idx, :n], lens[idx], sm_scale, logit_cap, sinks)
    return out


def _attend_padded(
    q: torch.Tensor,  # [B, H, Dq] float32: one query per problem
    k: torch.Tensor,  # [B, L, Hkv, Dq] float32
    v: torch.Tensor,  # [B, L, Hkv, Dv] float32
    lens: torch.Tensor,  # [B]: keys ``[0, lens[b])`` are visible, the rest is padding
    sm_scale: float,
    logit_cap: float,
    sinks: Optional[torch.Tensor],  # [H] float32 or None
) -> torch.Tensor:
    """Attention of one query over its keys ``[0, lens[b])`` of ``k``/``v`` (the rest is masked), for
    ``B`` independent problems; returns ``[B, H, Dv]``.

    The query heads that share a key head form the rows of one product with that head's keys, so
    keys and values are read once (no copy per query head). Decode steps and tree-verify rows both
    run through here, so a verify row and the decode step of the same token compute alike.
    """
    b, h, dq = q.shape
    hkv = k.shape[2]
    if h % hkv != 0:
        raise ValueError(f"number of query heads ({h}) is not a multiple of kv heads ({hkv})")
    group = h // hkv
    width = k.shape[1]
    if EXACT_VERIFY:  # products as sums of elementwise products: a batched matmul rounds per batch size
        scores = (q.view(b, hkv, group, 1, dq) * k.permute(0, 2, 1, 3).unsqueeze(2)).sum(-1) * sm_scale
    else:
        kt = torch.empty(b, hkv, dq, width, dtype=torch.float32).copy_(k.permute(0, 2, 3, 1))  # one copy
        scores = torch.matmul(q.view(b, hkv, group, dq), kt) * sm_scale  # [B, Hkv, G, L]
    if logit_cap > 0:
        scores = logit_cap * torch.tanh(scores / logit_cap)
    hidden = torch.arange(width)[None, :] >= lens[:, None]  # [B, L]
    scores = scores.masked_fill(hidden[:, None, None, :], float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    if sinks is not None:
        row_max = torch.maximum(row_max, sinks.view(1, hkv, group, 1))
    row_max = torch.nan_to_num(row_max, nan=0.0, neginf=0.0)
    probs = torch.exp(scores - row_max)
    denom = probs.sum(dim=-1, keepdim=True)
    if sinks is not None:
        denom = denom + torch.exp(sinks.view(1, hkv, group, 1) - row_max)
    if EXACT_VERIFY:
        out = (probs.unsqueeze(-1) * v.permute(0, 2, 1, 3).unsqueeze(2)).sum(-2)  # [B, Hkv, G, Dv]
    else:
        vt = torch.empty(b, hkv, width, v.shape[-1], dtype=torch.float32).copy_(v.permute(0, 2, 1, 3))
        out = torch.matmul(probs, vt)  # [B, Hkv, G, Dv]
    out = out / torch.where(denom > 0, denom, torch.ones_like(denom))
    return out.reshape(b, h, v.shape[-1])


def _gather_kv(buffer: torch.Tensor, scale: float, req_to_token: torch.Tensor, rows: torch.Tensor,
               lens: torch.Tensor, width: int, raw: bool = False) -> torch.Tensor:
    """Keys (or values) of ``B`` requests as ``[B, width, Hkv, D]`` float32 (``raw``: as
    :func:`_load_raw` gives them); positions at or past a request's length read slot 0 (to be masked)."""
    return (_load_raw if raw else _load_kv)(buffer, _padded_slots(req_to_token, rows, lens, width), scale)


def _padded_slots(req_to_token: torch.Tensor, rows: torch.Tensor, lens: torch.Tensor, width: int) -> torch.Tensor:
    """``[B, width]`` KV slots of pool rows ``rows``; positions at or past a request's length read slot 0."""
    slots = req_to_token[rows, :width].long()
    return torch.where(torch.arange(width)[None, :] < lens[:, None], slots, torch.zeros_like(slots))


def _window_mask(
    q_pos: torch.Tensor, k_pos: torch.Tensor, window: int, is_causal: bool
) -> torch.Tensor:
    diff = q_pos[:, None] - k_pos[None, :]
    keep = diff < window
    if not is_causal:
        keep &= -diff < window
    return keep


def extend_attention_cpu(
    q_extend: torch.Tensor,
    k_extend: Optional[torch.Tensor],
    v_extend: Optional[torch.Tensor],
    o_extend: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    key_scale: float,
    value_scale: float,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    extend_seq_lens: torch.Tensor,
    extend_start_loc: torch.Tensor,
    max_len_extend: Optional[int],
    sm_scale: float,
    logit_cap: float,
    is_cross_attention: bool = False,
    sliding_window_size: int = 0,
    encoder_lens: Optional[torch.Tensor] = None,
    sinks: Optional[torch.Tensor] = None,
    tree_mask: Optional[torch.Tensor] = None,
    is_causal: bool = True,
) -> None:
    """Prefill/extend (and TARGET_VERIFY) attention; writes ``o_extend`` in place.

    ``q_extend [T, H, Dq]``, ``k_extend/v_extend [T, Hkv, D]`` hold this step's tokens (None: read
    them from the KV buffers, where another layer already wrote them), ``o_extend [T, H, Dv]``.
    Request ``i`` owns rows ``extend_start_loc[i] : + extend_seq_lens[i]``; its first
    ``seq_lens[i] - extend_seq_lens[i]`` keys are the cached prefix.
    """
    _check_unsupported(is_cross_attention, "extend_attention_cpu")
    del encoder_lens, max_len_extend  # only meaningful for cross attention / kernel tiling
    window = int(sliding_window_size)
    sink_f = sinks.float() if sinks is not None else None
    if tree_mask is not None:
        tree_mask = tree_mask.reshape(-1)
    seq_list = seq_lens.tolist()
    ext_list = extend_seq_lens.tolist()
    start_list = extend_start_loc.tolist()
    rpi_list = req_pool_indices.tolist()
    h = q_extend.shape[1]
    if window <= 0 and EXACT_VERIFY:
        lists = (rpi_list, seq_list, ext_list, start_list)
        if tree_mask is not None:
            _extend_tree_rows(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, key_scale, value_scale,
                              req_to_token, *lists, sm_scale, logit_cap, sink_f, tree_mask)
        else:
            _extend_exact_rows(q_extend, k_extend, v_extend, o_extend, (k_buffer, v_buffer, key_scale, value_scale),
                               req_to_token, lists, (sm_scale, logit_cap, sink_f), is_causal)
        return
    if window <= 0 and not EXACT_VERIFY and _batchable(ext_list, start_list, seq_list, h):
        inputs = (req_to_token, req_pool_indices, seq_lens, extend_seq_lens, extend_start_loc)
        plan = _batched_plan(inputs, (seq_list, ext_list, start_list, rpi_list, is_causal), tree_mask, k_buffer,
                             ext_list[0], h, is_causal)
        _extend_batched(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, key_scale, value_scale,
                        plan, ext_list[0], sm_scale, logit_cap, sink_f)
        return
    mask_off = 0
    for i, seq_len, ext, start, prefix in _extending(seq_list, ext_list, start_list):
        slots = req_to_token[int(rpi_list[i]), :seq_len].long()
        if k_extend is not None and v_extend is not None:
            k = torch.cat(
                [_load_kv(k_buffer, slots[:prefix], key_scale), k_extend[start : start + ext].float()]
            )
            v = torch.cat(
                [_load_kv(v_buffer, slots[:prefix], value_scale), v_extend[start : start + ext].float()]
            )
        else:
            k = _load_kv(k_buffer, slots, key_scale)
            v = _load_kv(v_buffer, slots, value_scale)

        blk = None
        if tree_mask is not None:
            blk = tree_mask[mask_off : mask_off + ext * ext].view(ext, ext).bool()
            mask_off += ext * ext
        k_pos = torch.arange(seq_len)
        chunk = max(1, _CHUNK_SCORE_ELEMS // max(1, seq_len * h))
        for c0 in range(0, ext, chunk):
            c1 = min(ext, c0 + chunk)
            q_idx = torch.arange(c0, c1)
            visible = None
            if blk is not None or is_causal:
                visible = torch.ones(c1 - c0, seq_len, dtype=torch.bool)
                if blk is not None:
                    visible[:, prefix:] = blk[c0:c1]
                else:
                    visible[:, prefix:] = q_idx[:, None] >= torch.arange(ext)[None, :]
            if window > 0:
                wm = _window_mask(prefix + q_idx, k_pos, window, is_causal)
                visible = wm if visible is None else visible & wm
            out = _attend(
                q_extend[None, start + c0 : start + c1].float(), k[None], v[None],
                None if visible is None else visible[None], sm_scale, logit_cap, sink_f,
            )
            o_extend[start + c0 : start + c1] = out[0].to(o_extend.dtype)


def _extending(seq_list, ext_list, start_list):
    """``(i, seq_len, ext, start, prefix)`` of every request that extends by at least one token."""
    for i, (seq_len, ext, start) in enumerate(zip(seq_list, ext_list, start_list)):
        seq_len, ext, start = int(seq_len), int(ext), int(start)
        if ext <= 0:
            continue
        if seq_len < ext:
            raise ValueError(f"request {i}: seq_len {seq_len} < extend_len {ext}")
        yield i, seq_len, ext, start, seq_len - ext


def _extend_exact_rows(q_extend, k_extend, v_extend, o_extend, buffers: tuple, req_to_token, lists: tuple,
                       scoring: tuple, is_causal: bool) -> None:
    """Prefill (extend) attention in exact mode: every query row alone over exactly the keys it sees,
    as the decode step of its token computes it (:func:`_attend_padded`, one problem of its length).

    So a prompt token's attention does not depend on how the prompt was split between the prefix cache,
    prefill chunks and this step, nor on the requests prefilled beside it (a product over more query
    rows rounds differently, and the prefix cache's state at arrival depends on timing). Example:
    3 cached keys and 2 new tokens: row 0 sees keys ``0..3``, row 1 keys ``0..4`` (non-causal: both
    see all 5). Costs one small call per row and layer, and reads a row's whole prefix each time.
    """
    k_buffer, v_buffer, key_scale, value_scale = buffers
    rpi_list, seq_list, ext_list, start_list = lists
    sm_scale, logit_cap, sinks = scoring
    for i, seq_len, ext, start, prefix in _extending(seq_list, ext_list, start_list):
        slots = req_to_token[int(rpi_list[i]), :seq_len].long()
        k = _load_raw(k_buffer, slots, key_scale)
        v = _load_raw(v_buffer, slots, value_scale)
        if k_extend is not None and v_extend is not None:  # this step's keys as given (as decode stores them)
            k[prefix:] = k_extend[start:start + ext].to(k.dtype)
            v[prefix:] = v_extend[start:start + ext].to(v.dtype)
        k, v = k[None], v[None]
        q = q_extend[start:start + ext].float()
        for r in range(ext):
            n = prefix + r + 1 if is_causal else seq_len
            out = _attend_padded(q[r:r + 1], k[:, :n], v[:, :n], torch.tensor([n]), sm_scale, logit_cap, sinks)
            o_extend[start + r] = out[0].to(o_extend.dtype)


def _extend_tree_rows(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, key_scale, value_scale,
                      req_to_token, rpi_list, seq_list, ext_list, start_list, sm_scale, logit_cap, sinks,
                      tree_mask) -> None:
    """Tree-verify attention, one query row at a time over its own visible keys (see module doc).

    All rows run as one batch of single-query problems, keys end-padded and masked exactly as a
    batched decode step pads them. Example: prefix 5, tree ``0 -> 1 -> 2`` and ``0 -> 3``: node 2 sees
    the keys at positions ``[0..4, 5, 6, 7]``, node 3 those at ``[0..4, 5, 8]``, each as one query.
    """
    pool_rows, lens, out_rows, fix = [], [], [], []  # fix: (row, key column, node position, extend row)
    mask_off = 0
    for i, seq_len, ext, start, prefix in _extending(seq_list, ext_list, start_list):
        blk = tree_mask[mask_off: mask_off + ext * ext].view(ext, ext).bool().tolist()
        mask_off += ext * ext
        for r, seen in enumerate(blk):
            row = len(out_rows)
            col = prefix
            for j in range(ext):
                if seen[j]:
                    fix.append((row, col, prefix + j, start + j))
                    col += 1
            pool_rows.append(int(rpi_list[i]))
            lens.append(col)
            out_rows.append(start + r)
    if not out_rows:
        return
    width = max(lens)
    rows_t = torch.tensor(pool_rows)
    lens_t = torch.tensor(lens)
    row_i, col_i, pos_i, ext_i = torch.tensor(fix).unbind(1)
    slots = req_to_token[rows_t, :width].long()
    slots[row_i, col_i] = req_to_token[rows_t[row_i], pos_i].long()
    slots = torch.where(torch.arange(width)[None, :] < lens_t[:, None], slots, torch.zeros_like(slots))
    k = _load_raw(k_buffer, slots, key_scale)
    v = _load_raw(v_buffer, slots, value_scale)
    if k_extend is not None and v_extend is not None:  # this step's keys as given, not as stored
        k[row_i, col_i] = k_extend[ext_i].to(k.dtype)
        v[row_i, col_i] = v_extend[ext_i].to(v.dtype)
    out_t = torch.tensor(out_rows)
    out = _attend_one(q_extend[out_t].float(), k, v, lens_t, sm_scale, logit_cap, sinks)
    o_extend[out_t] = out.to(o_extend.dtype)


def _batchable(ext_list, start_list, seq_list, heads: int) -> bool:
    """One batched call serves a step where every request extends by the same number of tokens, laid
    out back to back (a verify step, a decode step), within the score-size bound."""
    if not ext_list or ext_list[0] <= 0 or len(set(ext_list)) != 1:
        return False
    ext = ext_list[0]
    if any(st != i * ext for i, st in enumerate(start_list)) or min(seq_list) < ext:
        return False
    return len(ext_list) * heads * ext * max(seq_list) <= _MAX_SCORE_ELEMS


class _BatchedPlan:
    """What a batched extend step's attention reads, shared by the layers of one forward pass: the
    keys' slots (positions at or past a request's length read slot 0, masked), the rows and columns
    where this step's own keys go, and which keys each query sees."""

    __slots__ = ("inputs", "lists", "tree", "buffers", "slots", "rows", "cols", "visible", "chunk")

    def __init__(self, inputs: tuple, lists: tuple, tree: Optional[torch.Tensor], k_buffer: torch.Tensor,
                 ext: int, heads: int, is_causal: bool):
        req_to_token, req_pool_indices, seq_lens = inputs[:3]
        self.inputs, self.lists = inputs, lists
        self.tree = None if tree is None else tree.clone()
        self.buffers = {k_buffer.data_ptr()}
        bsz = seq_lens.numel()
        lens = seq_lens.long()
        width = int(lens.max())
        prefix = lens - ext
        self.slots = _padded_slots(req_to_token, req_pool_indices.long(), lens, width)
        self.rows = torch.arange(bsz).repeat_interleave(ext)
        self.cols = (prefix[:, None] + torch.arange(ext)[None, :]).reshape(-1)
        if tree is not None:
            block = tree[: bsz * ext * ext].view(bsz, ext, ext).bool()
        elif is_causal:
            block = torch.ones(ext, ext, dtype=torch.bool).tril().expand(bsz, ext, ext)
        else:
            block = torch.ones(bsz, ext, ext, dtype=torch.bool)
        rel = torch.arange(width)[None, None, :] - prefix[:, None, None]  # key position in the block
        in_block = (rel >= 0) & (rel < ext)
        self.visible = (rel < 0) | (in_block & block.gather(2, rel.clamp(0, ext - 1).expand(bsz, ext, width)))
        self.chunk = max(1, _CHUNK_SCORE_ELEMS // (bsz * heads * width))  # queries per chunk

    def serves(self, inputs: tuple, lists: tuple, tree: Optional[torch.Tensor], k_buffer: torch.Tensor) -> bool:
        """Whether this plan is the one of the call with these arguments: the same index tensors (the
        same objects, with the same values) in the same forward pass. A forward pass calls each
        layer once, with its own KV buffer: a buffer seen before starts a new pass (a new plan)."""
        if lists != self.lists or any(a is not b for a, b in zip(inputs, self.inputs)):
            return False
        if (tree is None) != (self.tree is None) or (tree is not None and not torch.equal(tree, self.tree)):
            return False
        ptr = k_buffer.data_ptr()
        if ptr in self.buffers:
            return False
        self.buffers.add(ptr)
        return True


_plan: Optional[_BatchedPlan] = None  # the last batched step's (one scheduler thread calls these ops)


def _batched_plan(inputs: tuple, lists: tuple, tree, k_buffer, ext: int, heads: int, is_causal: bool):
    """The plan of this call: the last one where it serves, else a new one."""
    global _plan
    if _plan is None or not _plan.serves(inputs, lists, tree, k_buffer):
        _plan = _BatchedPlan(inputs, lists, tree, k_buffer, ext, heads, is_causal)
    return _plan


def _extend_batched(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, key_scale, value_scale,
                    plan: _BatchedPlan, ext, sm_scale, logit_cap, sinks) -> None:
    """:func:`extend_attention_cpu` for ``B`` requests of ``ext`` new tokens each, in one pass.

    Keys are padded to the longest request and masked; each request sees its cached prefix, and of
    this step's block what its tree mask (or causality) allows -- the same visibility as the
    per-request path.
    """
    bsz = plan.slots.shape[0]
    k = _heads(_load_raw(k_buffer, plan.slots, key_scale))
    v = _heads(_load_raw(v_buffer, plan.slots, value_scale))
    if k_extend is not None and v_extend is not None:  # this step's keys as given, not as stored
        k[plan.rows, :, plan.cols] = k_extend[: bsz * ext].float()
        v[plan.rows, :, plan.cols] = v_extend[: bsz * ext].float()
    q = q_extend[: bsz * ext].float().view(bsz, ext, *q_extend.shape[1:])
    o = o_extend[: bsz * ext].view(bsz, ext, *o_extend.shape[1:])
    rows, visible = plan.chunk, plan.visible
    for c0 in range(0, ext, rows):
        out = _attend_heads(q[:, c0:c0 + rows], k, v, visible[:, c0:c0 + rows], sm_scale, logit_cap, sinks)
        o[:, c0:c0 + rows] = out.to(o_extend.dtype)


def decode_attention_cpu(
    query: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    key_scale: float,
    value_scale: float,
    output: torch.Tensor,
    key: Optional[torch.Tensor],
    value: Optional[torch.Tensor],
    loc: torch.Tensor,
    attn_logits: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    sm_scale: float,
    logit_cap: float,
    is_cross_attention: bool = False,
    sliding_window_size: int = 0,
    encoder_lens: Optional[torch.Tensor] = None,
    sinks: Optional[torch.Tensor] = None,
) -> None:
    """One-token-per-request decode attention; writes ``output [B, H, Dv]`` in place.

    When ``key``/``value`` (``[B, Hkv, D]``) are given they are first stored into
    ``k_cache``/``v_cache`` at slots ``loc`` (the backend relies on this). Request ``i`` then
    attends to its ``seq_lens[i]`` keys ``req_to_token[req_pool_indices[i], :seq_lens[i]]``.
    ``attn_logits`` (the split-KV scratch buffer of the C++ kernel) is not used.
    """
    _check_unsupported(is_cross_attention, "decode_attention_cpu")
    del attn_logits, encoder_lens
    if key is not None and value is not None:
        slots = loc.reshape(-1).long()
        k_cache[slots] = key.reshape(slots.numel(), *k_cache.shape[1:]).to(k_cache.dtype)
        v_cache[slots] = value.reshape(slots.numel(), *v_cache.shape[1:]).to(v_cache.dtype)
    window = int(sliding_window_size)
    sink_f = sinks.float() if sinks is not None else None
    seq_list = seq_lens.tolist()
    rpi_list = req_pool_indices.tolist()
    if window <= 0 and seq_list and min(seq_list) > 0 \
            and len(seq_list) * query.shape[1] * max(seq_list) <= _MAX_SCORE_ELEMS:
        lens = seq_lens.long()
        width = int(lens.max())
        rows = req_pool_indices.long()
        k = _gather_kv(k_cache, key_scale, req_to_token, rows, lens, width, raw=True)
        v = _gather_kv(v_cache, value_scale, req_to_token, rows, lens, width, raw=True)
        out = _attend_one(query.float().reshape(len(seq_list), -1, k.shape[-1]), k, v, lens, sm_scale,
                          logit_cap, sink_f)
        output.copy_(out.reshape(output.shape).to(output.dtype))
        return
    for i, (seq_len, rpi) in enumerate(zip(seq_list, rpi_list)):
        seq_len = int(seq_len)
        start = max(0, seq_len - window) if window > 0 else 0
        if seq_len - start <= 0:
            output[i] = 0
            continue
        slots = req_to_token[int(rpi), start:seq_len].long()
        k = _load_kv(k_cache, slots, key_scale)
        v = _load_kv(v_cache, slots, value_scale)
        out = _attend_one(query[i : i + 1].float().reshape(1, -1, k.shape[-1]), k[None], v[None],
                          torch.tensor([seq_len - start]), sm_scale, logit_cap, sink_f)
        output[i] = out[0].reshape(output.shape[1:]).to(output.dtype)
