"""Greedy replay reproduces the target exactly, whatever the drafts are."""

import random

import pytest
from hypothesis import given, settings, strategies as st

from ssr_sglang.core.proposer import ProposerConfig
from ssr_sglang.core.simulator import simulate


def edit(seq, rng, n_edits):
    seq = list(seq)
    for _ in range(n_edits):
        op = rng.randrange(3)
        i = rng.randrange(len(seq) + 1)
        if op == 0 and i < len(seq):
            seq[i] = rng.randrange(1000, 1005)  # edited identifier
        elif op == 1:
            seq.insert(i, rng.randrange(8))
        elif seq and i < len(seq):
            del seq[i]
    return seq


def make_draft(kind, answer, rng):
    if kind == "empty":
        return []
    if kind == "equal":
        return list(answer)
    if kind == "longer":
        return list(answer) + [rng.randrange(8) for _ in range(rng.randrange(1, 30))]
    if kind == "unrelated":
        return [rng.randrange(8) for _ in range(rng.randrange(0, 80))]
    if kind == "shift_left":
        return list(answer[rng.randrange(1, 5):])
    if kind == "shift_right":
        return [rng.randrange(8) for _ in range(rng.randrange(1, 5))] + list(answer)
    if kind == "edited":
        return edit(answer, rng, rng.randrange(1, 8))
    if kind == "repeated":
        return [t for t in answer for _ in range(2)]
    if kind == "single_token":
        return [answer[0] if answer else 3] * rng.randrange(1, 40)
    raise AssertionError(kind)


KINDS = ["empty", "equal", "longer", "unrelated", "shift_left", "shift_right", "edited", "repeated", "single_token"]

configs = st.builds(
    ProposerConfig,
    max_tokens=st.integers(1, 10),
    min_match=st.integers(1, 4),
    strong_run=st.sampled_from([1, 4, 16]),
    local_candidates=st.sampled_from([0, 1, 8]),
    window=st.sampled_from([0, 8, 256]),
    answer_source=st.booleans(),
    use_prefix=st.booleans(),
    use_suffix=st.booleans(),
    max_index_tokens=st.sampled_from([0, 20, 1 << 20]),
    max_context=st.sampled_from([1, 4, 64]),
)


@settings(max_examples=250, deadline=None)
@given(
    answer=st.one_of(st.lists(st.integers(0, 7), max_size=120),
                     st.lists(st.integers(0, 1), max_size=60),
                     st.lists(st.just(5), max_size=40)),
    kinds=st.lists(st.sampled_from(KINDS), max_size=4),
    seed=st.integers(0, 10**6),
    config=configs,
    num_nodes=st.sampled_from([1, 2, 3, 5, 8, 16]),
    tree=st.booleans(),
    late=st.booleans(),
)
def test_replay_is_exact_and_never_slower(answer, kinds, seed, config, num_nodes, tree, late):
    rng = random.Random(seed)
    drafts = [make_draft(k, answer, rng) for k in kinds]
    arrivals = [rng.randrange(len(answer) + 1) for _ in drafts] if late else None
    refs = [make_draft("edited", answer, rng)] if seed % 3 == 0 else []
    rep = simulate(answer, drafts, config, num_nodes=num_nodes, tree=tree, references=refs, arrivals=arrivals)
    assert rep.output == list(answer)
    assert rep.steps <= len(answer)
    assert rep.max_step_tokens <= num_nodes
    assert rep.accepted == sum(rep.per_draft.values())
    # every step commits its accepted tokens plus at most one bonus token
    assert len(answer) - rep.steps <= rep.accepted + rep.accepted_padding + (1 if answer else 0)
    assert rep.accepted + rep.accepted_padding <= len(answer)


def test_exact_draft_gives_full_chains():
    rng = random.Random(0)
    answer = [rng.randrange(30000) for _ in range(500)]
    for tree in (False, True):
        rep = simulate(answer, [answer], ProposerConfig(max_tokens=7), num_nodes=8, tree=tree)
        assert rep.output == answer
        assert rep.steps == -(-500 // 8)  # 7 accepted + 1 bonus per step
        # the last step has no bonus token: the answer ends inside the proposal
        assert rep.accepted_prefix == 500 - rep.steps + 1 and rep.accepted_suffix == 0


def test_suffix_recovers_after_edit_and_ablations():
    rng = random.Random(1)
    answer = [rng.randrange(30000) for _ in range(400)]
    draft = list(answer)
    draft[50:50] = [7, 7, 7]  # insertion: prefix alignment breaks at 50
    cfg = dict(max_tokens=7, min_match=1)
    full = simulate(answer, [draft], ProposerConfig(**cfg), num_nodes=8)
    pre = simulate(answer, [draft], ProposerConfig(use_suffix=False, **cfg), num_nodes=8)
    suf = simulate(answer, [draft], ProposerConfig(use_prefix=False, **cfg), num_nodes=8)
    for r in (full, pre, suf):
        assert r.output == answer
    assert pre.accepted_suffix == 0 and suf.accepted_prefix == 0
    assert pre.steps > 350 - 50  # no help after the edit
    assert full.steps < 100 and full.accepted_suffix > 250
    assert suf.steps < 120


def test_later_draft_realigns():
    rng = random.Random(2)
    answer = [rng.randrange(30000) for _ in range(200)]
    bad = [rng.randrange(30000) for _ in range(200)]
    cfg = ProposerConfig(max_tokens=7, use_suffix=False)
    rep = simulate(answer, [bad, answer], cfg, num_nodes=8, arrivals=[0, 100])
    assert rep.output == answer
    assert rep.per_draft.get(1, 0) > 80 and rep.per_draft.get(0, 0) == 0
    assert rep.steps <= 100 + 15


def test_bad_arguments():
    with pytest.raises(ValueError):
        simulate([1], [[1]], num_nodes=0)
    with pytest.raises(ValueError):
        simulate([1], [[1]], arrivals=[0, 1])


@pytest.mark.parametrize("seed", range(6))
def test_replay_long_traces(seed):
    """Longer, more realistic traces: all draft kinds together, chain and tree."""
    rng = random.Random(seed)
    vocab = [rng.randrange(32000) for _ in range(40)]  # small working vocab -> repetition
    answer = [rng.choice(vocab) for _ in range(rng.randrange(300, 900))]
    drafts = [make_draft(k, answer, rng) for k in rng.sample(KINDS, 4)]
    for tree in (False, True):
        for n in (1, 4, 8):
            rep = simulate(answer, drafts, ProposerConfig(max_tokens=rng.randrange(1, 9)), num_nodes=n, tree=tree)
            assert rep.output == answer
            assert rep.steps <= len(answer) and rep.max_step_tokens <= n
