"""How SSR state ends, whichever way SGLang ends a request, and how SSR failures are contained.

SGLang ends a request in ``process_batch_result`` (finished, aborted while running) or through
``send_abort_output`` (aborted while queued, ``retract_decode`` aborting on KV exhaustion, priority
eviction from a full queue, rejection). The scheduler hooks call :func:`after_batch` and
:func:`on_abort_output` for those; :func:`reconcile` then drops, every step and when idle, any SSR
state whose request is in none of the places SGLang keeps live requests, so no other way of ending a
request can leave state or running drafts behind. It costs one set of rids per step (O(requests)).

An exception in SSR code inside the scheduler never fails the batch: the request it belongs to is
served as under NGRAM from then on (``SSRWorker.disable``: reason in ``meta_info["ssr"]``
``disabled_reason``, logged once per kind of failure), and its drafts are aborted.
"""

from __future__ import annotations

import logging

from ssr_sglang.srt import faults

logger = logging.getLogger(__name__)


def _abort(scheduler, rid: str) -> None:
    from sglang.srt.managers.io_struct import AbortReq

    scheduler.abort_request(AbortReq(rid=rid))


# -- the scheduler hooks' entry points ----------------------------------------------------------------
def before_batch(worker, batch) -> None:
    """Stage timers, before the batch's outputs are streamed (a request's final metrics include its
    last step). A failure disables SSR for the batch's requests (the timers are per batch)."""
    try:
        faults.hit("step", [r.rid for r in batch.reqs])
        worker.note_step(batch)
    except Exception as e:  # noqa: BLE001 - SSR must never fail a batch
        worker.step_started = None
        for req in batch.reqs:
            worker.disable(req.rid, f"step bookkeeping failed: {e!r}", e)


def after_batch(scheduler, worker, batch, counted: bool) -> None:
    """After a batch's results are in: settle finished requests, fork drafts, abort the drafts of
    requests SSR was disabled for, and drop state whose request SGLang no longer holds."""
    from ssr_sglang.srt import drafts

    if counted:
        for req in batch.reqs:
            if req.finished():
                try:
                    faults.hit("finish", req.rid)
                    drafts.on_finished(scheduler, worker, req)
                except Exception as e:  # noqa: BLE001
                    worker.disable(req.rid, f"settling the finished request failed: {e!r}", e)
                    end(scheduler, worker, req.rid)
        try:
            drafts.maybe_fork(scheduler, worker, batch)
        except Exception as e:  # noqa: BLE001
            # Requests after the failing one are looked at again next step (forking reads counts).
            for req in _requests_of(e, batch):
                worker.disable(req.rid, f"forking a draft failed: {e!r}", e)
    flush_aborts(scheduler, worker)
    reconcile(scheduler, worker, batch)


def on_abort_output(scheduler, worker, req) -> None:
    """SGLang ended ``req`` outside the output stream (``send_abort_output``)."""
    from ssr_sglang.srt import drafts

    st = worker.requests.get(req.rid)
    if st is None:
        worker.disabled.pop(req.rid, None)
        return
    if not st.is_draft:
        worker.lifecycle_counts["ended_by_abort_output"] += 1
    try:
        if st.is_draft:
            drafts.on_aborted_in_queue(worker, req)
        else:
            drafts.on_finished(scheduler, worker, req)
    except Exception as e:  # noqa: BLE001
        worker.disable(req.rid, f"settling the aborted request failed: {e!r}", e)
    end(scheduler, worker, req.rid)  # no-op when the settling above dropped it
    flush_aborts(scheduler, worker)


def on_idle(scheduler, worker) -> None:
    if worker.requests or worker.disabled or worker.pending_aborts:
        flush_aborts(scheduler, worker)
        reconcile(scheduler, worker, None)


# -- ending ---------------------------------------------------------------------------------------
def end(scheduler, worker, rid: str) -> None:
    """Drop ``rid``'s SSR state without relying on it being consistent; abort the drafts of a
    parent, close the branch of a draft. Never raises."""
    st = worker.requests.pop(rid, None)
    worker.disabled.pop(rid, None)
    if st is None:
        return
    try:
        if st.is_draft:
            parent = worker.requests.get(st.parent_rid)
            for b in parent.drafts if parent is not None else ():
                if b.rid == rid and not b.finished:
                    b.finished = b.cancelled = True
                    parent.counters.drafts_cancelled += 1
            return
        for b in st.drafts:
            if not b.finished:
                b.finished = b.cancelled = True
                st.counters.drafts_cancelled += 1
            if b.rid in worker.requests:  # still queued or running in SGLang
                _abort(scheduler, b.rid)
        worker.totals.add(st)
    except Exception:  # noqa: BLE001
        logger.exception("SSR: while dropping the state of %s", rid)


def flush_aborts(scheduler, worker) -> None:
    """Abort the drafts queued for abort by ``SSRWorker.disable`` (which has no scheduler at hand)."""
    while worker.pending_aborts:
        rid = worker.pending_aborts.pop()
        try:
            _abort(scheduler, rid)
        except Exception:  # noqa: BLE001
            logger.exception("SSR: aborting draft %s", rid)


def live_rids(scheduler, batch=None) -> set:
    """Rids of every request SGLang 0.5.23 holds (SSR refuses PD disaggregation and pipeline
    parallelism, whose extra queues are therefore not read): the running batch, the batch being
    processed and the previous one, the waiting queue (retracted requests go back there), the
    chunked request, the grammar queue, and the overlap result queue."""
    rids = {r.rid for r in scheduler.waiting_queue}
    for b in (scheduler.running_batch, scheduler.last_batch, batch):
        if b is not None:
            rids.update(r.rid for r in b.reqs)
    for req in (scheduler.chunked_req, getattr(scheduler, "_pending_chunked_abort_req", None)):
        if req is not None:
            rids.add(req.rid)
    grammar = getattr(scheduler, "grammar_manager", None)
    if grammar is not None:
        rids.update(r.rid for r in grammar.grammar_queue)
    for b, _ in getattr(scheduler, "result_queue", None) or ():
        rids.update(r.rid for r in b.reqs)
    return rids


def reconcile(scheduler, worker, batch=None) -> int:
    """Drop the SSR state of requests SGLang no longer holds; return how many were dropped."""
    if not worker.requests and not worker.disabled:
        return 0
    try:
        live = live_rids(scheduler, batch)
    except Exception:  # noqa: BLE001 - an SGLang change: keep the state rather than guess
        logger.exception("SSR: reading the scheduler's live requests failed")
        return 0
    stale = [rid for rid in worker.requests if rid not in live]
    stale += [rid for rid in worker.disabled if rid not in live and rid not in worker.requests]
    # Parents first: ending a parent aborts its drafts while their state still marks them live.
    stale.sort(key=lambda rid: worker.is_hidden(rid))
    worker.lifecycle_counts["reconciled"] += len(stale)
    for rid in stale:
        logger.debug("SSR: dropping the state of %s, no longer held by the scheduler", rid)
        end(scheduler, worker, rid)
    if stale:
        worker.export_metrics()
    return len(stale)


def _requests_of(exc: BaseException, batch) -> list:
    """The request of ``batch`` a failure belongs to: the innermost frame of the traceback holding one
    of the batch's requests as ``req``; every request of the batch when none does."""
    by_id = {id(r): r for r in batch.reqs}
    found = None
    tb = exc.__traceback__
    while tb is not None:
        req = tb.tb_frame.f_locals.get("req")
        if req is not None and id(req) in by_id:
            found = req
        tb = tb.tb_next
    return [found] if found is not None else list(batch.reqs)
