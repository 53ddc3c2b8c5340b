"""Read-only views of SGLang 0.5.23's scheduler that the draft manager decides from.

Nothing here changes the scheduler. The attributes read are named in :mod:`ssr_sglang.srt.compat`
(``SCHEDULER_ATTRS``) and checked when an SSR server starts.
"""

from __future__ import annotations

DRAFT_TAG = "#ssr-"
HIDDEN_ATTR = "ssr_hidden"  # set (True) on the Req of every draft: never shown to clients, queued last


def worker_of(scheduler):
    """The SSR worker of ``scheduler`` (its ``draft_worker``), or None: a server not serving SSR, or a
    scheduler whose worker is not built yet."""
    worker = getattr(scheduler, "draft_worker", None)
    return worker if getattr(worker, "serves_ssr", False) else None


def manager_of(scheduler):
    """The :class:`~ssr_sglang.srt.draft_manager.DraftManager` serving ``scheduler``, or None (see
    :func:`worker_of`)."""
    worker = worker_of(scheduler)
    return worker.manager if worker is not None else None


def hide(req) -> None:
    """Mark ``req`` as a draft (:func:`hidden`)."""
    setattr(req, HIDDEN_ATTR, True)


def hidden(req) -> bool:
    """Is ``req`` a draft? Read off the request itself, so it holds in every process and queue, after SSR
    dropped the draft's state too, and is False for every request of a server not serving SSR."""
    return getattr(req, HIDDEN_ATTR, False) is True


def draft_rid(parent_rid: str, k: int) -> str:
    """The rid of a parent's ``k``-th draft. It starts with the parent's rid, so SGLang's rid-prefix
    abort matching (aborting the parent, a client disconnect) reaches the drafts too."""
    return f"{parent_rid}{DRAFT_TAG}{k:04d}"


def kv_usage(scheduler) -> float:
    """Fraction of the KV pool neither free nor evictable (1.0 for an empty pool)."""
    total = scheduler.max_total_num_tokens
    free = scheduler.token_to_kv_pool_allocator.available_size() + scheduler.tree_cache.evictable_size()
    return 1.0 - free / total if total else 1.0


def live_rids(scheduler, batch=None) -> set:
    """Rids of every request the scheduler holds: the running batch, the batch being processed and the
    previous one, the waiting queue (retracted requests go back there), the chunked request, the
    grammar queue and the overlap result queue. PD disaggregation and pipeline parallelism, whose
    extra queues are not read, are refused at start-up (:func:`ssr_sglang.srt.spec.refuse_unsupported`)."""
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


def requests_of(exc: BaseException, batch) -> list:
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
