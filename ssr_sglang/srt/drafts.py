"""Hidden draft requests, forked inside the scheduler when the request's drafting policy asks.

When a draft is due (:func:`_wants_draft`: the cost-aware policy, or a fixed schedule) the parent's
KV (prompt + reasoning so far) is published to the radix cache (``tree_cache.checkpoint``), and a hidden request ``prompt + reasoning + forced think end`` is queued
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

from ssr_sglang.core.policy import Decision, RequestView
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
    """After a batch's results are in: fork the drafts the request's policy asks for."""
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
        reason = _skip_reason(scheduler, worker, req)  # checked first: cheap, and under load it is the answer
        if reason:
            skip = {"at": st.reasoning_len, "fork": False, "reason": "skipped: " + reason}
            if st.cfg.policy == "fixed":
                if st.schedule.due(st.reasoning_len, len(st.drafts) + st.counters.drafts_skipped):
                    st.note_decision(skip)
                    st.counters.drafts_skipped += 1  # the checkpoint is used up
            elif st.note_decision(skip):  # auto: one entry (and count) per stretch blocked for one reason
                st.counters.drafts_skipped += 1
            logger.debug("SSR: no draft for %s: %s", req.rid, reason)
            continue
        decision = _wants_draft(scheduler, worker, st)
        if decision["fork"] or st.cfg.policy != "fixed":
            st.note_decision(decision)
        if not decision["fork"]:
            continue
        t0 = time.perf_counter()
        _fork(scheduler, worker, req, st, len(st.drafts) + st.counters.drafts_skipped)
        st.counters.fork_time_s += time.perf_counter() - t0


def _wants_draft(scheduler, worker, st) -> dict:
    """Does the request's policy ask for a draft now? The decision as kept in ``meta_info``.

    ``fixed``: a checkpoint of its schedule was passed. ``auto``: when the server's
    :class:`~ssr_sglang.core.policy.DraftPolicy` expects a draft to save more than it costs (one
    draft at a time; a newer one must beat the last); its schedule decides while the policy has no
    basis yet.
    """
    due = bool(st.schedule.due(st.reasoning_len, len(st.drafts) + st.counters.drafts_skipped))
    if st.cfg.policy == "fixed":
        return {"at": st.reasoning_len, "fork": due, "reason": "fixed schedule"}
    live = st.live_drafts()
    if live and worker.policy is not None:  # one draft at a time: nothing to weigh (and no work per step)
        return {"at": st.reasoning_len, "fork": False, "reason": "a draft is running"}
    last = st.drafts[-1] if st.drafts else None
    latest = (last.checkpoint, st.draft_written(last), not last.finished) if last is not None else None
    if worker.policy is None:  # tensor parallel: timers differ per rank, decisions must not
        decision = Decision(None, "tensor parallel: fixed schedule on every rank")
    else:
        decision = worker.policy.decide(RequestView(
            reasoning_tokens=st.reasoning_len,
            reasoning_tokens_per_step=st.reasoning_len / max(1, st.counters.reasoning_steps),
            batch_size=sum(1 for r in scheduler.running_batch.reqs if not (r.finished() or worker.is_hidden(r.rid))),
            seeded=last is not None and last.seeded,
            draft_cap=st.cfg.draft_max_tokens,
            settled=st.settled,
            latest=latest,
        ))
    fork = (due and not live) if decision.fork is None else decision.fork
    if decision.fork is None:
        decision.reason += "; fixed schedule: " + ("checkpoint passed" if due else "no checkpoint passed")
    return dict(decision.as_dict(st.reasoning_len), fork=fork)


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
    cap = st.cfg.draft_max_tokens if worker.policy is None or st.cfg.policy == "fixed" \
        else worker.policy.draft_cap(st.cfg.draft_max_tokens)
    max_new = min(cap, room)
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
    # Iterative SSR: the new draft is seeded with the older drafts' answers as they stand now
    # (verified as its proposals), so it decodes mostly by accepting them.
    seeds = st.draft_answers()
    branch = st.add_draft(rid, checkpoint=st.reasoning_len, seeded=bool(seeds))
    worker.add_draft_state(rid, st, seeds)
    scheduler.handle_generate_request(obj)
    branch.req = next((r for r in reversed(scheduler.waiting_queue) if r.rid == rid), None)
    if branch.req is None:  # rejected at admission (too long, ...): the abort output was suppressed
        branch.finished = True
        worker.drop(rid)
        st.counters.drafts_skipped += 1
        return
    st.counters.drafts_started += 1
    logger.debug("SSR: draft %s forked at %d reasoning tokens", rid, st.reasoning_len)
    # An older draft still running only duplicates the new one's work: stop it; its tokens stay indexed.
    for old in st.live_drafts():
        if old is not branch:
            _cancel(scheduler, st, old)


def _cancel(scheduler, st, branch) -> None:
    from sglang.srt.managers.io_struct import AbortReq

    st.close_draft(branch, cancelled=True)
    scheduler.abort_request(AbortReq(rid=branch.rid))


# A draft that lost alignment keeps decoding while what it proposes is still accepted: at most this many
# answer tokens since the last one it supplied (its length cap bounds it in any case).
DIVERGED_HORIZON = 64


def _prune_for_answer(scheduler, worker, st, req) -> None:
    """In the answer phase a draft runs only while it can still feed proposals: aligned (or resumed at a
    later place) and ahead of the answer, or diverged but still supplying accepted suffix matches
    (:meth:`~ssr_sglang.core.proposer.DraftProposer.contributes`)."""
    live = st.live_drafts()
    if not live:
        return
    st.pull_drafts()
    st.proposer.sync_answer(req.output_ids[st.answer_start:])
    for b in live:
        if not st.proposer.contributes(b.draft_id, DIVERGED_HORIZON):
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
    _teach_policy(worker, st, req)
    worker.export_metrics()


def _teach_policy(worker, st, req) -> None:
    """What a finished reasoning request tells the drafting policy (not an aborted one: its
    reasoning length says nothing about when reasoning ends)."""
    from sglang.srt.managers.schedule_batch import FINISH_ABORT

    if worker.policy is None or not st.reasoning_len or not st.cfg.enabled or isinstance(req.finished_reason,
                                                                                      FINISH_ABORT):
        return
    c = st.counters
    answer = req.output_ids[st.answer_start:] if st.phase == ANSWER else []
    plain = (c.answer_tokens - c.draft_answer_tokens, c.answer_verify_steps - c.draft_answer_steps)
    worker.policy.observe_request(st.reasoning_len, len(answer), plain, (c.draft_answer_tokens, c.draft_answer_steps),
                                  st.draft_replays(answer))


def _draft_done(worker, st, req) -> None:
    worker.drop(req.rid)
    parent = worker.requests.get(st.parent_rid)
    if parent is None:
        return
    for b in parent.drafts:
        if b.rid == req.rid:
            b.req = b.req or req
            parent.close_draft(b, cancelled=False)
            _note_draft_end(worker, st, b, req)


def _note_draft_end(worker, st, branch, req) -> None:
    """A draft request ended: keep its length and steps for the parent's ``meta_info`` and the policy."""
    st.settle(req.output_ids)
    branch.tokens, branch.steps = len(req.output_ids), st.counters.answer_verify_steps
    if worker.policy is not None and branch.steps:
        worker.policy.observe_draft(branch.seeded, branch.tokens, branch.steps)


def on_aborted_in_queue(worker, req) -> None:
    st = worker.requests.get(req.rid)
    if st is not None and st.is_draft:
        _draft_done(worker, st, req)


__all__ = ["maybe_fork", "on_finished", "on_aborted_in_queue", "draft_rid", "kv_usage", "ANSWER"]
