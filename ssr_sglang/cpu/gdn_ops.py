"""Pure-torch stand-ins for the ``sgl_kernel`` CPU ops of hybrid Gated DeltaNet models.

SGLang 0.5.23's CPU engine runs Qwen3.5 (``Qwen3_5ForCausalLM``) through these ops
(``layers/attention/linear/gdn_backend.py``, ``kernels/gdn_triton.py``, ``models/qwen3_5.py``; Qwen3-Next's
model calls them too, but 0.5.23 builds its gated norm on ``torch.cuda.current_device()``, so it does not
load on CPU):

``sgl_kernel.mamba`` (Python names, :data:`PYTHON_OPS`):

* ``causal_conv1d_fn_cpu(x [dim, T], weight [dim, W], bias, activation, conv_states, has_initial_state,
  cache_indices, query_start_loc, ...)``: the short causal convolution over packed prefill sequences;
  each sequence starts from its slot's conv state (or zeros) and leaves its last ``W - 1`` inputs there.
* ``causal_conv1d_update_cpu(x [B, dim] or [B, dim, T], conv_state, weight, bias, activation,
  conv_state_indices, intermediate_conv_window=..., intermediate_state_indices=...,
  retrieve_next_token=..., retrieve_next_sibling=..., retrieve_parent_token=...)``: decode and
  target-verify. In a token tree each token's window follows its ancestors (parents derived from the
  next-token / next-sibling links and written to ``retrieve_parent_token`` for the recurrent op), and
  each token's window is saved per step so the accepted one can be committed after verification.
* ``chunk_gated_delta_rule_cpu(q, k, v, g, beta, initial_state, cu_seqlens, ...,
  initial_state_indices)``: prefill of the gated delta rule; the state pool is updated in place.

``torch.ops.sgl_kernel.*`` (:data:`TORCH_OP_SCHEMAS`):

* ``fused_gdn_gating_cpu(A_log, a, b, dt_bias) -> (g, beta)``
* ``fused_sigmoid_gating_delta_rule_update_cpu(...)``: decode (state written back) and target verify
  (``disable_state_update``, per-step states in ``intermediate_states_buffer``, tree parents from
  ``retrieve_parent_token``)
* ``fused_rmsnorm_gated_cpu(x, weight, z, eps)``, ``fused_sigmoid_mul_cpu(x, gate)``,
  ``fused_qk_gemma_rmsnorm_cpu``, ``fused_qk_gemma_rmsnorm_with_gate_cpu``,
  ``fused_qkvzba_split_reshape_cat_cpu`` (Qwen3-Next's grouped layout) and
  ``fused_qkvzba_split_reshape_cat_contiguous_cpu`` (Qwen3.5's ``[q | k | v | z]`` layout)

Layouts: the recurrent state of a slot is ``[HV, V, K]`` (value rows, key columns), conv states are
``[dim, W - 1]`` oldest first. Every delta-rule step, whether it comes from prefill, decode or verify,
is computed by the same function in float32 (and the prefill gates are not rounded to the input
dtype), so a token prefilled computes what the same token decoded computes: speculative verify and
forked drafts see the recurrent state plain decoding would have.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F

__all__ = ["PYTHON_OPS", "SUBMODULES", "TORCH_OP_SCHEMAS", "register_torch_ops"]

PAD_SLOT_ID = -1


# --------------------------------------------------------------------------- short convolution


def _silu_if(x: torch.Tensor, activation) -> torch.Tensor:
    if activation in (True, "silu", "swish"):
        return x * torch.sigmoid(x)
    if activation in (None, False):
        return x
    raise NotImplementedError(f"causal conv1d on CPU: activation {activation!r} (only silu/swish or none)")


def _conv(windows: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], activation) -> torch.Tensor:
    """``windows [dim, n, W]`` (oldest input first) -> ``[dim, n]`` float32: one tap at a time, so every
    output of the same window is the same number whichever op (prefill or update) computes it."""
    acc = windows.new_zeros(windows.shape[:-1], dtype=torch.float32)
    if bias is not None:
        acc = acc + bias.float()[:, None]
    w = weight.float()
    for j in range(weight.shape[-1]):
        acc = acc + windows[..., j].float() * w[:, j, None]
    return _silu_if(acc, activation)


def causal_conv1d_fn_cpu(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    activation=None,
    conv_states: Optional[torch.Tensor] = None,
    has_initial_state: Optional[torch.Tensor] = None,
    cache_indices: Optional[torch.Tensor] = None,
    query_start_loc: Optional[torch.Tensor] = None,
    seq_lens_cpu=None,
    pad_slot_id: int = PAD_SLOT_ID,
    **unused,
) -> torch.Tensor:
    """Causal depthwise convolution of packed sequences ``x [dim, total]`` (returns ``[dim, total]``).

    Sequence ``i`` spans ``query_start_loc[i]:query_start_loc[i+1]`` and is preceded by the ``W - 1``
    inputs in ``conv_states[cache_indices[i]]`` when ``has_initial_state[i]``, else by zeros; its last
    ``W - 1`` inputs (with the preceding state when it is shorter) are written back to that slot.
    """
    if unused.get("block_table") is not None:
        raise NotImplementedError("causal_conv1d_fn_cpu: block_table (page-major conv state) is not supported")
    dim, total = x.shape
    width = weight.shape[-1]
    out = torch.zeros_like(x)
    starts = [0, total] if query_start_loc is None else [int(s) for s in query_start_loc.reshape(-1).tolist()]
    n_seq = len(starts) - 1
    slots = cache_indices.reshape(-1).tolist() if cache_indices is not None else list(range(n_seq))
    has_init = has_initial_state.reshape(-1).tolist() if has_initial_state is not None else [False] * n_seq
    for i in range(n_seq):
        s, e, slot = starts[i], starts[i + 1], int(slots[i])
        if slot == pad_slot_id or e <= s:
            continue
        if conv_states is not None and has_init[i]:
            prev = conv_states[slot].to(x.dtype)
        else:
            prev = x.new_zeros((dim, width - 1))
        full = torch.cat([prev, x[:, s:e]], dim=1)  # [dim, W - 1 + n]
        out[:, s:e] = _conv(full.unfold(1, width, 1), weight, bias, activation).to(x.dtype)
        if conv_states is not None:
            conv_states[slot] = full[:, full.shape[1] - (width - 1):].to(conv_states.dtype)
    return out


def tree_parents(next_token: list, next_sibling: list, n: int) -> list:
    """Parent (node index) of each of ``n`` tree nodes from first-child / next-sibling links, nodes in
    order; node 0 (the last verified token) is the root and is given parent 0."""
    parent = [0] * n
    for t in range(n):
        child = int(next_token[t])
        if child != -1 and child < n:
            parent[child] = t
        sib = int(next_sibling[t])
        if sib != -1 and sib < n:
            parent[sib] = parent[t]
    return parent


def causal_conv1d_update_cpu(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    activation=None,
    cache_seqlens: Optional[torch.Tensor] = None,
    conv_state_indices: Optional[torch.Tensor] = None,
    num_accept_tokens: Optional[torch.Tensor] = None,
    intermediate_conv_window: Optional[torch.Tensor] = None,
    intermediate_state_indices: Optional[torch.Tensor] = None,
    retrieve_next_token: Optional[torch.Tensor] = None,
    retrieve_next_sibling: Optional[torch.Tensor] = None,
    retrieve_parent_token: Optional[torch.Tensor] = None,
    pad_slot_id: int = PAD_SLOT_ID,
    **unused,
) -> torch.Tensor:
    """Decode / target-verify step of the short convolution (returns ``x``'s shape).

    Row ``b``'s tokens ``x[b, :, t]`` continue the conv state in slot ``conv_state_indices[b]``. Without
    tree links token ``t`` follows token ``t - 1``; with ``retrieve_next_token``/``retrieve_next_sibling``
    it follows its tree parent (written to ``retrieve_parent_token[b, :T]``), and the root (token 0)
    follows the state. ``intermediate_conv_window[intermediate_state_indices[b], t]`` gets token ``t``'s
    last ``W - 1`` inputs (the conv state to commit if ``t`` is the last accepted token). The slot
    itself is overwritten with the last ``W - 1`` of ``state + x[b]`` in token order, as SGLang's Triton
    kernel does (verify commits the accepted window afterwards).
    """
    if cache_seqlens is not None or num_accept_tokens is not None:
        raise NotImplementedError("causal_conv1d_update_cpu: cache_seqlens / num_accept_tokens are not supported")
    squeeze = x.dim() == 2
    xs = x.unsqueeze(-1) if squeeze else x
    batch, dim, seqlen = xs.shape
    width = weight.shape[-1]
    keep = width - 1
    out = torch.zeros_like(xs)
    slots = conv_state_indices.reshape(-1).tolist() if conv_state_indices is not None else list(range(batch))
    inter = intermediate_state_indices.reshape(-1).tolist() if intermediate_state_indices is not None else None
    tree = retrieve_next_token is not None and retrieve_next_sibling is not None
    for b in range(batch):
        slot = int(slots[b])
        if slot == pad_slot_id:
            continue
        state = conv_state[slot].to(xs.dtype)  # [dim, W - 1]
        if tree:
            parent = tree_parents(retrieve_next_token[b].tolist(), retrieve_next_sibling[b].tolist(), seqlen)
            if retrieve_parent_token is not None:
                retrieve_parent_token[b, :seqlen] = torch.tensor(parent, dtype=retrieve_parent_token.dtype)
        else:
            parent = [t - 1 for t in range(seqlen)]
        windows = []
        for t in range(seqlen):
            cols, cur = [], t  # newest first: the token, its ancestors, then the state, newest first
            while len(cols) < width:
                if cur >= 0:
                    cols.append(xs[b, :, cur])
                    cur = parent[cur] if (cur > 0) else -1
                else:
                    cols.append(state[:, keep + cur] if keep + cur >= 0 else xs.new_zeros(dim))
                    cur -= 1
            windows.append(torch.stack(cols[::-1], dim=-1))  # [dim, W], oldest first
        win = torch.stack(windows, dim=1)  # [dim, T, W]
        out[b] = _conv(win, weight, bias, activation).to(xs.dtype)
        if intermediate_conv_window is not None and inter is not None and int(inter[b]) >= 0:
            intermediate_conv_window[int(inter[b]), :seqlen] = win[:, :, 1:].permute(1, 0, 2).to(
                intermediate_conv_window.dtype)
        full = torch.cat([state, xs[b]], dim=1)
        conv_state[slot] = full[:, full.shape[1] - keep:].to(conv_state.dtype)
    return out.squeeze(-1) if squeeze else out


# --------------------------------------------------------------------------- gated delta rule


def _softplus(x: torch.Tensor, beta: float = 1.0, threshold: float = 20.0) -> torch.Tensor:
    bx = beta * x
    return torch.where(bx <= threshold, torch.log(1.0 + torch.exp(bx)) / beta, x)


def gdn_gates(A_log, a, b, dt_bias, softplus_beta: float = 1.0, softplus_threshold: float = 20.0):
    """``g = -exp(A_log) * softplus(a + dt_bias)`` and ``beta = sigmoid(b)``, float32, per token and head."""
    x = a.float() + dt_bias.float()
    g = -torch.exp(A_log.float()) * _softplus(x, softplus_beta, softplus_threshold)
    return g, torch.sigmoid(b.float())


def delta_rule_step(h, q, k, v, g, beta, scale: float, l2norm: bool):
    """One gated delta-rule step for every value head at once, in float32.

    ``h [HV, V, K]`` state, ``q``/``k`` ``[HV, K]`` (already repeated per value head), ``v [HV, V]``,
    ``g``/``beta`` ``[HV]``. Returns ``(new state, output [HV, V])``: the state decays by ``exp(g)``,
    the value the state predicts for ``k`` is replaced by ``v`` at rate ``beta``, and ``q`` reads it.
    """
    q, k, v = q.float(), k.float(), v.float()
    if l2norm:
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    q = q * scale
    h = h * torch.exp(g)[:, None, None]
    delta = (v - (h * k[:, None, :]).sum(-1)) * beta[:, None]
    h = h + delta[:, :, None] * k[:, None, :]
    return h, (h * q[:, None, :]).sum(-1)


def _per_value_head(x: torch.Tensor, hv: int) -> torch.Tensor:
    """``[T, H, K]`` query/key heads -> ``[T, HV, K]`` (value head ``j`` reads key head ``j // (HV/H)``)."""
    return x if x.shape[1] == hv else x.repeat_interleave(hv // x.shape[1], dim=1)


def _bounds(cu_seqlens: Optional[torch.Tensor], total: int) -> list:
    return [0, total] if cu_seqlens is None else [int(s) for s in cu_seqlens.reshape(-1).tolist()]


def chunk_gated_delta_rule_cpu(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = True,
    cu_seqlens: Optional[torch.Tensor] = None,
    head_first: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    initial_state_indices: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    scale: Optional[float] = None,
    **unused,
):
    """Prefill: the delta rule over packed sequences ``q/k [1, T, H, K]``, ``v [1, T, HV, V]``,
    ``g/beta [1, T, HV]``, each starting from and writing back its slot of the state pool
    ``initial_state [slots, HV, V, K]`` (slot ``initial_state_indices[i]``; -1: zeros, not written).
    Step by step (see :func:`delta_rule_step`), not chunked. Returns ``(o [1, T, HV, V], None, None)``
    like SGLang's chunk kernel with an indexed pool."""
    if head_first:
        raise NotImplementedError("chunk_gated_delta_rule_cpu: head_first=True is not supported")
    total, hv, vdim = v.shape[1], v.shape[2], v.shape[3]
    kdim = k.shape[-1]
    scale = kdim ** -0.5 if scale is None else scale
    o = torch.zeros_like(v)
    bounds = _bounds(cu_seqlens, total)
    n_seq = len(bounds) - 1
    slots = initial_state_indices.reshape(-1).tolist() if initial_state_indices is not None else list(range(n_seq))
    qh, kh = _per_value_head(q[0], hv), _per_value_head(k[0], hv)
    for i in range(n_seq):
        s, e, slot = bounds[i], bounds[i + 1], int(slots[i])
        if initial_state is not None and slot >= 0:
            h = initial_state[slot].float()
        else:
            h = torch.zeros((hv, vdim, kdim), dtype=torch.float32)
        for t in range(s, e):
            h, o[0, t] = delta_rule_step(h, qh[t], kh[t], v[0, t], g[0, t].float(), beta[0, t].float(), scale,
                                         use_qk_l2norm_in_kernel)
        if initial_state is not None and slot >= 0 and e > s:
            initial_state[slot] = h.to(initial_state.dtype)
    return o, None, None


def fused_gdn_gating_cpu(A_log: torch.Tensor, a: torch.Tensor, b: torch.Tensor, dt_bias: torch.Tensor):
    """``(g, beta)``, each ``[1, T, HV]`` float32 (``beta`` is not rounded to ``b``'s dtype, so prefill
    steps use the gates decode steps compute in-kernel)."""
    g, beta = gdn_gates(A_log, a, b, dt_bias)
    return g.unsqueeze(0), beta.unsqueeze(0)


def fused_sigmoid_gating_delta_rule_update_cpu(
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    initial_state_source: torch.Tensor,
    initial_state_indices: torch.Tensor,
    cu_seqlens: Optional[torch.Tensor],
    use_qk_l2norm_in_kernel: bool,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
    is_kda: bool = False,
    disable_state_update: bool = False,
    intermediate_states_buffer: Optional[torch.Tensor] = None,
    intermediate_state_indices: Optional[torch.Tensor] = None,
    cache_steps: Optional[int] = None,
    retrieve_parent_token: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Decode / target verify: gates computed per step, then the delta rule (returns ``o``, ``v``'s shape).

    Sequence ``i`` (``cu_seqlens``) starts from slot ``initial_state_indices[i]`` (-1: zeros). With
    ``intermediate_states_buffer [slots, steps, HV, V, K]`` the state after each step ``t`` is stored at
    ``[intermediate_state_indices[i], t]``; with ``retrieve_parent_token`` a step ``t > 0`` starts from the
    stored state of its tree parent instead of step ``t - 1``. ``disable_state_update`` leaves the pool
    as it was (verify commits the accepted step's state afterwards).
    """
    if is_kda:
        raise NotImplementedError("fused_sigmoid_gating_delta_rule_update_cpu: is_kda=True (KDA) is not supported")
    total, hv, vdim = v.shape[1], v.shape[2], v.shape[3]
    kdim = k.shape[-1]
    scale = kdim ** -0.5
    o = torch.zeros_like(v)
    a2, b2 = a.reshape(total, -1), b.reshape(total, -1)
    g, beta = gdn_gates(A_log, a2, b2, dt_bias, softplus_beta, softplus_threshold)
    qh, kh = _per_value_head(q[0], hv), _per_value_head(k[0], hv)
    bounds = _bounds(cu_seqlens, total)
    slots = initial_state_indices.reshape(-1).tolist()
    cache = None
    if intermediate_states_buffer is not None and intermediate_state_indices is not None:
        cache = intermediate_state_indices.reshape(-1).tolist()
    for i in range(len(bounds) - 1):
        s, e, slot = bounds[i], bounds[i + 1], int(slots[i])
        h = initial_state_source[slot].float() if slot >= 0 else torch.zeros((hv, vdim, kdim), dtype=torch.float32)
        ci = int(cache[i]) if cache is not None else -1
        parents = retrieve_parent_token[i].tolist() if retrieve_parent_token is not None else None
        for step, t in enumerate(range(s, e)):
            if parents is not None and step > 0 and ci >= 0:
                h = intermediate_states_buffer[ci, int(parents[step])].float()
            h, o[0, t] = delta_rule_step(h, qh[t], kh[t], v[0, t], g[t], beta[t], scale, use_qk_l2norm_in_kernel)
            if ci >= 0:
                intermediate_states_buffer[ci, step] = h.to(intermediate_states_buffer.dtype)
        if not disable_state_update and slot >= 0 and e > s:
            initial_state_source[slot] = h.to(initial_state_source.dtype)
    return o


# --------------------------------------------------------------------------- norms, gates, splits


def _rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def fused_rmsnorm_gated_cpu(x: torch.Tensor, weight: torch.Tensor, z: torch.Tensor, eps: float) -> torch.Tensor:
    """``weight * rmsnorm(x) * silu(z)`` over the last dim (norm before gate), in ``x``'s dtype."""
    normed = weight * _rms(x, eps).to(x.dtype)
    return (normed.float() * F.silu(z.float())).to(x.dtype)


def fused_sigmoid_mul_cpu(x: torch.Tensor, gate: torch.Tensor) -> None:
    """In place: ``x *= sigmoid(gate)`` (``gate`` may be a ``[T, heads, dim]`` view of ``x``'s size)."""
    x.copy_((x.float() * torch.sigmoid(gate.float()).reshape(x.shape)).to(x.dtype))


def _gemma_rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return (_rms(x, eps) * (1.0 + weight.float())).to(x.dtype)


def fused_qk_gemma_rmsnorm_cpu(q, k, q_weight, k_weight, eps: float, head_dim: int):
    """Per-head Gemma RMSNorm (``x / rms(x) * (1 + w)``) of ``q`` and ``k``; ``[tokens * heads, head_dim]`` each."""
    return (_gemma_rms(q.reshape(-1, head_dim), q_weight, eps),
            _gemma_rms(k.reshape(-1, head_dim), k_weight, eps))


def fused_qk_gemma_rmsnorm_with_gate_cpu(q_gate, k, q_weight, k_weight, eps: float, head_dim: int, num_heads: int):
    """``q_gate [T, heads * 2 * head_dim]`` holds per head ``[q | gate]``: returns the normed ``q``, the
    normed ``k`` and the gate, each contiguous ``[T, heads, head_dim]``-sized."""
    qg = q_gate.reshape(q_gate.shape[0], num_heads, 2 * head_dim)
    q, gate = qg[..., :head_dim], qg[..., head_dim:]
    qn, kn = fused_qk_gemma_rmsnorm_cpu(q, k, q_weight, k_weight, eps, head_dim)
    return qn.contiguous(), kn.contiguous(), gate.contiguous()


def fused_qkvzba_split_reshape_cat_contiguous_cpu(qkvz, ba, num_heads_qk: int, num_heads_v: int, head_qk: int,
                                                  head_v: int):
    """Qwen3.5 layout ``qkvz = [q | k | v | z]``, ``ba = [b | a]``: returns ``(cat(q, k, v) [T, 2*Hk*Dk + Hv*Dv],
    z [T, Hv, Dv], b [T, Hv], a [T, Hv])``, contiguous."""
    kd, vd = num_heads_qk * head_qk, num_heads_v * head_v
    n = qkvz.shape[0]
    mixed = qkvz[:, : 2 * kd + vd].contiguous()
    z = qkvz[:, 2 * kd + vd: 2 * kd + 2 * vd].reshape(n, num_heads_v, head_v).contiguous()
    return mixed, z, ba[:, :num_heads_v].contiguous(), ba[:, num_heads_v: 2 * num_heads_v].contiguous()


def fused_qkvzba_split_reshape_cat_cpu(qkvz, ba, num_heads_qk: int, num_heads_v: int, head_qk: int, head_v: int):
    """Qwen3-Next layout, grouped per key head: ``qkvz [T, Hk, (Dk | Dk | r*Dv | r*Dv)]`` and
    ``ba [T, Hk, (r | r)]`` with ``r = Hv / Hk``; returns the same four tensors as the contiguous op."""
    n, r = qkvz.shape[0], num_heads_v // num_heads_qk
    grouped = qkvz.reshape(n, num_heads_qk, 2 * head_qk + 2 * r * head_v)
    q = grouped[..., :head_qk].reshape(n, -1)
    k = grouped[..., head_qk: 2 * head_qk].reshape(n, -1)
    v = grouped[..., 2 * head_qk: 2 * head_qk + r * head_v].reshape(n, -1)
    z = grouped[..., 2 * head_qk + r * head_v:].reshape(n, num_heads_v, head_v)
    bag = ba.reshape(n, num_heads_qk, 2 * r)
    return (torch.cat([q, k, v], dim=-1).contiguous(), z.contiguous(), bag[..., :r].reshape(n, num_heads_v).contiguous(),
            bag[..., r:].reshape(n, num_heads_v).contiguous())


# --------------------------------------------------------------------------- registration

PYTHON_OPS: dict[str, Callable] = {
    "causal_conv1d_fn_cpu": causal_conv1d_fn_cpu,
    "causal_conv1d_update_cpu": causal_conv1d_update_cpu,
    "chunk_gated_delta_rule_cpu": chunk_gated_delta_rule_cpu,
}

# ``from sgl_kernel.mamba import causal_conv1d_fn_cpu, ...`` (gdn_backend.py, gdn_triton.py, kda_backend.py)
SUBMODULES: frozenset[str] = frozenset({"mamba"})

_SPLIT_SCHEMA = "(Tensor mixed_qkvz, Tensor mixed_ba, int num_heads_qk, int num_heads_v, int head_qk, int head_v) -> (Tensor, Tensor, Tensor, Tensor)"

TORCH_OP_SCHEMAS: dict[str, tuple[str, Callable]] = {
    "fused_gdn_gating_cpu": (
        "fused_gdn_gating_cpu(Tensor A_log, Tensor a, Tensor b, Tensor dt_bias) -> (Tensor, Tensor)",
        fused_gdn_gating_cpu,
    ),
    "fused_sigmoid_gating_delta_rule_update_cpu": (
        "fused_sigmoid_gating_delta_rule_update_cpu(Tensor A_log, Tensor dt_bias, Tensor q, Tensor k, Tensor v, "
        "Tensor a, Tensor b, Tensor(a!) initial_state_source, Tensor initial_state_indices, Tensor? cu_seqlens, "
        "bool use_qk_l2norm_in_kernel, float softplus_beta=1.0, float softplus_threshold=20.0, bool is_kda=False, "
        "bool disable_state_update=False, Tensor(b!)? intermediate_states_buffer=None, "
        "Tensor? intermediate_state_indices=None, int? cache_steps=None, Tensor? retrieve_parent_token=None) -> Tensor",
        fused_sigmoid_gating_delta_rule_update_cpu,
    ),
    "fused_rmsnorm_gated_cpu": (
        "fused_rmsnorm_gated_cpu(Tensor x, Tensor weight, Tensor z, float eps) -> Tensor",
        fused_rmsnorm_gated_cpu,
    ),
    "fused_sigmoid_mul_cpu": ("fused_sigmoid_mul_cpu(Tensor(a!) x, Tensor gate) -> ()", fused_sigmoid_mul_cpu),
    "fused_qk_gemma_rmsnorm_cpu": (
        "fused_qk_gemma_rmsnorm_cpu(Tensor q, Tensor k, Tensor q_weight, Tensor k_weight, float eps, int head_dim) "
        "-> (Tensor, Tensor)",
        fused_qk_gemma_rmsnorm_cpu,
    ),
    "fused_qk_gemma_rmsnorm_with_gate_cpu": (
        "fused_qk_gemma_rmsnorm_with_gate_cpu(Tensor q_gate, Tensor k, Tensor q_weight, Tensor k_weight, float eps, "
        "int head_dim, int num_heads) -> (Tensor, Tensor, Tensor)",
        fused_qk_gemma_rmsnorm_with_gate_cpu,
    ),
    "fused_qkvzba_split_reshape_cat_cpu": (
        "fused_qkvzba_split_reshape_cat_cpu" + _SPLIT_SCHEMA, fused_qkvzba_split_reshape_cat_cpu,
    ),
    "fused_qkvzba_split_reshape_cat_contiguous_cpu": (
        "fused_qkvzba_split_reshape_cat_contiguous_cpu" + _SPLIT_SCHEMA, fused_qkvzba_split_reshape_cat_contiguous_cpu,
    ),
}


def register_torch_ops() -> None:
    """Define ``torch.ops.sgl_kernel.<name>`` for every op in :data:`TORCH_OP_SCHEMAS` (idempotent; an op
    that already exists is left alone), on the library fragment :mod:`ssr_sglang.cpu.ops` defines."""
    from ssr_sglang.cpu import ops

    ops.register_torch_ops()  # creates the fragment
    for name, (schema, fn) in TORCH_OP_SCHEMAS.items():
        if ops._op_exists(name):
            continue
        ops._LIBRARY.define(schema)
        ops._LIBRARY.impl(name, fn, "CPU")


# Modules whose ``_use_cpu`` SGLang sets from ``cpu_has_amx_support()`` (which the stand-ins keep False,
# never defining ``convert_weight_packed``); False sends their gated RMSNorm to a CUDA-only Triton path.
GATED_NORM_MODULES = (
    "sglang.kernels.ops.attention.fla.layernorm_gated",
    "sglang.kernels.ops.attention.fla.fused_norm_gate",
)


# After a verify step SGLang commits each request's accepted step: its recurrent state and conv window
# (``scatter_mamba_states_after_mtp_verify``), through Triton scatters that refuse CPU tensors.
SCATTER_MODULE = "sglang.kernels.ops.mamba.mamba_state_scatter_triton"
SCATTERS = ("fused_mamba_state_scatter_with_mask", "fused_conv_window_scatter_with_mask")


def scatter_accepted_steps(dst: torch.Tensor, src: torch.Tensor, dst_indices: torch.Tensor, steps: torch.Tensor,
                           src_indices: Optional[torch.Tensor] = None) -> None:
    """``dst[:, dst_indices[i]] = src[:, row_i, steps[i]]`` for every ``i`` with ``steps[i] >= 0`` (``row_i`` is
    ``src_indices[i]`` if given, else ``i``): every layer's state (``dst [layers, slots, ...]``, ``src
    [layers, rows, steps, ...]``) of the last accepted step, into the request's slot."""
    step_list = steps.reshape(-1).tolist()
    dst_list = dst_indices.reshape(-1).tolist()
    rows = src_indices.reshape(-1).tolist() if src_indices is not None else list(range(len(step_list)))
    for i, step in enumerate(step_list):
        if int(step) >= 0 and int(dst_list[i]) >= 0:
            dst[:, int(dst_list[i])] = src[:, int(rows[i]), int(step)].to(dst.dtype)


def _cpu_or(original: Callable) -> Callable:
    def scatter(dst, src, dst_indices_raw, step_indices_raw, src_indices_raw=None):
        if dst.device.type != "cpu":
            return original(dst, src, dst_indices_raw, step_indices_raw, src_indices_raw)
        return scatter_accepted_steps(dst, src, dst_indices_raw, step_indices_raw, src_indices_raw)

    scatter.__wrapped__ = original
    return scatter


def install() -> None:
    """On the CPU engine: route SGLang's gated RMSNorm (Gated DeltaNet output norm) to
    ``fused_rmsnorm_gated_cpu``, and commit verified recurrent states with :func:`scatter_accepted_steps`."""
    import importlib

    for name in GATED_NORM_MODULES:
        module = importlib.import_module(name)
        if hasattr(module, "_use_cpu"):
            module._use_cpu = True
    scatter = importlib.import_module(SCATTER_MODULE)
    for name in SCATTERS:
        fn = getattr(scatter, name)
        if not hasattr(fn, "__wrapped__"):
            setattr(scatter, name, _cpu_or(fn))
    eligible = scatter._conv_multi_eligible
    if not hasattr(eligible, "__wrapped__"):
        def conv_multi_eligible(pairs):  # the fused multi-pair Triton scatter: never on CPU tensors
            return bool(pairs) and pairs[0][0].device.type != "cpu" and eligible(pairs)

        conv_multi_eligible.__wrapped__ = eligible
        scatter._conv_multi_eligible = conv_multi_eligible
