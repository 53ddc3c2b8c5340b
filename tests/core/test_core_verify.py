"""Reference verifiers: greedy correctness and stochastic losslessness."""

import itertools
import random

import numpy as np
from hypothesis import given, settings, strategies as st
from scipy.stats import chisquare

from ssr_sglang.core.tree import build_chain, build_tree
from ssr_sglang.core.verify import children_lists, verify_greedy, verify_stochastic

V = 4


def model_probs(prefix, seed=0):
    """A fixed random next-token distribution for every prefix (some zeros)."""
    r = random.Random(hash((seed,) + tuple(prefix)))
    w = np.array([r.random() ** 2 for _ in range(V)])
    w[r.randrange(V)] = 0.0  # one impossible token per context
    return w / w.sum()


def node_prefixes(tokens, parents):
    pre = {0: ()}
    for i in range(1, len(tokens)):
        pre[i] = pre[int(parents[i])] + (int(tokens[i]),)
    return pre


def sample_first_k(tokens, parents, k, rng, seed):
    pre = node_prefixes(tokens, parents)
    probs = np.stack([model_probs(pre[i], seed) for i in range(len(tokens))])
    path, tok = verify_stochastic(tokens, parents, probs, rng)
    out = [int(tokens[i]) for i in path[1:]] + [tok]
    while len(out) < k:
        out.append(int(rng.choice(V, p=model_probs(tuple(out), seed))))
    return tuple(out[:k])


def check_lossless(tokens, parents, k=2, samples=12000, seed=0):
    rng = np.random.default_rng(seed)
    outcomes = list(itertools.product(range(V), repeat=k))
    expected = np.array([np.prod([model_probs(o[:j], seed)[o[j]] for j in range(k)]) for o in outcomes])
    counts = {o: 0 for o in outcomes}
    for _ in range(samples):
        counts[sample_first_k(tokens, parents, k, rng, seed)] += 1
    obs = np.array([counts[o] for o in outcomes])
    support = expected > 0
    assert obs[~support].sum() == 0, "sampled a zero-probability sequence"
    _, p = chisquare(obs[support], expected[support] * samples)
    assert p > 1e-3, p


def test_stochastic_chain_is_lossless():
    # an arbitrary chain, and the model's own greedy chain (mostly accepted)
    tokens, _, parents = build_chain(0, [2, 1, 3], 4)
    check_lossless(tokens, parents, k=2, samples=6000, seed=1)
    greedy = []
    for _ in range(3):
        greedy.append(int(np.argmax(model_probs(tuple(greedy), 4))))
    tokens, _, parents = build_chain(0, greedy, 4)
    check_lossless(tokens, parents, k=3, samples=8000, seed=4)


def test_stochastic_tree_with_siblings_is_lossless():
    # several siblings at the root (including a duplicate token 1) and below
    tokens = np.array([0, 1, 2, 1, 3, 0, 2, 1, 3], dtype=np.int64)
    parents = np.array([-1, 0, 0, 0, 0, 1, 1, 2, 5], dtype=np.int64)
    check_lossless(tokens, parents, k=2, seed=2)
    tokens, _, parents = build_tree(0, [[1, 0, 3], [1, 2], [2, 1], [3, 3], [0]], 9)
    check_lossless(tokens, parents, k=3, samples=15000, seed=3)


def test_stochastic_deterministic_target_accepts_matching_path():
    tokens, _, parents = build_tree(0, [[1, 2], [3, 1]], 5)
    probs = np.zeros((5, V))
    probs[:, 0] = 1.0
    probs[0] = np.eye(V)[3]  # root predicts 3
    assert tokens.tolist() == [0, 1, 3, 2, 1]  # BFS: root, 1, 3, 1-2, 3-1
    probs[2] = np.eye(V)[1]  # node "3" predicts 1
    probs[4] = np.eye(V)[2]  # node "3,1" predicts 2
    path, tok = verify_stochastic(tokens, parents, probs, np.random.default_rng(0))
    assert [int(tokens[i]) for i in path[1:]] == [3, 1] and tok == 2


@settings(max_examples=200, deadline=None)
@given(branches=st.lists(st.lists(st.integers(0, 3), max_size=5), max_size=5),
       truth=st.lists(st.integers(0, 3), min_size=6, max_size=6),
       n=st.integers(1, 12))
def test_greedy_accepts_longest_true_prefix(branches, truth, n):
    tokens, _, parents = build_tree(9, branches, n)
    pre = node_prefixes(tokens, parents)
    argmax = np.array([truth[len(pre[i])] if list(pre[i]) == truth[:len(pre[i])] else 7
                       for i in range(n)])
    path, bonus = verify_greedy(tokens, parents, argmax)
    assert path[0] == 0
    for a, b in zip(path, path[1:]):
        assert parents[b] == a
    acc = [int(tokens[i]) for i in path[1:]]
    assert acc == truth[:len(acc)]
    assert bonus == truth[len(acc)]
    # no node matches a longer prefix of the truth
    longest = max(len(p) for p in pre.values() if list(p) == truth[:len(p)])
    assert len(acc) == longest


def test_children_lists():
    assert children_lists([-1, 0, 0, 1, 2, 0]) == [[1, 2, 5], [3], [4], [], [], []]
