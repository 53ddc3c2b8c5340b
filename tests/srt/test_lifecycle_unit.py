"""SSR state reconciliation and per-request disabling, against stand-ins for SGLang's scheduler.

The same paths run on a real server in tests/reliability/test_lifecycle.py; here each is forced
deterministically.
"""

from __future__ import annotations

from types import SimpleNamespace as NS

from ssr_sglang.srt import lifecycle
from ssr_sglang.srt.worker import SSRWorker, unsupported_request


class Branch(NS):
    pass


def state(rid, drafts=(), parent=None):
    st = NS(rid=rid, is_draft=parent is not None, parent_rid=parent, schedule=object(),
            drafts=[Branch(rid=d, finished=False, cancelled=False) for d in drafts],
            counters=NS(drafts_cancelled=0))

    def close_draft(b, cancelled):
        b.finished, b.cancelled = True, cancelled
        st.counters.drafts_cancelled += cancelled

    st.close_draft = close_draft
    return st


def worker(*states):
    w = NS(requests={s.rid: s for s in states}, disabled={}, pending_aborts=[], _failures_logged=set(),
           lifecycle_counts={"ended_by_abort_output": 0, "reconciled": 0}, totals=NS(added=[]),
           export_metrics=lambda: None)
    w.totals.add = w.totals.added.append
    w.is_hidden = lambda rid: rid in w.requests and w.requests[rid].is_draft
    w.disable = lambda rid, reason, exc=None: SSRWorker.disable(w, rid, reason, exc)
    return w


def scheduler(running=(), waiting=()):
    aborted = []
    return NS(running_batch=NS(reqs=[NS(rid=r) for r in running]), last_batch=None,
              waiting_queue=[NS(rid=r) for r in waiting], chunked_req=None,
              grammar_manager=NS(grammar_queue=[]), abort_request=lambda a: aborted.append(a.rid), aborted=aborted)


def test_reconcile_drops_parents_the_scheduler_no_longer_holds_and_aborts_their_drafts():
    gone = state("gone", drafts=["gone#ssr-0000"])
    live = state("live", drafts=["live#ssr-0000"])
    w = worker(gone, state("gone#ssr-0000", parent="gone"), live, state("live#ssr-0000", parent="live"))
    s = scheduler(running=["live", "gone#ssr-0000"], waiting=["live#ssr-0000"])
    assert lifecycle.reconcile(s, w) == 1
    assert set(w.requests) == {"gone#ssr-0000", "live", "live#ssr-0000"}  # the draft ends through SGLang
    assert s.aborted == ["gone#ssr-0000"] and gone.drafts[0].cancelled and w.totals.added == [gone]
    # once the aborted draft has left the scheduler, its state goes too
    s.running_batch.reqs = [NS(rid="live")]
    assert lifecycle.reconcile(s, w) == 1 and set(w.requests) == {"live", "live#ssr-0000"}
    assert lifecycle.reconcile(s, w) == 0


def test_reconcile_reads_every_place_a_request_lives():
    w = worker(*(state(r) for r in "abcdef"))
    s = scheduler(running=["a"], waiting=["b"])
    s.last_batch = NS(reqs=[NS(rid="c")])
    s.chunked_req = NS(rid="d")
    s.grammar_manager.grammar_queue = [NS(rid="e")]
    assert lifecycle.reconcile(s, w, NS(reqs=[NS(rid="f")])) == 0
    assert lifecycle.reconcile(s, w, None) == 1 and "f" not in w.requests


def test_disabling_a_draft_disables_its_parent_and_queues_the_aborts():
    parent = state("p", drafts=["p#ssr-0000", "p#ssr-0001"])
    w = worker(parent, state("p#ssr-0000", parent="p"), state("p#ssr-0001", parent="p"))
    w.disable("p#ssr-0001", "building proposals failed: boom", RuntimeError("boom"))
    assert w.disabled["p"] == "building proposals failed: boom" and parent.schedule is None
    assert sorted(w.pending_aborts) == ["p#ssr-0000", "p#ssr-0001"]
    assert all(b.cancelled for b in parent.drafts)
    s = scheduler(running=["p", "p#ssr-0000", "p#ssr-0001"])
    lifecycle.flush_aborts(s, w)
    assert sorted(s.aborted) == ["p#ssr-0000", "p#ssr-0001"] and not w.pending_aborts


def test_failing_fork_disables_the_request_it_belongs_to(monkeypatch):
    from ssr_sglang.srt import drafts

    reqs = [NS(rid=r, finished=lambda: False) for r in ("a", "b", "c")]

    def maybe_fork(scheduler, worker, batch):
        for req in batch.reqs:
            if req.rid == "b":
                raise ValueError("constructor changed")

    monkeypatch.setattr(drafts, "maybe_fork", maybe_fork)
    w = worker(*(state(r.rid) for r in reqs))
    lifecycle.after_batch(scheduler(running="abc"), w, NS(reqs=reqs), counted=True)
    assert list(w.disabled) == ["b"] and "constructor changed" in w.disabled["b"]


def test_multimodal_requests_get_no_drafts():
    assert "multimodal" in unsupported_request(NS(multimodal_inputs=object()))
    assert unsupported_request(NS(multimodal_inputs=None)) == ""
