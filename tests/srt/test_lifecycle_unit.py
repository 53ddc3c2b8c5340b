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
