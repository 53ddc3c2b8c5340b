"""The CPU stand-in for SGLang's tree speculative sampling (``ssr_sglang.cpu.sampling_ops``).

* exact: for given coins, the accepted path, ``predicts`` and the final token equal a brute-force walk
  written from the algorithm's definition (float64, children found by scanning parents), on random
  trees with distinct siblings and random distributions (some with zero-probability tokens, some
  with a token of probability 1), for thresholds of 1 and below;
* statistical: with many coins, the committed tokens (accepted + final), continued by sampling from
  the target, have the distribution of sampling from the target token by token (chi-square,
  alpha = 0.001, seeds fixed); the same test rejects an argmax-collapsed verify and the CUDA
  kernel's handling of repeated siblings (it counts a repeated token's mass once per copy);
* top-k / top-p renormalization gives the distribution SGLang's pytorch sampler samples from.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
import torch
from scipy import stats

from ssr_sglang.cpu import ops, sampling_ops

ALPHA = 1e-3


# --------------------------------------------------------------------------- trees


def random_tree(rng: random.Random, n: int, vocab: int, distinct: bool = True):
    """Parents (``parent[i] < i``, node 0 the root) and tokens; siblings distinct unless told otherwise."""
    parent = [-1]
    tokens = [rng.randrange(vocab)]
    for i in range(1, n):
        for _ in range(100):
            p = rng.randrange(i)
            taken = {tokens[k] for k in range(1, i) if parent[k] == p}
            free = [t for t in range(vocab) if t not in taken] if distinct else list(range(vocab))
            if free:
                break
        parent.append(p)
        tokens.append(rng.choice(free))
    return parent, tokens


def tree_links(parent):
    """``retrive_next_token`` / ``retrive_next_sibling`` from a parent list, via the NGRAM stand-in op."""
    n = len(parent)
    mask = torch.zeros(1, n, n, dtype=torch.bool)
    for i in range(n):
        j = i
        while j != -1:
            mask[0, i, j] = True
            j = parent[j]
    pos = torch.zeros(n, dtype=torch.int64)
    ridx = torch.zeros(1, n, dtype=torch.int64)
    nxt = torch.zeros(1, n, dtype=torch.int64)
    sib = torch.zeros(1, n, dtype=torch.int64)
    ops.reconstruct_indices_from_tree_mask(mask, torch.zeros(1, dtype=torch.int64), pos, ridx, nxt, sib, 1, n)
    return nxt[0].tolist(), sib[0].tolist()


def run_op(parent, tokens, probs, coins, final_coins, steps, t_single=1.0, t_acc=1.0):
    """The op on ``bs`` copies of one tree: probs [bs, n, V] (or [n, V]), coins [bs, n], final [bs]."""
    n = len(parent)
    bs = coins.shape[0]
    nxt, sib = tree_links(parent)
    probs = probs if probs.dim() == 3 else probs.unsqueeze(0).expand(bs, -1, -1)
    probs = probs.float().contiguous()
    predicts = torch.zeros(bs * n, dtype=torch.int32)
    accept_index = torch.full((bs, steps), -1, dtype=torch.int32)
    accept_num = torch.empty(bs, dtype=torch.int32)
    sampling_ops.tree_speculative_sampling_target_only(
        predicts, accept_index, accept_num,
        torch.tensor([tokens] * bs, dtype=torch.int64),
        torch.arange(bs * n, dtype=torch.int64).view(bs, n),
        torch.tensor([nxt] * bs, dtype=torch.int64), torch.tensor([sib] * bs, dtype=torch.int64),
        coins.float(), final_coins.float(), probs, torch.zeros_like(probs),
        threshold_single=t_single, threshold_acc=t_acc)
    return predicts, accept_index, accept_num


def ref_walk(parent, tokens, probs, coins, final_coin, steps, t_single=1.0, t_acc=1.0, skip_repeats=True):
    """The algorithm from its definition: returns (accepted nodes after the root, committed tokens)."""
    n = len(parent)
    q = [[float(x) for x in row] for row in probs]
    node, coin, path = 0, float(coins[0]), []
    while len(path) < steps - 1:
        kids = [k for k in range(n) if parent[k] == node]  # sibling order: ascending node id
        acc, chosen, tried = 0.0, None, set()
        for k in kids:
            t = tokens[k]
            if skip_repeats and t in tried:
                continue
            acc += q[node][t]
            if q[node][t] > 0 and (coin < acc / max(t_acc, 1e-9) or q[node][t] >= t_single):
                chosen = k
                break
            tried.add(t)
        if chosen is None:
            break
        path.append(chosen)
        node, coin = chosen, float(coins[chosen])
    committed = [tokens[k] for k in path]
    residual = list(q[node])
    if len(path) < steps - 1:
        for k in [k for k in range(n) if parent[k] == node]:
            residual[tokens[k]] = 0.0
    total = sum(residual)
    u, run = float(final_coin) * total, 0.0
    final = None
    for t, w in enumerate(residual):
        run += w
        if w > 0 and run > u:
            final = t
            break
    if final is None:
        final = max(t for t, w in enumerate(residual) if w > 0)
    return path, committed + [final]


def random_probs(rng: np.random.Generator, n: int, vocab: int) -> torch.Tensor:
    rows = []
    for _ in range(n):
        kind = rng.integers(4)
        p = rng.dirichlet(np.full(vocab, 0.5))
        if kind == 1:  # top-k filtered: zeros
            p[rng.choice(vocab, size=vocab // 2, replace=False)] = 0.0
        elif kind == 2:  # one certain token (top-k 1, or a peaked row)
            p = np.zeros(vocab)
            p[rng.integers(vocab)] = 1.0
        p = p / p.sum()
        rows.append(p)
    return torch.tensor(np.array(rows), dtype=torch.float32)


# --------------------------------------------------------------------------- exact walks


@pytest.mark.parametrize("thresholds", [(1.0, 1.0), (0.9, 0.5), (0.3, 1.0)])
def test_accepted_paths_and_tokens_match_brute_force(thresholds):
    t_single, t_acc = thresholds
    rng, nrng = random.Random(1), np.random.default_rng(1)
    checked = accepted_total = 0
    for _ in range(300):
        n, vocab = rng.randint(1, 10), rng.choice([3, 6, 17])
        parent, tokens = random_tree(rng, n, vocab)
        steps = rng.randint(1, n + 1)
        probs = random_probs(nrng, n, vocab)
        bs = 4
        coins = torch.rand(bs, n, generator=torch.Generator().manual_seed(checked))
        final = torch.rand(bs, generator=torch.Generator().manual_seed(10_000 + checked))
        predicts, accept_index, accept_num = run_op(parent, tokens, probs, coins, final, steps, t_single, t_acc)
        for b in range(bs):
            path, committed = ref_walk(parent, tokens, probs.double(), coins[b].double(), final[b].double(),
                                       steps, t_single, t_acc)
            nodes = [0] + path
            assert accept_num[b].item() == len(path)
            assert accept_index[b, : len(nodes)].tolist() == [b * n + k for k in nodes]
            assert all(x == -1 for x in accept_index[b, len(nodes):].tolist())
            assert [predicts[b * n + k].item() for k in nodes] == committed
            accepted_total += len(path)
            checked += 1
    assert accepted_total > checked // 5  # the trees do get accepted into (0.34 per walk here)


def test_rejected_children_are_recorded_as_draft_probs():
    parent, tokens = [-1, 0, 0, 0], [9, 1, 2, 3]
    probs = torch.tensor([[0.1, 0.2, 0.3, 0.25, 0.15]] + [[0.2] * 5] * 3)
    nxt, sib = tree_links(parent)
    dp = torch.zeros(1, 4, 5)
    predicts = torch.zeros(4, dtype=torch.int32)
    ai = torch.full((1, 4), -1, dtype=torch.int32)
    an = torch.empty(1, dtype=torch.int32)
    # coin 0.95 >= 0.2 + 0.3 + 0.25: every child rejected; residual {0: 0.1, 4: 0.15}; 0.5 * 0.25 -> token 4
    sampling_ops.tree_speculative_sampling_target_only(
        predicts, ai, an, torch.tensor([tokens]), torch.arange(4).view(1, 4), torch.tensor([nxt]),
        torch.tensor([sib]), torch.full((1, 4), 0.95), torch.tensor([0.5]), probs.unsqueeze(0), dp)
    assert an.tolist() == [0] and ai.tolist() == [[0, -1, -1, -1]]
    assert dp[0, 0].tolist() == pytest.approx([0.0, 0.2, 0.3, 0.25, 0.0])
    assert predicts[0].item() == 4


def test_empty_batch_and_bad_thresholds():
    z = torch.zeros(0, 3, dtype=torch.int64)
    sampling_ops.tree_speculative_sampling_target_only(
        torch.zeros(0, dtype=torch.int32), torch.zeros(0, 3, dtype=torch.int32), torch.zeros(0, dtype=torch.int32),
        z, z, z, z, torch.zeros(0, 3), torch.zeros(0), torch.zeros(0, 3, 4), torch.zeros(0, 3, 4))
    with pytest.raises(ValueError):
        sampling_ops.tree_speculative_sampling_target_only(
            torch.zeros(3, dtype=torch.int32), torch.zeros(1, 3, dtype=torch.int32),
            torch.zeros(1, dtype=torch.int32), torch.zeros(1, 3, dtype=torch.int64),
            torch.zeros(1, 3, dtype=torch.int64), torch.zeros(1, 3, dtype=torch.int64),
            torch.zeros(1, 3, dtype=torch.int64), torch.zeros(1, 3), torch.zeros(1), torch.zeros(1, 3, 4),
            torch.zeros(1, 3, 4), threshold_acc=1.5)


def test_no_residual_mass_falls_back_to_the_target_row():
    # The children hold all the mass, but the coin lies above their float32 sum: nothing to resample from.
    parent, tokens = [-1, 0, 0], [5, 0, 1]
    probs = torch.tensor([[0.5, 0.5, 0.0], [1 / 3] * 3, [1 / 3] * 3])
    nxt, sib = tree_links(parent)
    predicts = torch.zeros(3, dtype=torch.int32)
    an = torch.empty(1, dtype=torch.int32)
    sampling_ops.tree_speculative_sampling_target_only(
        predicts, torch.full((1, 3), -1, dtype=torch.int32), an, torch.tensor([tokens]), torch.arange(3).view(1, 3),
        torch.tensor([nxt]), torch.tensor([sib]), torch.tensor([[1.0, 0.0, 0.0]]), torch.tensor([0.7]),
        probs.unsqueeze(0), torch.zeros(1, 3, 3))
    assert an.item() == 0 and predicts[0].item() == 1  # from [0.5, 0.5, 0] with coin 0.7, never token 2


# --------------------------------------------------------------------------- distributions


class PrefixModel:
    """A target model over a small vocabulary: the next-token distribution is a random function of
    the whole prefix (so every tree node, which stands for one prefix, has its own)."""

    def __init__(self, vocab: int, seed: int):
        self.vocab, self.seed, self.cache = vocab, seed, {}

    def probs(self, prefix: tuple) -> np.ndarray:
        if prefix not in self.cache:
            g = np.random.default_rng([self.seed, len(prefix), *prefix])
            p = g.dirichlet(np.full(self.vocab, 0.8))
            if g.random() < 0.3:  # a filtered row
                p[g.choice(self.vocab, size=self.vocab // 2, replace=False)] = 0.0
                p /= p.sum()
            self.cache[prefix] = p.astype(np.float32).astype(np.float64)
            self.cache[prefix] /= self.cache[prefix].sum()
        return self.cache[prefix]

    def exact(self, length: int) -> dict:
        out = {}
        for seq in itertools.product(range(self.vocab), repeat=length):
            pr = 1.0
            for i, t in enumerate(seq):
                pr *= self.probs(seq[:i])[t]
                if pr == 0:
                    break
            if pr > 0:
                out[seq] = pr
        return out


def node_prefixes(parent, tokens):
    """Tokens each node stands for after the root (the root: the empty continuation)."""
    out = []
    for i in range(len(parent)):
        seq, j = [], i
        while j > 0:
            seq.append(tokens[j])
            j = parent[j]
        out.append(tuple(reversed(seq)))
    return out


def chi_square_p(samples: list, exact: dict) -> float:
    """Goodness of fit of ``samples`` (tuples) to ``exact``; categories expected < 5 pooled."""
    n = len(samples)
    counts = {}
    for s in samples:
        counts[s] = counts.get(s, 0) + 1
    assert set(counts) <= set(exact), "a sequence the target gives probability 0"
    big = [s for s, p in exact.items() if p * n >= 5]
    obs = [counts.get(s, 0) for s in big]
    exp = [exact[s] * n for s in big]
    rest_obs, rest_exp = n - sum(obs), n - sum(exp)
    if rest_exp >= 5:
        obs.append(rest_obs)
        exp.append(rest_exp)
    else:
        exp = [e * n / sum(exp) for e in exp]
        obs[-1] += rest_obs
    return stats.chisquare(obs, exp).pvalue


def sample_committed(model, parent, tokens, steps, n_samples, seed, length, walker=None):
    """Run the verify step ``n_samples`` times (fresh coins), continue each by sampling from the target
    to ``length`` tokens, and return the sequences."""
    n = len(parent)
    prefixes = node_prefixes(parent, tokens)
    probs = torch.tensor(np.array([model.probs(p) for p in prefixes]), dtype=torch.float32)
    g = torch.Generator().manual_seed(seed)
    coins, final = torch.rand(n_samples, n, generator=g), torch.rand(n_samples, generator=g)
    if walker is None:
        predicts, accept_index, accept_num = run_op(parent, tokens, probs, coins, final, steps)
        committed = []
        for b in range(n_samples):
            nodes = accept_index[b, : accept_num[b].item() + 1].tolist()
            committed.append([predicts[k].item() for k in nodes])
    else:
        committed = [walker(probs, coins[b], final[b]) for b in range(n_samples)]
    rng = np.random.default_rng(seed)
    out = []
    for seq in committed:
        seq = list(seq)
        while len(seq) < length:
            seq.append(int(rng.choice(model.vocab, p=model.probs(tuple(seq)))))
        out.append(tuple(seq[:length]))
    return out


TREES = [  # (parent, tokens): chains, a bushy root, a deep branching tree
    ([-1, 0, 1, 2], [0, 1, 2, 3]),
    ([-1, 0, 0, 0, 0], [0, 0, 1, 2, 3]),
    ([-1, 0, 0, 1, 1, 2, 3], [0, 2, 0, 1, 3, 1, 0]),
]


@pytest.mark.parametrize("tree", range(len(TREES)))
def test_committed_tokens_are_distributed_as_the_target(tree):
    parent, tokens = TREES[tree]
    model = PrefixModel(vocab=4, seed=tree)
    length, steps = 3, len(parent)
    samples = sample_committed(model, parent, tokens, steps, 12_000, seed=100 + tree, length=length)
    p = chi_square_p(samples, model.exact(length))
    assert p > ALPHA, p


def test_random_trees_commit_the_target_distribution():
    rng = random.Random(7)
    pvalues = []
    for i in range(6):
        vocab = 3
        parent, tokens = random_tree(rng, rng.randint(3, 8), vocab)
        model = PrefixModel(vocab=vocab, seed=50 + i)
        samples = sample_committed(model, parent, tokens, rng.randint(2, len(parent)), 4_000, seed=i, length=3)
        pvalues.append(chi_square_p(samples, model.exact(3)))
    # six independent tests: each at alpha / 6 (Bonferroni)
    assert min(pvalues) > ALPHA / 6, pvalues


def test_repeated_siblings_keep_the_target_distribution():
    """SGLang's n-gram trees pad with repeated tokens under one parent. The stand-in counts a token's
    mass once; the CUDA kernel's walk (every copy adds its mass) over-samples the repeated token, and
    the same test catches that."""
    parent, tokens = [-1, 0, 0, 0, 0], [0, 1, 0, 0, 0]  # token 0 proposed three times at the root
    model = PrefixModel(vocab=3, seed=3)
    model.cache[()] = np.array([0.3, 0.3, 0.4])
    exact = model.exact(2)
    ours = sample_committed(model, parent, tokens, 2, 6_000, seed=5, length=2)
    assert chi_square_p(ours, exact) > ALPHA

    def kernel_as_written(probs, coins, final):
        _, committed = ref_walk(parent, tokens, probs.double(), coins.double(), final.double(), 2,
                                skip_repeats=False)
        return committed

    theirs = sample_committed(model, parent, tokens, 2, 6_000, seed=5, length=2, walker=kernel_as_written)
    assert chi_square_p(theirs, exact) < ALPHA


def test_the_test_rejects_an_argmax_verify():
    """Power check of the statistical test: SGLang's old CPU verify (argmax at every position)."""
    parent, tokens = TREES[0]
    model = PrefixModel(vocab=4, seed=0)

    def argmax_walk(probs, coins, final):
        seq = []
        for _ in range(len(parent)):
            seq.append(int(np.argmax(model.probs(tuple(seq)))))
        return seq

    samples = sample_committed(model, parent, tokens, len(parent), 2_000, seed=1, length=3, walker=argmax_walk)
    assert chi_square_p(samples, model.exact(3)) < ALPHA


# --------------------------------------------------------------------------- top-k / top-p


def sglang_filtered(probs, top_ks, top_ps):
    """The distribution SGLang's pytorch sampler draws from, via its own filtered weights."""
    from sglang.srt.layers.sampler import top_k_top_p_min_p_sampling_from_probs_torch

    _, weights, idx, _ = top_k_top_p_min_p_sampling_from_probs_torch(
        probs.clone(), top_ks, top_ps, torch.zeros(len(probs)), False, None, torch.zeros(len(probs)),
        return_filtered_probs=True)
    out = torch.zeros_like(probs).scatter_(1, idx.long(), weights)
    return out / out.sum(-1, keepdim=True)


@pytest.mark.parametrize("case", ["top_k", "top_p", "both"])
def test_top_k_top_p_renorm_match_sglang_sampler(case):
    g = torch.Generator().manual_seed(3)
    rows, vocab = 64, 50
    probs = torch.softmax(torch.randn(rows, vocab, generator=g) * 2.5, -1)
    top_ks = torch.randint(1, 12, (rows,), generator=g, dtype=torch.int32)
    top_ps = torch.rand(rows, generator=g) * 0.9 + 0.1
    if case == "top_k":
        top_ps = torch.ones(rows)
    if case == "top_p":
        top_ks = torch.full((rows,), 1 << 30, dtype=torch.int32)
    out = probs
    if case != "top_p":
        out = sampling_ops.top_k_renorm_prob(out, top_ks)
    if case != "top_k":
        out = sampling_ops.top_p_renorm_prob(out, top_ps)
    ref = sglang_filtered(probs, top_ks, top_ps)
    assert torch.allclose(out, ref, atol=1e-6), (out - ref).abs().max()
    assert torch.allclose(out.sum(-1), torch.ones(rows), atol=1e-5)


@pytest.mark.parametrize("case", ["top_k", "top_p", "both"])
def test_large_vocab_mixed_rows_match_sglang_sampler(case):
    """Past 1024 tokens top-p orders only the leading tokens (widened while a row needs more), and rows
    without a top-k sit beside rows with one."""
    g = torch.Generator().manual_seed(4)
    rows, vocab = 24, 5000
    scale = torch.tensor([0.05, 1.0, 3.0, 8.0]).repeat(rows // 4).unsqueeze(1)  # flat ... peaked rows
    probs = torch.softmax(torch.randn(rows, vocab, generator=g) * scale, -1)
    top_ks = torch.where(torch.arange(rows) % 3 == 0, 1 << 30, torch.randint(1, 3000, (rows,), generator=g))
    top_ps = torch.rand(rows, generator=g) * 0.9 + 0.1
    if case == "top_k":
        top_ps = torch.ones(rows)
    if case == "top_p":
        top_ks = torch.full((rows,), 1 << 30)
    out = probs
    if case != "top_p":
        out = sampling_ops.top_k_renorm_prob(out, top_ks.int())
    if case != "top_k":
        out = sampling_ops.top_p_renorm_prob(out, top_ps)
    # top-p 1 in SGLang's sampler still drops tail tokens whose float32 mass before them exceeds 1;
    # verify applies no top-p when no row asks for it
    ref = sglang_filtered(probs, top_ks.int(), top_ps if case != "top_k" else torch.full((rows,), 2.0))
    assert torch.equal(out > 0, ref > 0)
    assert torch.allclose(out, ref, atol=1e-6), (out - ref).abs().max()


def test_top_k_keeps_exactly_k_and_top_p_alone_measures_its_input():
    probs = torch.tensor([[0.4, 0.3, 0.2, 0.1]])
    k2 = sampling_ops.top_k_renorm_prob(probs, torch.tensor([2]))
    assert k2.tolist()[0] == pytest.approx([4 / 7, 3 / 7, 0, 0])
    assert sampling_ops.top_k_renorm_prob(probs, torch.tensor([1 << 30])).tolist()[0] == pytest.approx(probs[0].tolist())
    # top-p 0.5 on a top-2 row: joint with the unfiltered row (mass before the 2nd token 0.4 <= 0.5: kept) ...
    assert sampling_ops.top_p_renorm_prob(k2, torch.tensor([0.5])).tolist()[0] == pytest.approx([4 / 7, 3 / 7, 0, 0])
    # ... while on a plain row of the same values top-p measures that row (4/7 > 0.5: dropped)
    plain = torch.tensor([[4 / 7, 3 / 7, 0.0, 0.0]])
    assert sampling_ops.top_p_renorm_prob(plain, torch.tensor([0.5])).tolist()[0] == pytest.approx([1, 0, 0, 0])
