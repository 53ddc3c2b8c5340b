"""The cost-aware verify width (:mod:`ssr_sglang.core.width`) on a simulated server.

Each step verifies one request's chain of ``N`` proposed nodes at the width the policy picks; node
``j`` (1-based depth) is accepted, given its parent was, with probability ``q`` (so ``P(j on the
path) = q ** j``). An iteration costs ``FIXED + ROW * width`` seconds. Two machines differ only in
``ROW``: one where every verified row costs real compute (a CPU without matrix units) and one where
rows are nearly free (a GPU).
"""

from __future__ import annotations

import random

import pytest

from ssr_sglang.core.width import (MIN_CHOICES, PROBE_EVERY, PROBE_FREE, RATE_FREE, RECHECK_FREE, WidthPolicy,
                                     accepted_path)

N = 12
FIXED = 0.008
CHAIN_PARENTS = [-1] + list(range(N - 1))


def _serve(policy, q, row, steps=3000, seed=0, fixed_width=None):
    """Tokens per second over the last half of ``steps`` steps, and the widths chosen there."""
    rng = random.Random(seed)
    tokens = list(range(100, 100 + N))
    t = done = 0.0
    widths = []
    for i in range(steps):
        rate = True
        if fixed_width:
            w = fixed_width
        else:  # as the worker asks: rows nearly free first, else a choice from the proposals
            free = policy.free_width(1)
            w, rate = free if free is not None else (policy.width(["ngram-reasoning"], [N])[0], True)
        depth = 0
        while depth + 1 < w and rng.random() < q:
            depth += 1
        out = tokens[1:depth + 1] + [7]  # the accepted nodes' tokens, then the bonus token
        if policy is not None and rate:
            policy.observe_paths("ngram-reasoning", [accepted_path(tokens, CHAIN_PARENTS, out, depth + 1, w)], w)
        seconds = (FIXED + row * w) * rng.uniform(0.95, 1.05)
        if policy is not None:
            policy.observe_step(1, w, seconds)
        if i >= steps // 2:
            t += seconds
            done += depth + 1
            widths.append(w)
    return done / t, widths


@pytest.mark.parametrize("q", [0.3, 0.6])
def test_costly_rows_get_a_narrow_width_and_more_tokens_per_second(q):
    """Rows at 6% of a step each, nodes rarely accepted deep: the policy verifies few nodes and commits
    more tokens per second than the full width, close to the best fixed width."""
    row = 0.06 * FIXED
    auto, widths = _serve(WidthPolicy(N), q, row)
    full, _ = _serve(None, q, row, fixed_width=N)
    best = max(_serve(None, q, row, fixed_width=w)[0] for w in range(1, N + 1))
    assert auto > full * 1.1, (auto, full)
    assert auto >= best * 0.93, (auto, best)
    assert sorted(widths)[len(widths) // 2] < N // 2


def test_cheap_rows_keep_the_full_width():
    """Rows nearly free: every node that is ever accepted pays, so the width stays full (but for the
    rare probe steps at half of it), and most steps need no acceptance bookkeeping."""
    p = WidthPolicy(N)
    auto, widths = _serve(p, 0.6, 0.0001 * FIXED)
    full, _ = _serve(None, 0.6, 0.0001 * FIXED, fixed_width=N)
    assert widths.count(N) >= len(widths) * (1 - 1.5 / PROBE_EVERY)  # noisy times: a few steps leave the regime
    assert auto >= full * 0.99
    assert p.summary()["rows_nearly_free_steps"] > 0.8 * 3000


def test_free_rows_mean_the_full_width_even_for_short_proposals():
    """Where even width 1 could not gain MIN_GAIN, the step verifies every node (padding is free and
    may be accepted), probes one step in PROBE_FREE and rates one in RATE_FREE; where rows cost, the
    choice is left to :meth:`WidthPolicy.width`."""
    p = WidthPolicy(N)
    for _ in range(20):
        p.observe_step(1, N, 0.008)
        p.observe_step(1, 1, 0.008)
    plan = [p.free_width(1) for _ in range(2 * PROBE_FREE)]
    assert plan.count((N // 2, True)) == 2
    assert sum(1 for w, rate in plan if w == N and rate) == 2 * PROBE_FREE // RATE_FREE - 2
    assert sum(1 for w, _ in plan if w == N) == 2 * PROBE_FREE - 2
    costly = WidthPolicy(N)
    for _ in range(20):
        costly.observe_step(1, N, 0.008 + 0.0005 * N)
        costly.observe_step(1, 1, 0.008 + 0.0005)
    assert costly.free_width(1) is None


def test_a_rare_probe_stays_in_the_cost_fit():
    """Costs are kept per (batch size, width): one probe among thousands of full-width steps still
    gives the fit its second width."""
    p = WidthPolicy(N)
    for _ in range(3):
        p.observe_step(1, 6, 0.008)
    for _ in range(2000):
        p.observe_step(1, N, 0.008)
    assert p._fit is not None and p._fit[0] == pytest.approx(0.0, abs=1e-9)


def test_the_cost_fit_separates_per_batch_and_per_row_costs():
    """``b`` comes from widths compared at the same batch size, so a batch size seen at one width only
    (here 8) still gets its own fixed cost; sizes not seen are interpolated or extrapolated."""
    p = WidthPolicy(N)
    cost = lambda bs, w: 0.004 + 0.001 * bs + 0.0002 * bs * w  # noqa: E731
    for bs, widths in ((1, (1, 6, 12)), (2, (1, 12)), (8, (12,))):
        for w in widths:
            for _ in range(3):
                p.observe_step(bs, w, cost(bs, w))
    p._fit = p._refit()
    assert p._fit[0] == pytest.approx(0.0002)
    assert [p._fixed(bs) for bs in (1, 2, 4, 8, 16)] == pytest.approx([0.005, 0.006, 0.008, 0.012, 0.020])


def test_nothing_proposed_is_a_plain_step_and_no_fit_means_the_widest():
    p = WidthPolicy(N)
    assert p.width(["ngram-reasoning"], [1]) == (1, "nothing proposed")
    choices = [p.width(["drafts"], [9])[0] for _ in range(8)]
    assert choices == [9, 9, 9, 4] * 2  # one probe in PROBE_EARLY, at half the widest (the best so far)
    assert p.summary()["widths"] == {1: 1, 4: 2, 9: 6}


def test_accepted_path_stops_at_the_width_and_at_a_mismatch():
    tokens, parents = [9, 5, 6, 7, 8], [-1, 0, 0, 1, 3]
    assert accepted_path(tokens, parents, [5, 7, 8, 1], 4, 5) == [1, 3, 4]
    assert accepted_path(tokens, parents, [5, 7, 1], 3, 4) == [1, 3]
    assert accepted_path(tokens, parents, [6, 3], 2, 5) == [2]
    assert accepted_path(tokens, parents, [4], 1, 5) == []


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="n must be"):
        WidthPolicy(0)


def test_rows_are_judged_free_per_batch_size():
    """Matrix units make rows free at one sequence and not at eight: each batch size is judged on its own
    widths, and one seen at a single width is not judged free at all."""
    p = WidthPolicy(N)
    for _ in range(10):
        for w in (6, N):
            p.observe_step(1, w, 0.008)  # free
            p.observe_step(8, w, 0.010 + 0.0001 * 8 * w)  # 0.1 ms a row
        p.observe_step(4, N, 0.009)  # one width only
    p._fit = p._refit()
    assert p.free_width(1) is not None
    assert p.free_width(8) is None
    assert p.free_width(4) is None


def test_cached_cell_medians_give_the_fit_a_fresh_computation_gives():
    """A refit sorts again only the cells observed since the last one; the fit is the same as from
    every cell's median computed afresh, also after cells went stale and were dropped."""
    rng = random.Random(3)
    p = WidthPolicy(N)
    for i in range(1, 8001):
        bs = rng.choice((1, 2, 3, 5, 8)) if i < 3000 else rng.choice((1, 2))  # 3, 5, 8 go stale later
        w = rng.choice((1, 4, 6, 12))
        p.observe_step(bs, w, (0.004 + 0.001 * bs + 0.0002 * bs * w) * rng.uniform(0.8, 1.2))
        if i % 997 == 0 or i == 8000:
            cached = p._refit()
            for cell in p._cells.values():
                cell._stats = None
            fresh = p._refit()
            assert cached[0] == fresh[0] and list(cached[1]) == list(fresh[1]) and list(cached[2]) == list(fresh[2])
    assert all(cell._stats is not None for cell in p._cells.values()) and {bs for bs, _ in p._cells} == {1, 2}


def test_kept_costs_and_acceptance_follow_every_new_observation():
    """``f(B)`` kept per batch size and each kind's acceptance curve kept between observations are what a
    fresh computation gives after every refit and every rated step."""
    rng = random.Random(5)
    p = WidthPolicy(N)
    for i in range(1, 3001):
        bs, w = rng.choice((1, 2, 4, 6)), rng.choice((1, 6, 12))
        p.observe_step(bs, w, (0.004 + 0.001 * bs * (1 + i / 3000) + 0.0002 * bs * w) * rng.uniform(0.9, 1.1))
        p.observe_paths("k", [list(range(1, rng.randint(1, N)))], w)
        if p._fit is not None and i % 7 == 0:
            for size in (1, 3, 4, 9):
                assert p._fixed(size) == p._fixed_of_fit(size)
            acc = p._kinds["k"]
            kept = acc.cumulative()
            acc._cumulative = None
            assert kept.tolist() == acc.cumulative().tolist()



def test_rows_cheaper_than_choosing_count_as_free():
    """15 us a row at one sequence: 165 us saved at most by width 1, above 2% of an 8 ms step (160 us), so
    the width is chosen; once choosing is measured to cost 100 us a step, no width can pay for it and the
    rows count as free."""
    p = WidthPolicy(N)
    for _ in range(20):
        for w in (6, N):
            p.observe_step(1, w, 0.008 + 0.000015 * w)
    p._fit = p._refit()
    assert p.free_width(1) is None
    for _ in range(10):
        p.observe_choice(2, 0.0001)  # measured at another batch size: no bearing on one sequence
    assert p.free_width(1) is None
    for _ in range(10):
        p.observe_choice(1, 0.0001)
    assert p.free_width(1) == (N, False)
    assert p.summary()["choice_s"] == {1: pytest.approx(0.0001), 2: pytest.approx(0.0001)}
    p.observe_choice(3, 0.05)  # a slow first step (imports, allocations) weighs as one of many once they come
    for _ in range(200):
        p.observe_choice(3, 0.0001)
    assert p.summary()["choice_s"][3] < 0.0002


def _serve_output_bound(tell_tokens: bool, q=0.9, token_s=0.0003, steps=3000, seed=1):
    """One sequence; rows free, but every committed token costs ``token_s`` of output work."""
    rng = random.Random(seed)
    p = WidthPolicy(N)
    tokens = list(range(100, 100 + N))
    for _ in range(steps):
        free = p.free_width(1)
        w, rate = free if free is not None else (p.width(["k"], [N])[0], True)
        depth = 0
        while depth + 1 < w and rng.random() < q:
            depth += 1
        if rate:
            p.observe_paths("k", [accepted_path(tokens, CHAIN_PARENTS, tokens[1:depth + 1] + [7], depth + 1, w)], w)
        seconds = (FIXED + token_s * (depth + 1)) * rng.uniform(0.97, 1.03)
        p.observe_step(1, w, seconds, depth + 1 if tell_tokens else 0.0)
    return p.summary()


def test_output_work_per_token_is_not_taken_for_a_row_cost():
    """Wider steps take longer here only because they commit more tokens (each one streamed, indexed). Told
    each step's tokens, the policy fits that cost per token, finds the rows free and keeps the full width;
    from times alone it would read the output work as a row cost and stop judging the rows free."""
    told = _serve_output_bound(True)
    assert told["token_s"] == pytest.approx(0.0003, rel=0.3), told
    assert told["row_s"] < 0.00002 and told["rows_nearly_free_steps"] > 0.8 * 3000, told
    blind = _serve_output_bound(False)
    assert blind["token_s"] == 0 and blind["row_s"] > 0.00005 and blind["rows_nearly_free_steps"] < 0.5 * 3000, blind


def _serve_four(p, in_use, steps, choice_s=0.0003, row=0.00004, seed=2):
    """Four sequences a step, rows at ``row`` seconds each (not nearly free: width 1 would save far more than
    2% of a step), every tree ``in_use`` nodes deep and all of them accepted; a step whose width is chosen
    spends ``choice_s`` on it. Returns how many steps were chosen."""
    rng = random.Random(seed)
    tokens = list(range(100, 100 + N))
    chosen = 0
    for _ in range(steps):
        free = p.free_width(4)
        if free is None:
            w = p.width(["k"] * 4, [in_use] * 4)[0]
            p.observe_choice(4, choice_s)
            chosen += 1
        else:
            w = free[0]
        depth = min(w, in_use) - 1
        path = accepted_path(tokens, CHAIN_PARENTS, tokens[1:depth + 1] + [7], depth + 1, w)
        p.observe_paths("k", [path] * 4, w)
        p.observe_step(4, w, (FIXED + row * 4 * w) * rng.uniform(0.95, 1.05))
    return chosen


def test_a_choice_that_saves_less_than_it_costs_is_not_made():
    """Full trees, every node accepted: the best width is the full one, so choosing saves nothing and
    costs 0.3 ms a step; after ``MIN_CHOICES`` such steps the policy verifies every node without choosing,
    but for one step in ``RECHECK_FREE``. Where the trees are half full (6 of 12 nodes: 24 padding rows a
    step at 40 us, about 1 ms) choosing pays and every step chooses; when the traffic changes to that, a
    recheck notices and choosing resumes."""
    full = WidthPolicy(N)
    chosen = _serve_four(full, N, 3000)
    assert chosen < MIN_CHOICES + 60 + 3000 // RECHECK_FREE, chosen
    summary = full.summary()
    assert summary["choice_saving_s"][4] < summary["choice_s"][4]
    assert summary["choice_not_paying_steps"] > 2500

    half = WidthPolicy(N)
    assert _serve_four(half, 6, 3000) > 2900
    assert half.summary()["choice_saving_s"][4] > 0.0008

    assert _serve_four(full, 6, 1000, seed=3) > 900  # the same policy, once the trees are half full


def test_an_unmeasured_cost_of_choosing_never_stops_the_choice():
    """Full trees, but the cost of choosing never measured (nothing says choosing costs): every step chooses."""
    p = WidthPolicy(N)
    tokens = list(range(100, 100 + N))
    chosen = 0
    for _ in range(500):
        free = p.free_width(4)
        if free is None:
            chosen += 1
            w = p.width(["k"] * 4, [N] * 4)[0]
        else:
            w = free[0]
        p.observe_paths("k", [accepted_path(tokens, CHAIN_PARENTS, tokens[1:w] + [7], w, w)] * 4, w)
        p.observe_step(4, w, FIXED + 0.00004 * 4 * w)
    assert chosen == 500


def _serve_confounded(pair_steps: bool, steps=4000, row=0.00003, per_context_token=0.00002, seed=4):
    """Four sequences a step, in cycles of a reasoning stretch (shallow acceptance, short contexts) and an
    answer stretch (deep acceptance, long contexts). A step costs ``FIXED + row * 4 * w`` plus
    ``per_context_token`` per context token (summed over the batch), which no width changes; the policy
    narrows while reasoning and not while answering, so its wide cells also carry the long contexts.
    ``pair_steps``: the engine tells the policy which steps are consecutive."""
    rng = random.Random(seed)
    tokens = list(range(100, 100 + N))
    p = WidthPolicy(N)
    for i in range(steps):
        phase = i % 200
        kind, q = ("reasoning", 0.3) if phase < 100 else ("answer", 0.95)
        context = 4 * (100 + phase)  # grows through the cycle
        free = p.free_width(4)
        w = free[0] if free is not None else p.width([kind] * 4, [N] * 4)[0]
        depth = 0
        while depth + 1 < w and rng.random() < q:
            depth += 1
        path = accepted_path(tokens, CHAIN_PARENTS, tokens[1:depth + 1] + [7], depth + 1, w)
        p.observe_paths(kind, [path] * 4, w)
        seconds = (FIXED + row * 4 * w + per_context_token * context) * rng.uniform(0.98, 1.02)
        p.observe_step(4, w, seconds, 4.0 * (depth + 1), i if pair_steps else None)
    return p.summary()


def test_consecutive_steps_give_a_row_cost_their_contexts_do_not_bias():
    """The cells' fit reads the long contexts of the wide (answer) steps as a row cost; consecutive steps share
    their contexts, so their differences give the row cost the steps really have (30 us), and the policy
    keeps the lower. Few consecutive steps differ in width, so one run's estimate is noisy: the median of
    four runs is held to the truth, every run to far below the cells' figure."""
    cells = _serve_confounded(False)
    assert cells["row_s_by_size"][4] > 4 * 0.00003, cells
    runs = [_serve_confounded(True, seed=seed) for seed in range(4, 8)]
    own = sorted(r["row_s_by_size"][4] for r in runs)
    assert (own[1] + own[2]) / 2 == pytest.approx(0.00003, rel=0.3), own
    assert own[-1] < cells["row_s_by_size"][4] / 3, own
    assert all(r["pairs"][4][2] > 100 for r in runs)
