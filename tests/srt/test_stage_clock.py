"""``StageClock`` tells the drafting policy which decode step follows a prefill pass (stand-ins for SGLang's
batches and results): that step also finishes the prefill's work, so it is no sample of a plain step; nor is
the step after a draft left the batch."""

from __future__ import annotations

from types import SimpleNamespace as NS

from ssr_sglang.srt import stage_clock
from ssr_sglang.srt.request_state import REASONING
from ssr_sglang.srt.stage_clock import StageClock


class _Policy:
    def __init__(self):
        self.calls = []
        self.contexts = []  # the drafts' mean context each call reported

    def observe_step(self, batch_size, drafts, seconds, reasoning, after_prefill=False, after_draft=False,
                     draft_context=0.0):
        self.calls.append(("step", batch_size, drafts, after_prefill) + (("after draft",) if after_draft else ()))
        self.contexts.append(draft_context)

    def free_step_s(self, batch_size):
        return None

    def observe_prefill(self, seconds, drafts=1, context=0.0):
        self.calls.append(("prefill", drafts))
        self.contexts.append(context)


def test_the_step_after_a_prefill_is_flagged_and_a_drafts_prefill_is_observed_once(monkeypatch):
    policy = _Policy()
    clock = StageClock(policy, num_nodes=8)
    now = [0.0]
    monkeypatch.setattr(stage_clock.time, "perf_counter", lambda: now[0])
    counters = lambda: NS(verify_steps=0, verify_nodes=0, draft_prefill_time_s=0.0, draft_prefill_loop_time_s=0.0)  # noqa: E731
    parent = NS(is_draft=False, rid="a", phase=REASONING, counters=counters(), note_step_time=lambda *a, **k: None)
    draft = NS(is_draft=True, rid="a#ssr-0000", parent_rid="a", phase=REASONING, counters=counters())
    states = {"a": parent, "a#ssr-0000": draft}
    # the client: 100 prompt tokens; the draft: 150 input tokens (prompt, reasoning, think end), 5 written
    reqs = {"a": NS(rid="a", origin_input_ids=[0] * 100, output_ids=[0] * 50),
            "a#ssr-0000": NS(rid="a#ssr-0000", origin_input_ids=[0] * 150, output_ids=[0] * 5)}
    decode = lambda *rids: NS(reqs=[reqs[r] for r in rids], forward_mode=NS(is_decode=lambda: True))  # noqa: E731
    prefill = lambda *rids: NS(reqs=[reqs[r] for r in rids], forward_mode=NS(is_decode=lambda: False))  # noqa: E731

    def step(batch, t):
        result = NS(copy_done=None)
        clock.step_ran(result, now[0], 8)
        now[0] += t
        clock.charge(batch, states, result)

    step(prefill("a"), 0.02)  # the client's own prefill: no draft, nothing observed
    step(decode("a"), 0.01)  # its first decode step
    step(decode("a"), 0.01)
    step(prefill("a#ssr-0000"), 0.005)  # a draft's prefill
    step(decode("a", "a#ssr-0000"), 0.012)
    step(decode("a", "a#ssr-0000"), 0.012)
    step(decode("a"), 0.014)  # the draft left: this step also finishes its work
    step(decode("a"), 0.01)
    assert policy.calls == [("step", 1, 0, True), ("step", 1, 0, False), ("prefill", 1),
                            ("step", 1, 1, True), ("step", 1, 1, False), ("step", 1, 0, False, "after draft"),
                            ("step", 1, 0, False)]
    assert abs(parent.counters.draft_prefill_time_s - 0.005) < 1e-9
    # costs are priced by context (issue 36): a draft's prefill by its input, its steps by its whole KV
    assert policy.contexts == [0.0, 0.0, 150.0, 155.0, 155.0, 0.0, 0.0]


def test_host_work_is_charged_whole_to_each_client_request_of_the_next_decode_step():
    """SSR's host work (the worker's and the hooks') delays every request of the step it precedes: each client
    request's reasoning gets all of it, drafts none, and a prefill batch leaves it for the next decode step."""
    from ssr_sglang.srt.metrics import SSRCounters
    from ssr_sglang.srt.request_state import ANSWER, RequestSSR

    clock = StageClock(None, num_nodes=8)

    def client(rid, phase):
        st = NS(is_draft=False, rid=rid, phase=phase, counters=SSRCounters())
        st.note_step_time = lambda s, d, h=0.0, st=st, **k: RequestSSR.note_step_time(st, s, d, h, **k)
        return st

    a, b = client("a", REASONING), client("b", ANSWER)
    draft = NS(is_draft=True, rid="a#ssr-0000", parent_rid="a", phase=REASONING, counters=SSRCounters())
    states = {"a": a, "b": b, "a#ssr-0000": draft}
    reqs = [NS(rid=r, origin_input_ids=[0] * 4, output_ids=[0]) for r in states]

    def step(decode: bool, host: float):
        clock.host(host)
        result = NS(copy_done=None)
        clock.step_ran(result, stage_clock.time.perf_counter(), 8)
        clock.charge(NS(reqs=reqs, forward_mode=NS(is_decode=lambda: decode)), states, result)

    step(True, 0.002)
    step(False, 0.001)  # a prefill: its host work waits for the next decode step
    step(True, 0.003)
    assert abs(a.counters.reasoning_host_time_s - 0.006) < 1e-12 and a.counters.reasoning_steps == 2
    assert b.counters.reasoning_host_time_s == 0.0  # in its answer: not reasoning time
    assert draft.counters.reasoning_host_time_s == 0.0
