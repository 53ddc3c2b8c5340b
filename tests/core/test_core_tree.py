"""Token-tree layout invariants (SGLang NGRAM verify format)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ssr_sglang.core.tree import (build_chain, build_tree, distinct_siblings, distinct_siblings_batch,
                                  duplicate_siblings, layout_tree, node_labels, parents_from_mask, trie_size)

branches_st = st.lists(st.lists(st.integers(0, 4), max_size=6), max_size=6)


def ancestors_or_self(parents, i):
    out = set()
    while i != -1:
        out.add(i)
        i = int(parents[i])
    return out


def root_paths(tokens, parents, upto):
    """Token sequence from the root (exclusive) to every node < upto."""
    paths = {0: ()}
    for i in range(1, upto):
        paths[i] = paths[int(parents[i])] + (int(tokens[i]),)
    return paths


@settings(max_examples=300, deadline=None)
@given(branches=branches_st, n=st.integers(1, 20), last=st.integers(0, 100))
def test_layout_invariants(branches, n, last):
    t = layout_tree(last, branches, n)
    tokens, mask, parents = build_tree(last, branches, n)
    assert np.array_equal(tokens, t.tokens) and np.array_equal(mask, t.mask)
    assert tokens.shape == (n,) and tokens.dtype == np.int64
    assert mask.shape == (n * n,) and mask.dtype == np.bool_
    assert parents.shape == (n,)
    assert tokens[0] == last and parents[0] == -1
    real = t.num_real
    assert real == min(n, 1 + trie_size(branches))
    m2 = mask.reshape(n, n)
    for i in range(1, n):
        assert 0 <= parents[i] < i
    for i in range(n):
        anc = ancestors_or_self(parents, i)
        assert set(np.flatnonzero(m2[i])) == anc
    # BFS: depth non-decreasing; parents non-decreasing over real nodes
    assert all(t.depth[i] <= t.depth[i + 1] for i in range(real - 1))
    assert all(parents[i] <= parents[i + 1] for i in range(1, real - 1))
    # padding: leaves under the root, tokens the smallest ids no real child of the root has
    root_kids = {int(tokens[i]) for i in range(1, real) if parents[i] == 0}
    pads = [int(tokens[i]) for i in range(real, n)]
    free = [t for t in range(n + len(root_kids)) if t not in root_kids]
    assert pads == free[: len(pads)]
    for i in range(real, n):
        assert parents[i] == 0 and m2[i].sum() == (1 if i == 0 else 2)
    # no node has two children with the same token (padding included)
    assert duplicate_siblings(tokens, mask, n) == 0
    assert np.array_equal(parents_from_mask(mask, n), parents)
    # trie: no two siblings share a token; every node path is a prefix of some branch
    paths = root_paths(tokens, parents, real)
    assert len(set(paths.values())) == real
    prefixes = {()} | {tuple(b[:k]) for b in branches for k in range(len(b) + 1)}
    assert set(paths.values()) <= prefixes
    # priority: branches are kept in order; the first that does not fit is cut
    budget = n - 1
    kept = set()
    for b in branches:
        for k in range(1, len(b) + 1):
            p = tuple(b[:k])
            if p not in kept:
                if budget == 0:
                    break
                kept.add(p)
                budget -= 1
    assert set(paths.values()) - {()} == kept
    # labels: first branch containing the node
    for i in range(1, real):
        lab = t.labels[i]
        assert tuple(branches[lab][:t.depth[i]]) == paths[i]
        assert all(tuple(branches[j][:t.depth[i]]) != paths[i] for j in range(lab))
    assert np.array_equal(node_labels(branches, n), t.labels)


@settings(max_examples=200, deadline=None)
@given(chain=st.lists(st.integers(0, 50), max_size=12), n=st.integers(1, 10), last=st.integers(0, 9))
def test_chain_fast_path_matches_tree(chain, n, last):
    a = build_chain(last, chain, n)
    b = build_tree(last, [chain], n)
    for x, y in zip(a, b):
        assert np.array_equal(x, y)
        assert x.dtype == y.dtype


def test_small_example():
    tokens, mask, parents = build_tree(7, [[1, 2, 3], [1, 4], [5]], 6)
    assert tokens.tolist() == [7, 1, 5, 2, 4, 3]
    assert parents.tolist() == [-1, 0, 0, 1, 1, 3]
    m = mask.reshape(6, 6).astype(int)
    assert m[5].tolist() == [1, 1, 0, 1, 0, 1]
    tokens, mask, parents = build_tree(7, [[1]], 4)
    assert tokens.tolist() == [7, 1, 0, 2] and parents.tolist() == [-1, 0, 0, 0]
    assert mask.reshape(4, 4).astype(int).tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 0, 1]]


def test_single_node_and_errors():
    tokens, mask, parents = build_tree(3, [[1, 2]], 1)
    assert tokens.tolist() == [3] and mask.tolist() == [True] and parents.tolist() == [-1]
    with pytest.raises(ValueError):
        build_tree(3, [], 0)
    with pytest.raises(ValueError):
        build_chain(3, [], 0)


def _zero_padded(last, branches, n):
    """A tree padded as SGLang's n-gram corpus pads: token 0 under the root."""
    tree = layout_tree(last, branches, n)
    tokens = tree.tokens.copy()
    tokens[tree.num_real:] = 0
    return tokens, tree.mask, tree.num_real


def _random_tree(data, n: int, max_token: int):
    """A random parent-before-child tree of ``n`` nodes: its parents, tokens (0 .. ``max_token``) and
    ancestor-or-self mask (``n`` x ``n``)."""
    parents = [-1] + [data.draw(st.integers(0, i - 1)) for i in range(1, n)]
    tokens = np.array([data.draw(st.integers(0, max_token)) for _ in range(n)], dtype=np.int64)
    mask = np.zeros((n, n), dtype=bool)
    for i in range(n):
        j = i
        while j != -1:
            mask[i, j], j = True, parents[j]
    return parents, tokens, mask


def _in_use_from_mask(tokens, mask, n: int) -> int:
    """The reference: scan back from the last node for one that is not padding (token 0 whose mask row
    is the root and itself only)."""
    rows = np.asarray(mask).reshape(n, n)
    for i in range(n - 1, 0, -1):
        if tokens[i] != 0 or rows[i].sum() != 2 or not rows[i][0]:
            return i + 1
    return 1


def nodes_in_use(tokens, mask, n: int) -> int:
    """:func:`nodes_in_use_batch` of one tree given by its mask."""
    from ssr_sglang.core.tree import nodes_in_use_batch, parents_batch

    return int(nodes_in_use_batch(np.asarray(tokens)[None], parents_batch(mask, n))[0])


def test_nodes_in_use_finds_the_last_real_node():

    n = 8
    for branches, real in (([], 1), ([[5, 6]], 3), ([[5, 6], [5, 7, 8]], 5), ([[0, 4]], 3)):
        tokens, mask, num_real = _zero_padded(11, branches, n)
        assert num_real == real
        assert nodes_in_use(tokens, mask, n) == real, branches
    # a real 0 under the root at the end is taken for padding, which only verifies less
    tokens, mask, _ = _zero_padded(11, [[5], [0]], n)
    assert nodes_in_use(tokens, mask, n) == 2
    assert nodes_in_use(np.zeros(n, dtype=np.int64), np.eye(n, dtype=bool).reshape(-1), n) == n  # not padding


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 12), count=st.integers(1, 5), data=st.data())
def test_nodes_in_use_batch_matches_one_tree_at_a_time(n, count, data):
    """The batch form (from parents) finds the same last real node as the mask-based reference, on
    zero-padded layouts and on random trees whose tokens may be 0 anywhere."""
    from ssr_sglang.core.tree import nodes_in_use_batch, parents_batch

    tokens, masks = [], []
    for _ in range(count):
        if data.draw(st.booleans()):
            branches = data.draw(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=3), max_size=3))
            t, m, _ = _zero_padded(11, branches, n)
        else:
            _, t, m = _random_tree(data, n, 2)
        tokens.append(np.asarray(t))
        masks.append(np.asarray(m).reshape(-1))
    mask = np.concatenate(masks)
    got = nodes_in_use_batch(np.stack(tokens), parents_batch(mask, n)).tolist()
    assert got == [_in_use_from_mask(t, m, n) for t, m in zip(tokens, masks)]


def test_distinct_siblings_renames_repeats_only():
    n = 6
    tokens, mask, _ = _zero_padded(9, [[5, 0]], n)  # [9, 5, 0(child of 5), 0, 0, 0(pads under root)]
    assert tokens.tolist() == [9, 5, 0, 0, 0, 0] and duplicate_siblings(tokens, mask, n) == 2
    assert distinct_siblings(tokens, mask, n) == 2
    assert tokens.tolist() == [9, 5, 0, 0, 1, 2]  # the child of 5 keeps its 0; the first pad keeps 0
    assert duplicate_siblings(tokens, mask, n) == 0 and distinct_siblings(tokens, mask, n) == 0


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 12), data=st.data())
def test_distinct_siblings_on_random_trees(n, data):
    """Any parent-before-child tree with any (repeating) tokens: afterwards no sibling repeats, and only
    nodes that repeated an earlier sibling changed."""
    parents, tokens, mask = _random_tree(data, n, 3)
    assert parents_from_mask(mask, n).tolist() == parents
    before = tokens.copy()
    repeats = {i for i in range(1, n) if any(parents[j] == parents[i] and before[j] == before[i] for j in range(1, i))}
    assert distinct_siblings(tokens, mask.reshape(-1), n) == len(repeats)
    assert duplicate_siblings(tokens, mask.reshape(-1), n) == 0
    assert {i for i in range(n) if tokens[i] != before[i]} == repeats


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 12), count=st.integers(1, 5), data=st.data())
def test_distinct_siblings_batch_renames_each_tree_as_alone(n, count, data):
    """Trees renamed together come out as each renamed on its own (the worker renames a batch at once)."""
    trees, masks = [], []
    for _ in range(count):
        _, tokens, mask = _random_tree(data, n, 3)
        trees.append(tokens.tolist())
        masks.append(mask.reshape(-1))
    batch = np.array(trees, dtype=np.int64)
    renamed = distinct_siblings_batch(batch, np.concatenate(masks), n)
    alone = [np.array(t, dtype=np.int64) for t in trees]
    assert renamed == sum(distinct_siblings(t, m, n) for t, m in zip(alone, masks))
    assert batch.tolist() == [t.tolist() for t in alone]


def test_distinct_siblings_worked_example():
    tokens = np.array([7, 1, 1, 0, 0], dtype=np.int64)
    mask = np.zeros((5, 5), dtype=bool)
    mask[:, 0] = True
    np.fill_diagonal(mask, True)
    assert distinct_siblings(tokens, mask.reshape(-1), 5) == 2 and tokens.tolist() == [7, 1, 2, 0, 3]

