"""Token-tree layout for tree verification (SGLang NGRAM verify format).

A verification tree has ``num_nodes`` nodes.  Node 0 is the last committed
token; every other node is a proposed token.  Candidate branches (token
lists continuing from node 0) are merged into a trie, so shared prefixes
become shared nodes, and the trie is laid out in BFS order, which gives
``parent[i] < i`` for every node ``i > 0``.

Outputs, for ``n = num_nodes``:

* ``tokens``  int64[n]    -- node tokens (node 0 = ``last_token``)
* ``mask``    bool[n * n] -- row-major; ``mask[i * n + j]`` iff node ``j``
  is an ancestor-or-self of node ``i``
* ``parents`` int64[n]    -- parent index, ``-1`` for the root

Unused slots are padding: leaves under the root (parent 0, so a padding row
has ``mask[i][0] = mask[i][i] = 1``) whose tokens are the smallest ids not
already taken by a child of the root.  No node ever has two children with
the same token: a sampling verifier that accumulates the target probability
over tried siblings would count a duplicated token twice and accept it with
probability up to ``k * p`` instead of ``p`` (:func:`distinct_siblings`
enforces this on trees built elsewhere).  When the branches need more than
``n - 1`` nodes, branches earlier in the list (higher priority) are kept
first and the first branch that does not fit is truncated.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import List, Sequence, Tuple

import numpy as np

__all__ = ["TokenTree", "layout_tree", "build_tree", "build_chain", "node_labels", "trie_size",
           "nodes_in_use_batch", "parents_from_mask", "parents_batch", "distinct_siblings", "distinct_siblings_batch",
           "duplicate_siblings"]

PAD_TOKEN = 0
NO_LABEL = -1


@dataclass
class TokenTree:
    """A laid-out tree plus bookkeeping useful for attribution.

    ``labels[i]`` is the index of the first (highest-priority) branch that
    contains node ``i`` (``-1`` for the root and padding); ``depth[i]`` is the
    distance from the root; ``num_real`` counts root + proposed nodes (the
    rest is padding).
    """

    tokens: np.ndarray
    mask: np.ndarray
    parents: np.ndarray
    labels: np.ndarray
    depth: np.ndarray
    num_real: int

    def as_tuple(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.tokens, self.mask, self.parents


def _check_num_nodes(num_nodes: int) -> None:
    if not isinstance(num_nodes, (int, np.integer)) or num_nodes < 1:
        raise ValueError(f"num_nodes must be a positive int, got {num_nodes!r}")


def _mask_from_parents(parents: Sequence[int], n: int) -> np.ndarray:
    """Row-major ancestor-or-self mask; ``parents[i] < i`` for ``i > 0``.

    Rows are built as Python-int bitsets (row[i] = row[parent] | bit i)
    and unpacked in one vectorised call: much cheaper than one NumPy
    operation per row for the small trees used in verification.
    """
    rows = [1]
    for i in range(1, n):
        rows.append(rows[parents[i]] | (1 << i))
    width = (n + 7) // 8
    raw = b"".join(r.to_bytes(width, "little") for r in rows)
    bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8).reshape(n, width), axis=1, bitorder="little")
    return bits[:, :n].astype(bool).reshape(-1)


def layout_tree(last_token: int, branches: Sequence[Sequence[int]], num_nodes: int) -> TokenTree:
    """Merge ``branches`` into a trie and lay it out BFS (see module doc)."""
    _check_num_nodes(num_nodes)
    n = int(num_nodes)
    budget = n - 1
    # Trie in insertion order: child dicts map token -> node id (creation order).
    children: List[dict] = [{}]
    tok: List[int] = [int(last_token)]
    label: List[int] = [NO_LABEL]
    for b, branch in enumerate(branches):
        node = 0
        for t in branch:
            t = int(t)
            nxt = children[node].get(t)
            if nxt is None:
                if budget == 0:
                    break
                budget -= 1
                nxt = len(tok)
                children[node][t] = nxt
                children.append({})
                tok.append(t)
                label.append(b)
            node = nxt
        if budget == 0:
            break
    # BFS renumbering; dict order = insertion order = branch priority.
    order = [0]
    par = [-1]
    new_id = {0: 0}
    head = 0
    while head < len(order):
        old = order[head]
        for child in children[old].values():
            new_id[child] = len(order)
            order.append(child)
            par.append(head)
        head += 1
    real = len(order)
    pad = n - real
    par.extend([0] * pad)
    depth = [0] * n
    for i in range(1, n):
        depth[i] = depth[par[i]] + 1
    root_kids = {tok[c] for c in children[0].values()}
    tokens = np.array([tok[o] for o in order] + _unused_tokens(root_kids, pad), dtype=np.int64)
    labels = np.array([label[o] for o in order] + [NO_LABEL] * pad, dtype=np.int64)
    mask = _mask_from_parents(par, n)
    parents = np.array(par, dtype=np.int64)
    depth = np.array(depth, dtype=np.int64)
    return TokenTree(tokens, mask, parents, labels, depth, real)


def _unused_tokens(taken, k: int) -> List[int]:
    """The ``k`` smallest non-negative token ids not in ``taken``."""
    out, t = [], PAD_TOKEN
    while len(out) < k:
        if t not in taken:
            out.append(t)
        t += 1
    return out


def build_tree(last_token: int, branches: Sequence[Sequence[int]], num_nodes: int):
    """``(tokens, mask, parents)`` for a tree of candidate branches."""
    return layout_tree(last_token, branches, num_nodes).as_tuple()


@lru_cache(maxsize=256)
def _chain_layout(n: int, k: int):
    parents = np.zeros(n, dtype=np.int64)
    parents[0] = -1
    parents[1 : k + 1] = np.arange(k)
    mask = np.eye(n, dtype=bool)
    mask[:, 0] = True
    mask[: k + 1, : k + 1] = np.tri(k + 1, dtype=bool)
    return mask.reshape(-1), parents


def build_chain(last_token: int, chain: Sequence[int], num_nodes: int):
    """Fast path for a single branch: ``(tokens, mask, parents)``.

    Equivalent to ``build_tree(last_token, [chain], num_nodes)``; the mask
    and parents only depend on (num_nodes, len) and are cached (copies are
    returned, so callers may modify them).
    """
    _check_num_nodes(num_nodes)
    n = int(num_nodes)
    k = min(len(chain), n - 1)
    tokens = np.zeros(n, dtype=np.int64)
    tokens[0] = last_token
    if k:
        tokens[1 : k + 1] = chain[:k]
    if n - 1 - k:
        tokens[k + 1 :] = _unused_tokens({int(chain[0])} if k else set(), n - 1 - k)
    mask, parents = _chain_layout(n, k)
    return tokens, mask.copy(), parents.copy()


def node_labels(branches: Sequence[Sequence[int]], num_nodes: int) -> np.ndarray:
    """Per-node index of the first branch containing it (-1: root/padding)."""
    return layout_tree(0, branches, num_nodes).labels


def trie_size(branches: Sequence[Sequence[int]]) -> int:
    """Number of non-root nodes after merging ``branches`` into a trie."""
    seen = set()
    for branch in branches:
        for i in range(1, len(branch) + 1):
            seen.add(tuple(branch[:i]))
    return len(seen)


def nodes_in_use_batch(tokens, parents) -> np.ndarray:
    """Nodes of each of ``B`` laid-out trees up to its last real one, from their ``(B, n)`` tokens and
    parents (:func:`parents_batch`): padding is token 0 hanging off the root, as SGLang's n-gram corpus
    pads (read it before :func:`distinct_siblings` renames the padding). A real token 0 proposed right
    after the root looks the same; counting it as padding only proposes less, never anything wrong.

    >>> nodes_in_use_batch(np.array([[9, 5, 0, 0], [9, 0, 0, 0]]), np.array([[-1, 0, 0, 0]] * 2)).tolist()
    [2, 1]
    """
    real = (np.asarray(tokens) != 0) | (np.asarray(parents) != 0)
    real[:, 0] = True
    return real.shape[1] - np.argmax(real[:, ::-1], axis=1)


@lru_cache(maxsize=64)
def _strictly_lower(n: int) -> np.ndarray:
    return np.tri(n, k=-1, dtype=bool)


def parents_from_mask(mask, n: int) -> np.ndarray:
    """Parent of every node of an ``n``-node tree given its ancestor-or-self mask (``-1`` for the root).

    Any parent-before-child order works: a node's ancestors form a chain whose deepest member has the
    largest index.  Example: ``n = 3``, rows ``[1,0,0] [1,1,0] [1,1,1]`` (a chain) -> ``[-1, 0, 1]``.
    """
    return _parents(mask, n)[0]


def _parents(mask, n: int) -> np.ndarray:
    """:func:`parents_from_mask` of every tree in ``mask`` (``B * n * n`` values): a ``(B, n)`` array."""
    rows = np.asarray(mask, dtype=bool).reshape(-1, n, n) & _strictly_lower(n)
    last = n - 1 - np.argmax(rows[:, :, ::-1], axis=2)
    return np.where(rows.any(axis=2), last, -1).astype(np.int64)


def parents_batch(mask, n: int) -> np.ndarray:
    """The parent of every node of every tree in ``mask`` (``B * n * n`` values, flat or not): a ``(B, n)``
    array, -1 for the roots.

    >>> parents_batch(build_chain(9, [5, 6], 3)[1], 3).tolist()
    [[-1, 0, 1]]
    """
    return _parents(mask, n)


def _sibling_groups(tokens, parents) -> dict:
    groups: dict = {}
    for i, p in enumerate(parents.tolist()[1:], 1):
        groups.setdefault(p, []).append(i)
    return groups


def duplicate_siblings(tokens, mask, n: int) -> int:
    """How many nodes carry the same token as an earlier sibling (0 for a tree a verifier may take)."""
    dups = 0
    for kids in _sibling_groups(tokens, parents_from_mask(mask, n)).values():
        dups += len(kids) - len({int(tokens[i]) for i in kids})
    return dups


def distinct_siblings(tokens, mask, n: int, parents=None) -> int:
    """Give every node whose token repeats an earlier sibling's the smallest id no sibling has, in place.

    The tree stays a valid proposal (any token may be proposed; verification decides), and no two
    siblings share a token.  Returns how many nodes were renamed.  ``parents``: the tree's parents
    where already known (then ``mask`` is not read).  Example: SGLang's n-gram padding
    ``tokens = [t, 5, 0, 0, 0]`` with all four nodes under the root becomes ``[t, 5, 0, 1, 2]``.
    """
    if len(set(tokens[1:].tolist())) == n - 1:  # no token repeats anywhere: nothing to rename
        return 0
    renamed = 0
    parents = parents_from_mask(mask, n) if parents is None else np.asarray(parents)
    for kids in _sibling_groups(tokens, parents).values():
        if len(kids) < 2:
            continue
        taken = {int(tokens[i]) for i in kids}
        if len(taken) == len(kids):
            continue
        seen, fresh = set(), (t for t in range(PAD_TOKEN, PAD_TOKEN + 2 * len(kids) + 1) if t not in taken)
        for i in kids:
            t = int(tokens[i])
            if t in seen:
                tokens[i] = next(fresh)
                renamed += 1
            seen.add(t)
    return renamed


def distinct_siblings_batch(tokens: np.ndarray, mask, n: int, parents=None) -> int:
    """:func:`distinct_siblings` for ``B`` trees at once, vectorised (the same renaming; cheaper than a loop
    over the trees from about 6 trees on): ``tokens`` a writable ``(B, n)`` array (renamed in place),
    ``mask`` their ``B * n * n`` ancestor-or-self masks, or ``parents`` their ``(B, n)`` parents where
    already known; returns the nodes renamed in all.

    Among the children of one parent, the first holder of a token keeps it; the ``r``-th later repeat
    (``r`` counted over all repeats under that parent, in node order) gets the ``r``-th smallest id
    at or above ``PAD_TOKEN`` that no child of that parent carries.  Example (one tree, ``n = 5``,
    all under the root): ``[7, 1, 1, 0, 0]`` -> repeats are nodes 2 and 4, the free ids are 2, 3, ...,
    so the tree becomes ``[7, 1, 2, 0, 3]``.
    """
    b = tokens.shape[0]
    if b == 0 or n < 3:
        return 0  # at most one child: nothing can repeat
    parents = _parents(mask, n) if parents is None else np.array(parents, dtype=np.int64)  # a copy: changed below
    parents[:, 0] = n  # the root has no siblings: a group of its own
    earlier = (parents[:, :, None] == parents[:, None, :]) & _strictly_lower(n)  # [b, i, j]: sibling j before i
    repeat = (earlier & (tokens[:, :, None] == tokens[:, None, :])).any(axis=2)
    if not repeat.any():
        return 0
    rank = (earlier & repeat[:, None, :]).sum(axis=2)  # repeats before i under the same parent
    ids = PAD_TOKEN + np.arange(2 * n + 1)  # children < n, so n taken ids leave >= n free ones
    holds = (tokens[:, :, None] == ids).astype(np.float32)  # [b, j, id]: node j carries id
    child_of = (parents[:, None, :] == np.arange(n + 1)[None, :, None]).astype(np.float32)  # [b, p, j]
    taken = np.matmul(child_of, holds) > 0  # [b, p, id]: a child of p carries id
    free_before = np.cumsum(~taken[np.arange(b)[:, None], parents], axis=2)  # [b, i, id]: free ids up to id
    nth_free = np.argmax(free_before == rank[:, :, None] + 1, axis=2)
    tokens[repeat] = ids[nth_free[repeat]]
    return int(repeat.sum())
