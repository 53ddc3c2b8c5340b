"""Pure-torch stand-ins for the sampling ops SGLang's speculative verify uses when a batch samples.

On GPU, ``eagle_sample`` (``sglang/srt/speculative/eagle_utils.py``) verifies a non-greedy batch with
temperature softmax, ``top_k_renorm_prob``, ``top_p_renorm_prob`` (FlashInfer) and sgl-kernel's
``tree_speculative_sampling_target_only``. SGLang 0.5.23 has no CPU version of the last three (the
names are ``None`` there) and verifies every CPU batch greedily instead; :mod:`ssr_sglang.cpu.eagle_sampling`
points ``eagle_sample`` at the functions below. Its temperature softmax (``sampling.softmax`` in
``sglang.kernels.ops``) already runs on CPU: ``torch.softmax(logits / temperatures)``, float32 logits.

``tree_speculative_sampling_target_only`` follows the CUDA kernel
(``sgl_kernel/speculative/sampling.cuh``, ``TreeSpeculativeSamplingTargetOnly``) step for step. Per
request, walking down from the root: one coin per accepted node (``uniform_samples[b, node]``, the
root's first); at each level the children are tried in ``retrive_next_token`` /
``retrive_next_sibling`` order, accumulating their target probabilities under the last accepted node
(``prob_acc``); a child is accepted when its probability is positive and ``coin < prob_acc /
threshold_acc`` or its probability is ``>= threshold_single``. With both thresholds 1 (SGLang's
default) this is inverse-CDF sampling of the next token over the children: child ``k`` is taken
with exactly its target probability. When no child is taken, or after ``accept_index.shape[1] - 1``
accepted tokens, the last accepted node's token is drawn with ``uniform_samples_for_final_sampling``
from its target distribution with the rejected children's mass removed, renormalized (first index
whose running sum exceeds ``coin * total``). So every committed token is distributed as the target
model samples it, whatever the tree.

Two deliberate differences from the kernel, both only where the kernel itself goes wrong:

* a child whose token equals an earlier, rejected sibling's is skipped (its mass is already
  removed). The kernel adds the token's probability once per copy, which takes a token proposed
  ``c`` times with up to ``c`` times its probability (SGLang's n-gram trees pad with repeated token
  0). On trees with distinct siblings the two agree exactly.
* when the residual distribution has no mass left (float rounding after the rejected children held
  all of it), the token is drawn from the unmodified target row with the same coin; the kernel
  would commit token ``vocab - 1``.

``top_k_renorm_prob`` / ``top_p_renorm_prob`` keep the top-k tokens / the smallest prefix of the
descending order whose mass reaches ``top_p`` (a token is kept while the mass before it is
``<= top_p``, ties broken by ``torch.sort``, as SGLang's pytorch sampler does) and renormalize.
Applied one after the other, top-p would see the top-k renormalized row. SGLang's own sampler
(``top_k_top_p_min_p_sampling_from_probs_torch``, and FlashInfer's ``filter_apply_order="joint"`` on
GPU) applies both filters to the same unfiltered row, so a row that came out of
``top_k_renorm_prob`` carries the mass it kept (``_ssr_top_k_mass``) and ``top_p_renorm_prob``
compares against the unfiltered cumulative mass: the verify step then samples from exactly the
distribution plain decoding samples from. (FlashInfer's separate renorm kernels, which SGLang's GPU
verify calls in sequence, give the top-k-first order instead: fewer tokens when both filters are set.)
"""

from __future__ import annotations

from typing import Union

import numpy as np
import torch

__all__ = [
    "tree_speculative_sampling_target_only",
    "top_k_renorm_prob",
    "top_p_renorm_prob",
    "PYTHON_OPS",
]

# Attributes a top-k-renormalized batch carries: per row, the probability mass the filter kept; and a
# bound on every row's nonzero count (the vocabulary if some row is unfiltered).
TOP_K_MASS_ATTR = "_ssr_top_k_mass"
TOP_K_WIDTH_ATTR = "_ssr_top_k_width"
TOP_P_FIRST_WIDTH = 256  # leading tokens top-p orders first (widened x8 while a row needs more)


def _per_row(values: Union[torch.Tensor, float, int], rows: int, dtype) -> torch.Tensor:
    if isinstance(values, torch.Tensor):
        v = values.reshape(-1).to(dtype)
        if v.numel() == 1 and rows != 1:
            v = v.expand(rows)
        return v
    return torch.full((rows,), values, dtype=dtype)


def top_k_renorm_prob(probs: torch.Tensor, top_k: Union[torch.Tensor, int]) -> torch.Tensor:
    """Zero all but each row's ``top_k`` largest probabilities (``top_k >= vocab``: keep all), renormalize.

    The result carries the kept mass per row (see the module docstring) for ``top_p_renorm_prob``.
    """
    p = probs.float()
    rows, vocab = p.shape
    k = _per_row(top_k, rows, torch.int64).clamp(min=1, max=vocab)
    out = p.clone()
    sel = (k < vocab).nonzero().reshape(-1)
    width = vocab
    if sel.numel():
        ks = k[sel]
        kmax = int(ks.max())
        vals, idx = torch.topk(p[sel], kmax, dim=-1)  # O(vocab) per row, not a sort of the row
        vals = vals.masked_fill(torch.arange(kmax).unsqueeze(0) >= ks.unsqueeze(1), 0.0)
        out[sel] = torch.zeros(sel.numel(), vocab).scatter_(1, idx, vals)
        if sel.numel() == rows:
            width = kmax
    kept = out.sum(-1)
    out = out / kept.clamp_min(torch.finfo(torch.float32).tiny).unsqueeze(1)
    setattr(out, TOP_K_MASS_ATTR, kept)
    setattr(out, TOP_K_WIDTH_ATTR, width)
    return out


def top_p_renorm_prob(probs: torch.Tensor, top_p: Union[torch.Tensor, float]) -> torch.Tensor:
    """Keep, per row, the tokens of the descending order whose preceding mass is ``<= top_p``; renormalize.

    On a row from :func:`top_k_renorm_prob`, the preceding mass is measured in the unfiltered row
    (SGLang's joint top-k/top-p order); otherwise in ``probs`` itself. Only the leading tokens are
    ordered (``torch.topk``, widened until every row's kept set is inside), not the whole vocabulary.
    """
    p = probs.float()
    rows, vocab = p.shape
    tp = _per_row(top_p, rows, torch.float32).unsqueeze(1)
    scale = getattr(probs, TOP_K_MASS_ATTR, None)
    scale = None if scale is None else scale.reshape(-1, 1)
    width = min(vocab, getattr(probs, TOP_K_WIDTH_ATTR, None) or TOP_P_FIRST_WIDTH)
    while True:
        if width * 4 > vocab:  # most of the row: one sort beats a wide top-k
            width = vocab
            vals, idx = p.sort(dim=-1, descending=True)
        else:
            vals, idx = torch.topk(p, width, dim=-1)
        run = vals.cumsum(-1)
        if scale is not None:
            run = run * scale
        # a token outside the leading ``width`` has at least their mass before it (dropped if > top_p)
        # or no mass at all
        if width == vocab or bool(((run[:, -1:] > tp) | (vals[:, -1:] <= 0)).all()):
            break
        width *= 8
    before = run - (vals * scale if scale is not None else vals)
    vals = vals.masked_fill(before > tp, 0.0)
    out = torch.zeros_like(p).scatter_(1, idx, vals)
    return out / out.sum(-1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny)


def _children_parents(nxt: list, sib: list, n: int) -> list:
    """Parent node of every node reachable through first-child / next-sibling links (-1: none)."""
    parent = [-1] * n
    stack = [0]
    seen = {0}
    while stack:
        c = stack.pop()
        k = nxt[c]
        while 0 <= k < n and k not in seen:
            seen.add(k)
            parent[k] = c
            stack.append(k)
            k = sib[k]
    return parent


def tree_speculative_sampling_target_only(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    uniform_samples: torch.Tensor,
    uniform_samples_for_final_sampling: torch.Tensor,
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    threshold_single: float = 1.0,
    threshold_acc: float = 1.0,
    deterministic: bool = True,
) -> None:
    """Tree speculative sampling with target probabilities only, in place (see the module docstring).

    Shapes as the CUDA op's: ``candidates`` / ``retrive_*`` / ``uniform_samples`` ``[bs, n]``,
    ``target_probs`` / ``draft_probs`` ``[bs, n, vocab]``, ``accept_index`` ``[bs, steps]`` (pre-filled
    with -1 by the caller; entries past the accepted ones are left alone), ``accept_token_num``
    ``[bs]`` (accepted drafts, the final token excluded), ``predicts`` ``[bs * n]``: for every accepted
    node including the last, the token that follows it (flat index ``retrive_index``). Rejected
    children's target probabilities are written into ``draft_probs`` at their parent's row, as the
    kernel does. ``deterministic`` is accepted for the signature; this op always is.
    """
    del deterministic
    if not 0.0 <= float(threshold_single) <= 1.0 or not 0.0 <= float(threshold_acc) <= 1.0:
        raise ValueError("tree_speculative_sampling_target_only: thresholds must lie in [0, 1]")
    bs, n = candidates.shape[0], candidates.shape[1]
    if bs == 0:
        return
    steps = accept_index.shape[1]
    vocab = target_probs.shape[-1]
    tp = target_probs.reshape(bs, n, vocab)
    if tp.dtype != torch.float32:
        tp = tp.float()
    dp = draft_probs.view(bs, n, vocab)
    t_single = np.float32(threshold_single)
    t_acc = np.float32(max(float(np.float32(threshold_acc)), 1e-9))

    cand_t = candidates.reshape(bs, n).long()
    cand = cand_t.tolist()
    ridx = retrive_index.reshape(bs, n).tolist()
    nxt = retrive_next_token.reshape(bs, n).tolist()
    sib = retrive_next_sibling.reshape(bs, n).tolist()
    coins = uniform_samples.reshape(bs, n).float().numpy()

    # Probability of every node's token under its parent's row: the only entries the walk reads.
    parents = [_children_parents(nxt[b], sib[b], n) for b in range(bs)]
    par_t = torch.tensor(parents, dtype=torch.int64).clamp_min(0)
    valid = (cand_t >= 0) & (cand_t < vocab)
    node_p = tp[torch.arange(bs).unsqueeze(1), par_t, cand_t.clamp(0, vocab - 1)]
    node_p = torch.where(valid, node_p, torch.zeros_like(node_p)).numpy()

    pred_idx: list = []
    pred_val: list = []
    rej_rows: list = []
    rej_toks: list = []
    final_rows: list = []
    final_last: list = []
    use_draft: list = []
    acc_num: list = []
    for b in range(bs):
        last = int(ridx[b][0])
        accept_index[b, 0] = last
        row = 0  # node whose target row the next level is read from
        coin = coins[b, 0]
        prob_acc = np.float32(0.0)
        accepted = 0
        cur = 0
        for _ in range(1, steps):
            cur = int(nxt[b][cur])
            rejected: set = set()
            while cur != -1:
                tok = cand[b][cur]
                if tok in rejected:  # a repeated sibling: its mass is gone already
                    cur = int(sib[b][cur])
                    continue
                p = node_p[b, cur]
                prob_acc = np.float32(prob_acc + p)
                if p > 0 and (coin < np.float32(prob_acc / t_acc) or p >= t_single):
                    prob_acc = np.float32(0.0)
                    row = cur
                    coin = coins[b, cur]
                    pred_idx.append(last)
                    pred_val.append(tok)
                    accepted += 1
                    last = int(ridx[b][cur])
                    accept_index[b, accepted] = last
                    break
                rejected.add(tok)
                if 0 <= tok < vocab:
                    rej_rows.append((b, row))
                    rej_toks.append(tok)
                cur = int(sib[b][cur])
            if cur == -1:
                break
        acc_num.append(accepted)
        final_rows.append(row)
        final_last.append(last)
        use_draft.append(accepted != steps - 1)  # the bonus token has no draft probabilities

    if rej_toks:
        rb = torch.tensor([r[0] for r in rej_rows])
        rr = torch.tensor([r[1] for r in rej_rows])
        rt = torch.tensor(rej_toks)
        dp[rb, rr, rt] = tp[rb, rr, rt].to(dp.dtype)

    # Final token of every request: from relu(target - draft) at its last accepted node.
    brange = torch.arange(bs)
    frows = torch.tensor(final_rows)
    q = tp[brange, frows]
    p = dp[brange, frows].float() * torch.tensor(use_draft, dtype=torch.float32).unsqueeze(1)
    res = (q - p).clamp_min(0.0)
    final_coin = uniform_samples_for_final_sampling.reshape(-1)[:bs].float()
    sampled = _sample_rows(res, final_coin)
    empty = res.sum(-1) <= 0
    if bool(empty.any()):
        sampled = torch.where(empty, _sample_rows(q, final_coin), sampled)

    pred_idx.extend(final_last)
    pred_val.extend(sampled.tolist())
    flat = predicts.view(-1)
    flat[torch.tensor(pred_idx, dtype=torch.int64)] = torch.tensor(pred_val, dtype=torch.int64).to(flat.dtype)
    accept_token_num.view(-1)[:bs] = torch.tensor(acc_num).to(accept_token_num.dtype)


def _sample_rows(weights: torch.Tensor, coins: torch.Tensor) -> torch.Tensor:
    """Per row: the first index with positive weight whose running sum exceeds ``coin * total``.

    If rounding leaves none, the last index with positive weight; if the row has none, the last index.
    """
    vocab = weights.shape[-1]
    cdf = weights.cumsum(-1)
    u = coins * cdf[:, -1]
    positive = weights > 0
    hit = (cdf > u.unsqueeze(1)) & positive
    idx = torch.arange(vocab).unsqueeze(0).expand_as(weights)
    first = torch.where(hit, idx, vocab).amin(-1)
    last_valid = torch.where(positive, idx, -1).amax(-1)
    fallback = torch.where(last_valid >= 0, last_valid, vocab - 1)
    return torch.where(first < vocab, first, fallback)


# ``sgl_kernel`` Python names these stand in for (served by the stand-in module, as in ops.PYTHON_OPS).
PYTHON_OPS = {
    "tree_speculative_sampling_target_only": tree_speculative_sampling_target_only,
    "top_k_renorm_prob": top_k_renorm_prob,
    "top_p_renorm_prob": top_p_renorm_prob,
}
