"""Reference (CPU, NumPy) verification of a proposed token tree.

Both verifiers take a tree as ``tokens``/``parents`` arrays laid out with
``parent[i] < i`` (see :mod:`ssr_sglang.core.tree`); a chain is the special
case ``parents = [-1, 0, 1, 2, ...]``.  Per-node target outputs are indexed
by node: ``target_argmax_per_node[i]`` / ``probs_per_node[i]`` is the
target model's prediction for the token *after* the path root..i.

``verify_stochastic`` is lossless because proposals are deterministic: at a
node, candidate children are tried in order; candidate ``x`` is accepted with
probability ``p(x)`` under the current residual ``p``; on rejection
``p(x)`` is zeroed and ``p`` renormalised.  So the emitted token at every
position has exactly the target's conditional distribution, whatever was
proposed.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np

__all__ = ["children_lists", "verify_greedy", "verify_stochastic", "accepted_tokens"]


def children_lists(parents: Sequence[int]) -> List[List[int]]:
    """Children of every node, in index order."""
    kids: List[List[int]] = [[] for _ in range(len(parents))]
    for i in range(1, len(parents)):
        kids[int(parents[i])].append(i)
    return kids


def verify_greedy(tokens, parents, target_argmax_per_node) -> Tuple[List[int], int]:
    """Longest accepted root-to-node path and the bonus token.

    Node ``i > 0`` is accepted iff its parent is accepted and
    ``tokens[i] == target_argmax_per_node[parents[i]]``.  The deepest
    accepted node wins (lowest index on ties); the bonus token is the
    argmax at that node.  Returns ``(path, bonus)`` with ``path[0] == 0``.
    """
    n = len(tokens)
    argmax = [int(a) for a in target_argmax_per_node]
    tok = [int(t) for t in tokens]
    par = [int(p) for p in parents]
    depth = [-1] * n  # -1: not accepted
    depth[0] = 0
    best = 0
    for i in range(1, n):
        p = par[i]
        if depth[p] >= 0 and tok[i] == argmax[p]:
            depth[i] = depth[p] + 1
            if depth[i] > depth[best]:
                best = i
    path = []
    node = best
    while node != -1:
        path.append(node)
        node = par[node]
    path.reverse()
    return path, argmax[best]


def verify_stochastic(tokens, parents, probs_per_node, rng: np.random.Generator) -> Tuple[List[int], int]:
    """Lossless sampling verification of a tree (see module docstring).

    ``probs_per_node`` is a ``[num_nodes, vocab]`` array of target
    probabilities.  Returns ``(path, token)``: the accepted node path
    (starting at 0) and the token sampled from the residual at its end.
    """
    kids = children_lists(parents)
    node = 0
    path = [0]
    while True:
        p = np.array(probs_per_node[node], dtype=np.float64, copy=True)
        total = p.sum()
        chosen = -1
        for child in kids[node]:
            x = int(tokens[child])
            px = p[x]
            if px > 0 and rng.random() * total < px:
                chosen = child
                break
            total -= px
            p[x] = 0.0
        if chosen < 0:
            total = p.sum()
            if total <= 0:
                # Every token with mass was proposed and rejected: only
                # reachable through floating-point round-off.
                p = np.asarray(probs_per_node[node], dtype=np.float64)
                total = p.sum()
            token = int(rng.choice(len(p), p=p / total))
            return path, token
        path.append(chosen)
        node = chosen


def accepted_tokens(tokens, path: Sequence[int]) -> List[int]:
    """Tokens of the accepted nodes, excluding the root."""
    return [int(tokens[i]) for i in path[1:]]
