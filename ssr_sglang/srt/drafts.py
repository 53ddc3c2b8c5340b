"""Hidden draft requests, forked inside the scheduler at reasoning checkpoints.

At a checkpoint the parent's KV (prompt + reasoning so far) is published to the radix cache
(``tree_cache.checkpoint``), and a hidden request ``prompt + reasoning + forced think end`` is queued
with ``handle_generate_request``: it prefills only the forced suffix, then decodes in the same batches
as everything else. Its rid is ``<parent rid>#ssr-<k>``, so aborting the parent (or a client
disconnect) aborts its drafts too, by SGLang's own rid-prefix matching. Drafts never reach clients
(:mod:`ssr_sglang.srt.hooks` filters the output stream), are capped in length, and are aborted when
their parent finishes. New drafts are skipped while real requests wait or the KV pool is busy.
"""

from __future__ import annotations

import logging
import time
from array import array

import msgspec

from ssr_sglang.srt.request_state import ANSWER, REASONING

logger = logging.getLogger(__name__)

DRAFT_TAG = "#ssr-"


def draft_rid(parent_rid: str, k: int) -> str:
    return f"{parent_rid}{DRAFT_TAG}{k:04d}"


def kv_usage(scheduler) -> float:
    total = scheduler.max_total_num_tokens
    free = scheduler.token_to_kv_pool_allocator.available_size() + scheduler.tree_cache.evictable_size()
    return 1.0 - free / total if total else 1.0


def _real_requests_waiting(scheduler, worker) -> bool:
    return any(not worker.is_hidden(r.rid) for r in scheduler.waiting_queue)


def maybe_fork(scheduler, worker, batch) -> None:
    """After a batch's results are in: fork the drafts whose checkpoints were reached."""
    for req in batch.reqs:
        if req.finished() or req.is_retracted:
            continue
        st = worker.requests.get(req.rid)
        if st is None or st.is_draft or st.schedule is None:
            continue
        st.advance(req.output_ids)
        if st.phase == ANSWER:
            _prune_for_answer(scheduler, worker, st, req)
            continue
        if st.phase != REASONING:
            continue
        k = len(st.drafts) + st.counters.drafts_skipped
        if not st.schedule.due(st.reasoning_len, k):
            continue
        reason = _skip_reason(scheduler, worker, req)
        if reason:
            st.counters.drafts_skipped += 1
            logger.debug("SSR: skip draft %d of %s: %s", k, req.rid, reason)
            continue
        t0 = time.perf_counter()
        _fork(scheduler, worker, req, st, k)
        st.counters.fork_time_s += time.perf_counter() - t0


def _skip_reason(scheduler, worker, req) -> str:
    cfg = worker.ssr_config
    if _real_requests_waiting(scheduler, worker):
        return "real requests are waiting"
    if len(scheduler.running_batch.reqs) >= worker.max_draft_batch:
        return f"{len(scheduler.running_batch.reqs)} requests running (SSR_MAX_BATCH={worker.max_draft_batch})"
    usage = kv_usage(scheduler)
    if usage > cfg.max_kv_usage:
        return f"KV usage {usage:.2f} > SSR_MAX_KV_USAGE={cfg.max_kv_usage}"
    if getattr(req, "grammar", None) is not None:
        return "constrained decoding"
    return ""


def _fork(scheduler, worker, req, st, k: int) -> None:
    from sglang.srt.managers.io_struct import TokenizedGenerateReqInput

    force = worker.think.force
    input_ids = array("q", req.origin_input_ids)
    input_ids.extend(req.output_ids)
    input_ids.extend(force)
    room = scheduler.max_req_input_len - len(input_ids)
    max_new = min(st.cfg.draft_max_tokens, room)
    if max_new < 1:
        st.counters.drafts_skipped += 1
        return
    if not req.skip_radix_cache_insert:
        # Publish the reasoning KV so the draft's prefix match finds it (it is private until now).
        req.refresh_fill_ids()
        scheduler.tree_cache.checkpoint(req, up_to=req.kv.kv_committed_len)
    rid = draft_rid(req.rid, k)
    params = msgspec.structs.replace(req.sampling_params, max_new_tokens=max_new, custom_params=None)
    obj = TokenizedGenerateReqInput(
        rid=rid, input_text=None, input_ids=input_ids, input_embeds=None, mm_inputs=None,
        token_type_ids=None, sampling_params=params, return_logprob=False, logprob_start_len=-1,
        top_logprobs_num=0, token_ids_logprob=None, stream=False, lora_id=req.lora_id,
        extra_key=req.extra_key,
    )
    seeds = [st.proposer.draft_tokens(b.draft_id)[len(worker.think.force_tail):] for b in st.drafts]
    branch = st.add_draft(rid, checkpoint=st.reasoning_len)
    worker.add_draft_state(rid, st, [s for s in seeds if s])
    scheduler.handle_generate_request(obj)
    branch.req = next((r for r in reversed(scheduler.waiting_queue) if r.rid == rid), None)
    if branch.req is None:  # rejected at admission (too long, ...): the abort output was suppressed
        branch.finished = True
        worker.drop(rid)
        st.counters.drafts_skipped += 1
        return
    st.counters.drafts_started += 1
    logger.debug("SSR: draft %s forked at %d reasoning tokens", rid, st.reasoning_len)
    # Iterative SSR: the new draft is seeded with the older drafts' tokens (verified as proposals),
    # so an older draft still running only duplicates its work. Stop it; its tokens stay indexed.
    for old in st.live_drafts():
        if old is not branch:
            _cancel(scheduler, st, old)


def _cancel(scheduler, st, branch) -> None:
    from sglang.srt.managers.io_struct import AbortReq

    st.close_draft(branch, cancelled=True)
    scheduler.abort_request(AbortReq(rid=branch.rid))


def _prune_for_answer(scheduler, worker, st, req) -> None:
    """In the answer phase a draft is only worth running while it is aligned and ahead of the answer."""
    live = st.live_drafts()
    if not live:
        return
    st.pull_drafts()
    answer_len = len(req.output_ids) - st.answer_start
    aligned = set(st.proposer.aligned_drafts())
    for b in live:
        ahead = len(st.proposer.draft_tokens(b.draft_id)) > answer_len
        if b.draft_id not in aligned or not ahead:
            _cancel(scheduler, st, b)


def on_finished(scheduler, worker, req) -> None:
    """A request left the running set (finished, aborted): settle drafts and parents."""
    st = worker.requests.get(req.rid)
    if st is None:
        return
    if st.is_draft:
        _draft_done(worker, st, req)
        return
    from sglang.srt.managers.io_struct import AbortReq

    st.finish(req.output_ids)  # usually done already, when the final output was streamed
    for b in st.drafts:
        if b.cancelled and b.rid in worker.requests:  # closed at finish, not yet aborted
            scheduler.abort_request(AbortReq(rid=b.rid))
    worker.drop(req.rid)
    worker.totals.add(st)
    worker.export_metrics()


def _draft_done(worker, st, req) -> None:
    worker.drop(req.rid)
    parent = worker.requests.get(st.parent_rid)
    if parent is None:
        return
    for b in parent.drafts:
        if b.rid == req.rid:
            b.req = b.req or req
            parent.close_draft(b, cancelled=False)


def on_aborted_in_queue(worker, req) -> None:
    st = worker.requests.get(req.rid)
    if st is not None and st.is_draft:
        _draft_done(worker, st, req)


__all__ = ["maybe_fork", "on_finished", "on_aborted_in_queue", "draft_rid", "kv_usage", "ANSWER"]
