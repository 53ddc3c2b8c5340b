"""The cost-aware drafting policy (:mod:`ssr_sglang.core.policy`) on a simulated server.

A request reasons ``R`` tokens (1.5 per step), then answers 90 tokens. A draft forked ``d``
reasoning tokens before the answer gives 7 answer tokens per verify step over what it had written
when the answer began if ``d <= 24``, and 2 otherwise (a late draft knows the answer, an early one
mostly does not); without a draft the answer runs at 1.8 tokens per step. A draft writes 90 tokens,
2 per step unseeded and 8 per step seeded (a newer draft replaces the running one); while it runs
every step costs ``extra`` more. The two regimes differ only in ``extra``: a CPU, where a draft in
the batch costs 40% of a step, and a GPU, where it costs almost nothing.
"""

from __future__ import annotations

import random

import pytest

from ssr_sglang.core.policy import CONTROL_EVERY, CONTROL_SOON, MIN_HISTORY, DraftPolicy, RequestView, bucket

STEP = 0.008
ANSWER = 90
A_PLAIN, A_DRAFT = 1.8, 7.0


def _serve(policy, R, extra, mode, rng):
    """One request; ``mode``: 'auto' (the policy), 'none', or an int (a draft every that many tokens).
    Returns (seconds, drafts forked)."""
    t, r, steps = 0.0, 0.0, 0
    forks, written = [], []  # per draft: reasoning tokens at its fork, tokens it wrote
    control = None  # auto: the engine asks at the request's first decision point (start_request)
    while r < R:
        running = bool(forks) and written[-1] < ANSWER
        seconds = STEP + (extra if running else 0.0)
        policy.observe_step(1, int(running), seconds * rng.uniform(0.97, 1.03), True)
        t += seconds
        steps += 1
        r = min(R, r + 1.5)
        if running:
            written[-1] = min(ANSWER, written[-1] + (8 if len(forks) > 1 else 2))
            if written[-1] == ANSWER:
                policy.observe_draft(len(forks) > 1, ANSWER, ANSWER // (8 if len(forks) > 1 else 2))
        if r >= R or mode == "none":
            continue
        if mode == "auto":
            control = policy.start_request() if control is None else control
            view = RequestView(int(r), r / steps, 1, bool(forks), 512, False,
                               (forks[-1], written[-1], running) if forks else None)
            fork = not control and bool(policy.decide(view).fork)
        else:
            fork = int(r) // mode > len(forks)
        if fork:
            policy.observe_prefill(STEP)  # a draft's prefill (a few forced tokens) costs about a step
            t += STEP
            forks.append(int(r))
            written.append(0)
    # The answer runs on the best draft over what it had written, at 1.8 tokens per step after that.
    rates = [7.0 if R - c <= 24 else 2.0 for c in forks]
    answer_steps = min([w / a + (ANSWER - w) / A_PLAIN for a, w in zip(rates, written)], default=ANSWER / A_PLAIN)
    t += answer_steps * STEP
    for _ in range(int(answer_steps)):
        policy.observe_step(1, 0, STEP, False)
    best = min(range(len(forks)), key=lambda k: written[k] / rates[k] + (ANSWER - written[k]) / A_PLAIN, default=None)
    ssr = (written[best], round(written[best] / rates[best])) if best is not None and written[best] else (0, 0)
    plain = (ANSWER - ssr[0], max(1, round((ANSWER - ssr[0]) / A_PLAIN)))
    replays = [(c, w, max(1, round(w / a))) for c, w, a in zip(forks, written, rates) if w]
    policy.observe_request(int(R), ANSWER, plain, ssr, replays, control=bool(control) or not forks)
    return t, len(forks)


def _run(extra, mode, n=120, seed=0):
    rng = random.Random(seed)
    policy = DraftPolicy(max_accept=12)
    times, drafts = [], []
    for _ in range(n):
        t, k = _serve(policy, rng.randint(60, 110), extra, mode, rng)
        times.append(t)
        drafts.append(k)
    tail = slice(n // 2, None)  # after the policy has learned
    return sum(times[tail]) / len(times[tail]), sum(drafts[tail]) / len(drafts[tail])


def test_cpu_regime_never_worse_than_no_drafts():
    """Drafts cost 40% of a step: the policy does no worse than not drafting (but for <1% of
    re-measuring the draft cost now and then), where a badly chosen
    schedule loses 11%. The best schedule gains 8% here through seeded drafts that write fast
    whatever their seed (a property of this simulation) -- gains the policy does not expect before it
    has measured a seeded draft, so it stays within 10% of it."""
    auto, _ = _run(0.4 * STEP, "auto")
    none, *fixed = [_run(0.4 * STEP, m)[0] for m in ("none", 8, 16, 32)]
    assert auto <= none * 1.01, (auto, none)
    assert auto <= min(fixed) * 1.1, (auto, fixed)
    assert max(fixed) > none * 1.05  # a schedule can lose


def test_gpu_regime_drafts_and_gains():
    """Drafts nearly free: the policy drafts and gains (18% over no drafts here), within 12% of the
    best fixed schedule, without being told the reasoning lengths (its control requests, one in
    ``CONTROL_EVERY`` served without drafts, cost about 1% of that)."""
    auto, drafts = _run(0.001 * STEP, "auto")
    none, _ = _run(0.001 * STEP, "none")
    best_fixed = min(_run(0.001 * STEP, m)[0] for m in (8, 16, 32))
    assert auto < none * 0.9, (auto, none)
    assert auto <= best_fixed * 1.12, (auto, best_fixed)
    assert drafts >= 2


def test_expensive_drafts_are_fewer():
    cpu_time, cpu_drafts = _run(0.4 * STEP, "auto")
    gpu_time, gpu_drafts = _run(0.001 * STEP, "auto")
    assert gpu_drafts > 3 * max(cpu_drafts, 0.1)
    assert gpu_time < cpu_time


def test_drafts_that_cannot_pay_are_not_forked():
    """When drafts never match (a model whose answer changes to the end), the policy stops drafting."""
    policy = DraftPolicy()
    for _ in range(40):
        policy.observe_step(1, 0, STEP, True)
        policy.observe_step(1, 1, STEP * 1.4, True)
    policy.observe_prefill(0.02)
    for R in range(60, 110, 2):
        policy.observe_request(R, ANSWER, (ANSWER, 50), (0, 0), [(R - 20, 90, 50), (R - 5, 90, 50)])
    d = policy.decide(RequestView(80, 1.5, 1, False, 512, False))
    assert d.fork is False and d.reason == "cost >= saving", d


def test_cold_start_and_lengths_beyond_history_defer_to_the_schedule():
    policy = DraftPolicy()
    view = RequestView(50, 1.5, 1, False, 512, False)
    assert policy.decide(view).fork is None  # no history
    for R in (60, 70, 80, 90):
        policy.observe_request(R, ANSWER, (ANSWER, 50), (0, 0), [])
    assert policy.decide(view).fork is None  # no draft-free step measured at this batch size
    policy.observe_step(1, 0, STEP, True)
    assert policy.decide(view).fork is not None
    d = policy.decide(RequestView(85, 1.5, 1, False, 512, False))  # longer than all but one
    assert d.fork is None and "longer than" in d.reason


def test_settled_requests_stop_drafting_and_inputs_are_reported():
    policy = DraftPolicy()
    for R in (60, 70, 80, 90, 100):
        policy.observe_request(R, ANSWER, (ANSWER, 50), (0, 0), [])
    policy.observe_step(1, 0, STEP, True)
    d = policy.decide(RequestView(50, 1.5, 1, True, 512, True))
    assert d.fork is False and d.reason.startswith("settled")
    d = policy.decide(RequestView(50, 1.5, 1, True, 512, False))
    assert d.reason.startswith("exploring") and d.fork
    out = d.as_dict(50)
    assert {"at", "fork", "reason", "saving_s", "a_plain", "a_self", "step_s"} <= set(out)


def test_a_stale_cost_is_measured_again():
    from ssr_sglang.core.policy import STALE_STEPS

    policy = DraftPolicy(max_accept=12)
    for R in (60, 70, 80, 90, 100):
        policy.observe_request(R, ANSWER, (ANSWER, 50), (0, 0), [])
    for _ in range(10):
        policy.observe_step(1, 0, STEP, True)
        policy.observe_step(1, 1, STEP * 10, True)  # drafts looked very expensive, once
    view = RequestView(55, 1.5, 1, False, 512, False)
    assert policy.decide(view).reason == "cost >= saving"
    for _ in range(STALE_STEPS + 1):
        policy.observe_step(1, 0, STEP, True)
    d = policy.decide(view)
    assert d.fork and d.reason.startswith("exploring"), d


def test_unanswered_requests_make_drafts_worthless():
    """Requests that end inside their reasoning (token limit) contribute no match: a server whose
    requests never reach an answer stops drafting."""
    policy = DraftPolicy()
    for R in (60, 70, 80, 90, 100, 110):
        policy.observe_request(R, 0, (0, 0), (0, 0), [])
    policy.observe_request(50, ANSWER, (ANSWER, 50), (0, 0), [])
    assert policy._values(55, 1.5, 90, 2.0, 1.8, 55, 0).sum() == 0.0


def test_draft_cap_follows_answer_lengths():
    policy = DraftPolicy()
    assert policy.draft_cap(512) == 512
    for a in (80, 90, 100, 95, 85):
        policy.observe_request(70, a, (a, 40), (0, 0), [])
    assert policy.draft_cap(512) == int(1.25 * 95) + 8
    assert policy.draft_cap(64) == 64


def test_bucket():
    assert [bucket(n) for n in (0, 1, 2, 3, 4, 7, 8, 1000)] == [0, 1, 2, 2, 3, 3, 4, 10]
    assert MIN_HISTORY >= 1


def _measured(policy, batch_sizes, extra):
    """Draft-free and draft-carrying reasoning steps at each batch size, a prefill, and history."""
    for b in batch_sizes:
        for _ in range(10):
            policy.observe_step(b, 0, STEP, True)
            policy.observe_step(b, 1, STEP + extra, True)
    policy.observe_prefill(STEP)
    for R in range(60, 110, 5):
        policy.observe_request(R, ANSWER, (ANSWER, 50), (ANSWER, 13), [(R - 10, ANSWER, 13)])


def test_a_draft_costs_every_request_that_shares_its_steps():
    """Same step costs at batch 1 and 8: a draft that pays for one request alone does not pay
    when eight requests each wait for its share of every step (and its prefill)."""
    policy = DraftPolicy(max_accept=12)
    _measured(policy, (1, 8), 0.1 * STEP)
    one = policy.decide(RequestView(85, 1.5, 1, False, 512, False))
    eight = policy.decide(RequestView(85, 1.5, 8, False, 512, False))
    assert one.fork is True and one.inputs["sharers"] == 1, one
    assert eight.fork is False and eight.inputs["sharers"] == 8, eight
    assert eight.inputs["cost_s"] == pytest.approx(8 * one.inputs["cost_s"])


def test_one_exploring_draft_at_a_time_per_batch_size():
    """Many requests reaching a decision at a batch size whose draft cost is unknown: one draft is
    granted to measure it; the others wait, then may explore again if no figures came."""
    from ssr_sglang.core.policy import EXPLORE_GAP

    policy = DraftPolicy(max_accept=12)
    _measured(policy, (1,), 0.001 * STEP)  # nearly free at batch 1: worth measuring at batch 4
    for _ in range(5):
        policy.observe_step(4, 0, STEP, True)  # batch 4: steps measured, no draft yet
    view = RequestView(85, 1.5, 4, False, 512, False)
    first, second = policy.decide(view), policy.decide(view)
    assert first.fork is True and first.reason.startswith("exploring"), first
    assert second.fork is False and "another draft is measuring" in second.reason, second
    assert policy.decide(RequestView(85, 1.5, 1, False, 512, False)).fork is True  # other batch sizes unaffected
    for _ in range(EXPLORE_GAP):
        policy.observe_step(4, 0, STEP, True)
    assert policy.decide(view).fork is True


def test_a_plain_comes_from_control_requests_once_one_answered():
    """Draft-free steps of drafting requests are where the drafts had nothing to offer (hard text): a
    biased sample. Once a control request (served without drafts) has answered, a_plain is its rate,
    and the saving a draft is credited with shrinks accordingly."""
    policy = DraftPolicy(max_accept=12)
    for _ in range(40):
        policy.observe_step(1, 0, STEP, True)
        policy.observe_step(1, 1, STEP * 1.1, True)
    policy.observe_prefill(0.005)
    for R in range(60, 110, 10):  # drafting requests: their few draft-free steps committed 1.2 tokens each
        policy.observe_request(R, ANSWER, (12, 10), (78, 12), [(R - 10, ANSWER, 13)])
    assert policy.a_plain() == pytest.approx(1.2)
    view = RequestView(50, 1.5, 1, False, 512, False)
    biased = policy.decide(view)
    assert [policy.start_request() for _ in range(MIN_HISTORY + 1)] == [False] * MIN_HISTORY + [True]
    policy.observe_request(80, ANSWER, (ANSWER, 30), (0, 0), [], control=True)  # 3 tokens per step
    assert policy.a_plain() == pytest.approx(3.0)
    fair = policy.decide(view)
    assert fair.inputs["a_plain"] == pytest.approx(3.0) and fair.inputs["saving_s"] < biased.inputs["saving_s"]
    assert policy.summary()["a_plain_control_steps"] == 30


def _past_learning(extra: float) -> DraftPolicy:
    """A policy past its learning requests whose draft costs ``extra`` more per reasoning step."""
    policy = DraftPolicy(max_accept=12)
    for _ in range(40):
        policy.observe_step(1, 0, STEP, True)
        policy.observe_step(1, 1, STEP + extra, True)
    policy.observe_prefill(0.005)
    for R in range(60, 110, 10):
        policy.observe_request(R, ANSWER, (ANSWER, 30), (ANSWER, 12), [(R - 10, ANSWER, 13)])
    return policy


def test_requests_answered_without_drafts_refresh_a_plain_and_defer_forced_controls():
    """Where the policy drafts rarely, every draft-free answer is a control sample: one unusual early
    answer (4.6 tokens per step, a repetitive text n-grams serve well) stops weighing within a few
    requests, and no request has to be served without drafts on purpose."""
    policy = _past_learning(0.001)
    assert [policy.start_request() for _ in range(MIN_HISTORY + 1)][-1] is True  # the first forced control
    policy.observe_request(80, 92, (92, 20), (0, 0), [], control=True)
    assert policy.a_plain() == pytest.approx(4.6)
    forced = 0
    for _ in range(CONTROL_EVERY * 2):
        forced += policy.start_request()
        policy.observe_request(80, ANSWER, (ANSWER, 50), (0, 0), [], control=True)  # 1.8 tokens per step
    assert forced == 0
    assert policy.a_plain() == pytest.approx(1.8)


def test_a_plain_follows_the_recent_control_requests():
    """The server's n-gram corpus grows with its traffic, and with it the draft-free answer rate: old
    control requests drop out of a_plain."""
    policy = _past_learning(0.001)
    for steps in (45, 45, 30, 30, 30, 30):  # 2, 2, then 3 tokens per step
        policy.observe_request(80, ANSWER, (ANSWER, steps), (0, 0), [], control=True)
    assert policy.a_plain() == pytest.approx(3.0)
    assert policy.summary()["a_plain_control_steps"] == 210


def test_controls_come_sooner_while_the_first_draft_decision_hinges_on_a_plain():
    REST = CONTROL_EVERY - MIN_HISTORY - 2  # requests left before CONTROL_EVERY since the last control answered
    view = RequestView(50, 1.5, 1, False, 512, False)

    def controls_after_a_decision(factor):
        policy = _doubtful(factor)
        [policy.start_request() for _ in range(MIN_HISTORY + 1)]  # the first control request
        d = policy.decide(view)
        # the control request of _doubtful answered MIN_HISTORY + 1 requests ago
        return d, sum(policy.start_request() for _ in range(REST))

    near, soon = controls_after_a_decision(1.05)  # cost just above the saving: hinges on a_plain
    far, later = controls_after_a_decision(20)  # far above: a_plain cannot change it
    assert near.fork is False and far.fork is False
    assert soon == REST // CONTROL_SOON and later == 0


def test_exploring_a_batch_size_weighs_the_cost_measured_at_another():
    """No draft measured at batch 2 yet: where the cost measured at batch 1 (halved) already outweighs
    the saving for two sharers, no exploring draft is forked; where drafts are nearly free (a GPU),
    one is, to measure batch 2's own cost."""
    from ssr_sglang.core.policy import EXPLORE_DISCOUNT

    view = RequestView(85, 1.5, 2, False, 512, False)
    for extra, explores in ((STEP, False), (0.001 * STEP, True)):
        policy = DraftPolicy(max_accept=12)
        _measured(policy, (1,), extra)
        for _ in range(5):
            policy.observe_step(2, 0, STEP, True)  # batch 2: steps measured, no draft yet
        d = policy.decide(view)
        assert d.fork is explores and d.reason.startswith("exploring"), d
        assert d.inputs["draft_step_source"] == "estimated from batch size 1-1"
        assert d.inputs["draft_step_s"] == pytest.approx(EXPLORE_DISCOUNT * extra, rel=0.05)
        if not explores:
            assert "no gain at 0.5x the cost estimated from batch size 1-1" in d.reason, d


def _doubtful(factor: float) -> DraftPolicy:
    """Past learning, one control request (3 answer tokens per step), unseeded drafts measured at 2
    tokens per step, and a draft step cost ``factor`` times the one at which a first draft breaks even."""
    def make(extra):
        policy = _past_learning(extra)
        policy.observe_draft(False, ANSWER, 45)
        policy.observe_request(80, ANSWER, (ANSWER, 30), (0, 0), [], control=True)
        return policy

    d = make(0.0).decide(RequestView(50, 1.5, 1, False, 512, False))
    return make(factor * (d.inputs["saving_s"] - d.inputs["prefill_s"]) / d.inputs["draft_steps"])


def test_in_doubt_about_a_plain_a_marginal_draft_waits_for_control_requests():
    """A first draft that pays at the measured a_plain but not at a 25% higher one is declined while
    fewer than CONTROL_WINDOW control requests measured a_plain, and forked once they have (same rate);
    one that pays by a wide margin is forked at once."""
    from ssr_sglang.core.policy import CONTROL_WINDOW

    view = RequestView(50, 1.5, 1, False, 512, False)
    policy = _doubtful(0.95)
    d = policy.decide(view)
    assert d.fork is False and d.reason.startswith("in doubt"), d
    assert d.inputs["saving_s"] > d.inputs["cost_s"]
    for _ in range(CONTROL_WINDOW - 1):
        policy.observe_request(80, ANSWER, (ANSWER, 30), (0, 0), [], control=True)
    d = policy.decide(view)
    assert d.fork is True and d.reason == "saving > cost", d
    d = _doubtful(0.3).decide(view)
    assert d.fork is True and d.reason == "saving > cost", d


def test_the_step_after_a_draft_leaves_is_no_sample_of_a_draft_free_step():
    """A step right after a draft left the batch also finishes the draft's work (its last outputs, its
    release). Counted as a draft-free step it raises the baseline and hides the drafts' cost: with
    short gaps between drafts (one such step and one ordinary draft-free step each), a draft that
    costs 1 ms a step would read as free."""
    def measured(flag):
        policy = DraftPolicy()
        for _ in range(16):
            for _ in range(20):
                policy.observe_step(1, 1, STEP + 0.001, True)
            policy.observe_step(1, 0, STEP + 0.004, True, after_draft=flag)
            policy.observe_step(1, 0, STEP, True)
        s = policy.summary()
        return s["draft_step_s"][1], s["reasoning_step_s"][1]

    extra, step = measured(True)
    assert abs(extra - 0.001) < 1e-9 and abs(step - STEP) < 1e-9
    extra, _ = measured(False)
    assert extra < 0.0


def _measured_by_context(per_1k: float, prefill_per_1k: float = 0.0) -> DraftPolicy:
    """A policy past its learning requests whose drafts cost ``per_1k`` seconds per reasoning step per 1000
    tokens of their context (a draft's decode re-reads its whole KV cache) and whose forks' prefills cost
    ``prefill_per_1k`` per 1000 tokens, both measured at contexts of 2k to 32k tokens."""
    policy = DraftPolicy(max_accept=12)
    for k in range(64):
        context = (2000, 8000, 32000)[k % 3]
        policy.observe_step(1, 0, STEP, True)
        policy.observe_step(1, 1, STEP + 0.0001 * STEP + per_1k * context / 1000, True, draft_context=context)
        policy.observe_prefill(0.001 + prefill_per_1k * context / 1000, context=context)
    for R in range(60, 110, 10):
        policy.observe_request(R, ANSWER, (ANSWER, 30), (ANSWER, 12), [(R - 10, ANSWER, 13)])
    return policy


def test_a_drafts_cost_is_priced_by_its_context_length():
    """Issue 36: measured costs that grow with the drafts' context (2k to 32k tokens here) price a draft
    forked at 32k above one forked at 2k: the same request forks at a short context and not at a long one."""
    short = RequestView(50, 1.5, 1, False, 512, False, context_tokens=2000)
    long_ = RequestView(50, 1.5, 1, False, 512, False, context_tokens=32000)
    policy = _measured_by_context(0.03 * STEP)  # +3% of a step per 1000 tokens of context
    s, l_ = policy.decide(short), policy.decide(long_)
    assert s.inputs["draft_step_s"] < l_.inputs["draft_step_s"]
    assert l_.inputs["draft_step_s"] == pytest.approx(0.03 * STEP * (32000 + 45) / 1000, rel=0.05)
    assert s.fork is True and l_.fork is False, (s, l_)
    assert policy.summary()["draft_step_s_per_1k_context"][1] == pytest.approx(0.03 * STEP, rel=0.05)
    # the context unknown (0): the median of all samples, as before
    assert policy.decide(RequestView(50, 1.5, 1, False, 512, False)).inputs["draft_step_s"] == pytest.approx(
        0.0001 * STEP + 0.03 * STEP * 8, rel=0.05)


def test_a_forks_prefill_is_priced_by_its_context_length():
    """The fork's prefill (a pass that blocks the batch) priced at the fork's context, from samples that
    carry theirs; a cost that does not grow with context prices every context alike."""
    policy = _measured_by_context(0.0, prefill_per_1k=0.002)
    at = lambda ctx: policy.decide(RequestView(50, 1.5, 1, False, 512, False, context_tokens=ctx))  # noqa: E731
    assert at(2000).inputs["prefill_s"] == pytest.approx(0.005, rel=0.05)
    assert at(32000).inputs["prefill_s"] == pytest.approx(0.065, rel=0.05)
    assert at(32000).inputs["cost_s"] > at(2000).inputs["cost_s"] + 0.05
    flat = _measured_by_context(0.0)
    costs = {flat.decide(RequestView(50, 1.5, 1, False, 512, False, context_tokens=c)).inputs["draft_step_s"]
             for c in (2000, 32000)}
    assert len(costs) == 1


def _long_answers(short_drafts: bool) -> DraftPolicy:
    """A code model's figures (ClassEval on a CPU): answers of 480 tokens at 3.4 per step without a
    draft, reasoning of 100-160 tokens, a draft beside a 0.12 s step costs 0.034 s a step and writes 1.6
    tokens per step; a draft forked about 130 tokens before the answer lets the answer run at 5 per
    step. ``short_drafts``: the server's drafts stopped after 140 tokens (one cut short at 60), else
    after 480."""
    policy = DraftPolicy(max_accept=12)
    for _ in range(20):
        policy.observe_step(1, 0, 0.12, True)
        policy.observe_step(1, 1, 0.154, True)
    policy.observe_prefill(0.126)
    for R in range(100, 161, 10):
        policy.observe_request(R, 480, (480, 141), (0, 0), [(R - 130, 128, 26), (R - 70, 128, 26)], control=True)
    if short_drafts:
        for _ in range(8):
            policy.observe_draft(False, 140, 89)
        policy.observe_draft_cut(60)
    else:
        policy.observe_draft(False, 480, 300)
    return policy


def test_a_draft_is_priced_by_the_tokens_drafts_write_and_the_reasoning_it_runs_beside():
    """A draft costs its steps beside the reasoning: as many as it takes to write what drafts on this
    server write (not the answers' length), and no more than the reasoning has left. Drafts that write
    480 tokens have written a third by the answer and a first draft does not pay here; once drafts are
    seen to stop after about 140 tokens, most of one is written in time and it does; near the end of
    the reasoning a draft costs only the steps left."""
    view = RequestView(10, 1.5, 1, False, 512, False)
    long_, short = _long_answers(False).decide(view), _long_answers(True).decide(view)
    assert long_.inputs["draft_tokens"] == 480 and long_.fork is False and long_.reason == "cost >= saving", long_
    assert short.inputs["draft_tokens"] == pytest.approx((8 * 140 + 60 + 480) / 9)
    assert short.inputs["saving_s"] > 1.5 * long_.inputs["saving_s"]  # more of the draft is written in time
    assert short.fork is True and short.reason == "saving > cost", short
    late = _long_answers(True).decide(RequestView(120, 1.5, 1, False, 512, False))
    assert late.inputs["draft_steps"] == pytest.approx((10 + 20 + 30 + 40) / 4 / 1.5)  # reasoning of 130-160


def test_a_fork_that_pays_waits_for_a_measured_better_one():
    """Reasoning of 60-110 tokens, drafts that cost 40% of a step, and replays showing that a draft
    forked at most 24 tokens before the answer gives 7 tokens a step, an earlier one 2: at 62 tokens a
    first draft pays a little, one forked 16 or more tokens later pays more even counting the chance
    that the reasoning ends first, so the request waits; where those later fork distances were never
    replayed (only the prior says they are good), it forks now. Only a first draft waits."""
    def policy(replayed_near: bool) -> DraftPolicy:
        p = DraftPolicy(max_accept=12)
        for _ in range(20):
            p.observe_step(1, 0, STEP, True)
            p.observe_step(1, 1, 1.4 * STEP, True)
        p.observe_prefill(STEP)
        p.observe_draft(False, ANSWER, 45)
        for R in range(60, 111, 2):
            replays = [(R - 40, 60, 30), (R - 20, 60, 9)] if replayed_near else [(R - 40, 60, 30)]
            p.observe_request(R, ANSWER, (ANSWER, 50), (0, 0), replays, control=True)
        return p

    view = RequestView(62, 1.5, 1, False, 512, False)
    d = policy(True).decide(view)
    assert d.fork is False and d.reason.startswith("waiting"), d
    assert d.inputs["saving_s"] > d.inputs["cost_s"] and d.inputs["later_net_s"] > d.inputs["saving_s"] - d.inputs["cost_s"]
    assert d.inputs["wait_until"] > 62
    assert policy(True).decide(RequestView(d.inputs["wait_until"], 1.5, 1, False, 512, False)).fork is True
    assert policy(False).decide(view).fork is True
    # a newer (seeded) draft is never delayed: it is done in a few steps and leaves the draft slot free
    newer = policy(True).decide(RequestView(62, 1.5, 1, True, 512, False, latest=(10, ANSWER, False)))
    assert not newer.reason.startswith("waiting"), newer
