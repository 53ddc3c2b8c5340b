"""The draft manager's endings, reconciliation and per-request disabling, against stand-ins for SGLang's
scheduler and requests (real :class:`DraftManager` and :class:`RequestSSR` states).

The same paths run on a real server in tests/reliability/test_lifecycle.py; here each is forced
deterministically.
"""

from __future__ import annotations

from types import SimpleNamespace as NS

from ssr_sglang.srt.config import RequestConfig, ServerConfig
from ssr_sglang.srt.draft_manager import DraftManager, unsupported_request
from ssr_sglang.srt.request_state import RequestSSR
from ssr_sglang.srt.think_ids import ThinkIds

IDS = ThinkIds(start=[1], end=[2], force=[2], force_tail=[])


def manager(**parents):
    """A manager holding ``parents`` (rid -> draft rids), each draft registered as SGLang would hold it."""
    m = DraftManager(ServerConfig(), IDS, num_nodes=4, vocab_size=100, max_draft_batch=4, policy=None)
    m.export_metrics = lambda: None
    for rid, drafts in parents.items():
        st = m.requests[rid] = RequestSSR(rid, RequestConfig(), IDS, [1], 4)
        for d in drafts:
            st.add_draft(d, checkpoint=0)
            m.requests[d] = RequestSSR(d, st.cfg, IDS, (), 4, is_draft=True, parent_rid=rid)
    return m


def scheduler(running=(), waiting=()):
    aborted = []
    return NS(running_batch=NS(reqs=[NS(rid=r) for r in running]), last_batch=None,
              waiting_queue=[NS(rid=r) for r in waiting], chunked_req=None,
              grammar_manager=NS(grammar_queue=[]), abort_request=lambda a: aborted.append(a.rid), aborted=aborted)


def test_reconcile_drops_parents_the_scheduler_no_longer_holds_and_aborts_their_drafts():
    m = manager(gone=["gone#ssr-0000"], live=["live#ssr-0000"])
    gone = m.requests["gone"]
    s = scheduler(running=["live", "gone#ssr-0000"], waiting=["live#ssr-0000"])
    assert m.reconcile(s) == 1
    assert set(m.requests) == {"gone#ssr-0000", "live", "live#ssr-0000"}  # the draft ends through SGLang
    assert s.aborted == ["gone#ssr-0000"] and gone.drafts[0].cancelled
    assert m.totals.requests == 1 and m.totals.counters.drafts_cancelled == 1
    # once the aborted draft has left the scheduler, its state goes too
    s.running_batch.reqs = [NS(rid="live")]
    assert m.reconcile(s) == 1 and set(m.requests) == {"live", "live#ssr-0000"}
    assert m.reconcile(s) == 0
    assert m.server_info()["reconciled"] == 2 and m.server_info()["active_requests"] == 1


def test_reconcile_reads_every_place_a_request_lives():
    m = manager(**{r: [] for r in "abcdef"})
    s = scheduler(running=["a"], waiting=["b"])
    s.last_batch = NS(reqs=[NS(rid="c")])
    s.chunked_req = NS(rid="d")
    s.grammar_manager.grammar_queue = [NS(rid="e")]
    assert m.reconcile(s, NS(reqs=[NS(rid="f")])) == 0
    assert m.reconcile(s, None) == 1 and "f" not in m.requests


def test_disabling_a_draft_disables_its_parent_and_queues_the_aborts():
    m = manager(p=["p#ssr-0000", "p#ssr-0001"])
    parent = m.requests["p"]
    m.disable("p#ssr-0001", "building proposals failed: boom", RuntimeError("boom"))
    assert m.disabled["p"] == "building proposals failed: boom" and parent.schedule is None
    assert sorted(m.pending_aborts) == ["p#ssr-0000", "p#ssr-0001"]
    assert all(b.cancelled for b in parent.drafts) and parent.counters.drafts_cancelled == 2
    s = scheduler(running=["p", "p#ssr-0000", "p#ssr-0001"])
    m.flush_aborts(s)
    assert sorted(s.aborted) == ["p#ssr-0000", "p#ssr-0001"] and not m.pending_aborts


def test_abort_output_of_a_parent_drops_it_and_aborts_its_drafts():
    m = manager(p=["p#ssr-0000"])
    s = scheduler(running=["p#ssr-0000"])
    m.on_abort_output(s, NS(rid="p", output_ids=[5, 6], finished_reason=None))
    assert "p" not in m.requests and s.aborted == ["p#ssr-0000"]
    assert m.server_info()["ended_by_abort_output"] == 1 and m.totals.requests == 1
    # the draft's own abort output closes it without reaching a client
    m.on_abort_output(s, NS(rid="p#ssr-0000", output_ids=[], finished_reason=None))
    assert not m.requests and not m.disabled


def test_failing_fork_disables_the_request_it_belongs_to(monkeypatch):
    reqs = [NS(rid=r, finished=lambda: False) for r in ("a", "b", "c")]
    m = manager(a=[], b=[], c=[])

    def fork_due(scheduler, batch):
        for req in batch.reqs:
            if req.rid == "b":
                raise ValueError("constructor changed")

    monkeypatch.setattr(m, "fork_due", fork_due)
    m.after_batch(scheduler(running="abc"), NS(reqs=reqs), counted=True)
    assert list(m.disabled) == ["b"] and "constructor changed" in m.disabled["b"]


def test_multimodal_requests_get_no_drafts():
    assert "multimodal" in unsupported_request(NS(multimodal_inputs=object()))
    assert unsupported_request(NS(multimodal_inputs=None, sampling_params=NS())) == ""  # neutral sampling


def test_a_declined_request_is_weighed_again_only_every_few_tokens():
    """The policy's no is kept for REDECIDE_TOKENS reasoning tokens (a decision costs tens of microseconds
    per request and step), then the policy is asked afresh."""
    from ssr_sglang.core.policy import Decision
    from ssr_sglang.srt.draft_manager import REDECIDE_TOKENS

    asked = []

    class Policy:
        answer = False

        def start_request(self):
            return False

        def decide(self, view):
            asked.append(view.reasoning_tokens)
            return Decision(self.answer, "cost >= saving" if not self.answer else "saving > cost")

    m = DraftManager(ServerConfig(), IDS, num_nodes=4, vocab_size=100, max_draft_batch=4, policy=Policy())
    st = m.requests["a"] = RequestSSR("a", RequestConfig(policy="auto"), IDS, [1], 4)
    st.schedule = NS(due=lambda n, k: False)
    sched = scheduler(running="a")
    sched.running_batch.reqs[0].finished = lambda: False
    decisions = []
    for r in range(0, 2 * REDECIDE_TOKENS + 1):
        st.counters.reasoning_tokens = r
        decisions.append(m._decide(sched, st))
    assert asked == [0, REDECIDE_TOKENS, 2 * REDECIDE_TOKENS]
    assert all(d["fork"] is False and d["reason"] == "cost >= saving" for d in decisions)
    m.policy.answer = True
    st.counters.reasoning_tokens += REDECIDE_TOKENS
    assert m._decide(sched, st)["fork"] is True and asked[-1] == st.reasoning_len


def kv_scheduler(running=(), waiting=(), free=1000, total=1000):
    """A scheduler stand-in with a KV pool of ``total`` tokens, ``free`` of them free."""
    s = scheduler(running, waiting)
    s.max_total_num_tokens = total
    s.token_to_kv_pool_allocator = NS(available_size=lambda: free)
    s.tree_cache = NS(evictable_size=lambda: 0)
    return s


def test_drafts_already_queued_count_against_the_draft_batch_cap():
    """Issue 36: SSR_MAX_BATCH bounds running requests plus drafts queued but not running yet."""
    m = manager(p=["p#ssr-0000"], q=["q#ssr-0000"])
    req = NS(rid="p", grammar=None)
    assert m._skip_reason(kv_scheduler(running=["p", "q"], waiting=["p#ssr-0000"]), req) == ""
    why = m._skip_reason(kv_scheduler(running=["p", "q"], waiting=["p#ssr-0000", "q#ssr-0000"]), req)
    assert why == "2 requests running and 2 drafts queued (SSR_MAX_BATCH=4)"


def test_drafts_are_preempted_first_when_the_kv_pool_runs_short():
    """Issue 36: when the free KV could not cover the running batch's next decode steps, every live draft
    (running or queued) is aborted, before SGLang would retract a request; real requests are untouched,
    and no new draft is forked into that pool."""
    from ssr_sglang.srt.draft_manager import PREEMPT_STEPS

    m = manager(p=["p#ssr-0000", "p#ssr-0001"], q=[])
    running = ["p", "q", "p#ssr-0000"]
    need = PREEMPT_STEPS * len(running) * 2 * m.num_nodes
    roomy = kv_scheduler(running=running, waiting=["p#ssr-0001"], free=need + 1)
    assert m.preempt_drafts(roomy) == 0 and not roomy.aborted
    tight = kv_scheduler(running=running, waiting=["p#ssr-0001"], free=need - 1)
    m.max_draft_batch, m.cfg = 16, ServerConfig(max_kv_usage=1.0)  # neither cap nor usage threshold in the way
    assert "free KV tokens" in m._skip_reason(tight, NS(rid="q", grammar=None))
    assert m.preempt_drafts(tight) == 2
    assert sorted(tight.aborted) == ["p#ssr-0000", "p#ssr-0001"]
    assert all(b.cancelled for b in m.requests["p"].drafts) and m.server_info()["drafts_preempted"] == 2
    assert m.preempt_drafts(tight) == 0  # nothing left to preempt


def test_drafts_yield_to_a_real_request_left_waiting():
    """A real request not admitted at two consecutive steps while drafts hold slots or KV: the drafts go.
    One step in the queue is no sign of a shortage (it may be admitted at the next one)."""
    m = manager(p=["p#ssr-0000"])
    s = kv_scheduler(running=["p", "p#ssr-0000"], waiting=["new"])
    assert m.preempt_drafts(s) == 0
    assert m.preempt_drafts(s) == 1 and s.aborted == ["p#ssr-0000"]
    m2 = manager(p=["p#ssr-0000"])
    for waiting in (["a"], ["b"], []):  # a different request each step: none was left waiting
        assert m2.preempt_drafts(kv_scheduler(running=["p", "p#ssr-0000"], waiting=waiting)) == 0


def test_sglang_retracts_drafts_before_any_real_request(monkeypatch):
    """Should SGLang have to retract under KV pressure anyway, the drafts are at the end of its retraction
    order (it retracts from the end); its own order is kept within real requests and within drafts."""
    from ssr_sglang.srt import hooks
    from ssr_sglang.srt.scheduler_view import hide

    reqs = [NS(rid=r) for r in ("p#ssr-0000", "p", "q#ssr-0000", "q", "r")]
    sglang_order = lambda rs: [4, 0, 3, 2, 1]  # noqa: E731 - most preferred to keep first
    assert hooks._retraction_order(sglang_order, reqs) == [4, 0, 3, 2, 1]  # no draft marked: SGLang's order
    for r in reqs:
        if "#ssr-" in r.rid:
            hide(r)
    assert hooks._retraction_order(sglang_order, reqs) == [4, 3, 1, 0, 2]
