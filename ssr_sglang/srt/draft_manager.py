"""``DraftManager``: the one owner of SSR's per-request state inside a scheduler process.

It holds the registry (one :class:`~ssr_sglang.srt.request_state.RequestSSR` per client request and
per hidden draft), forks drafts, prunes and cancels them, settles requests that end, keeps the
server totals, and reconciles its registry against the scheduler's live requests every step. The
scheduler hooks (:mod:`ssr_sglang.srt.hooks`) call its entry points; the worker only reads states
to build proposals (:meth:`state_for`) and reports failures (:meth:`disable`).

Constraints:

* Only the scheduler thread calls it, so nothing is locked.
* Decisions read token counts, the scheduler's queues and (``policy is not None``, one rank only)
  this process's timers, so tensor-parallel ranks, which run the fixed schedules, decide alike; every
  input is identical on all ranks by construction (:mod:`ssr_sglang.srt.consensus` lists them and checks
  the ranks' decisions after every step). Stage timers (:meth:`note_step`) feed ``meta_info`` only.
* A draft is a hidden request ``prompt + reasoning + forced think end`` queued with
  ``handle_generate_request`` after the parent's KV is published to the radix cache; its rid is
  :func:`~ssr_sglang.srt.scheduler_view.draft_rid`, so SGLang's rid-prefix abort reaches it. Drafts
  never reach clients, are capped in length, and are aborted when their parent ends.
* A constrained request (regex, JSON schema, EBNF, structural tag, tool call) whose grammar SGLang holds back
  until its think end (``--reasoning-parser``, ``require_reasoning``) gets drafts under the same grammar: the
  draft is forced with the think end only and its grammar applies from its first token, so it writes what the
  request's answer may be; SGLang's grammar-aware verify never accepts a token the grammar forbids
  (:func:`grammar_refusal` says when a constrained request gets no drafts).
* Every way SGLang ends a request leaves no state here and no draft running: ``process_batch_result``
  (finished, aborted while running) and ``send_abort_output`` (aborted while queued, KV-exhaustion
  retraction, priority eviction, rejection) are settled at once; :meth:`reconcile` drops, every step
  and when idle, the state of any request the scheduler no longer holds (``abort_all``,
  ``/flush_cache``, anything else), at one set of rids per step.
* An exception in SSR code never fails a batch: the request it belongs to is served as under NGRAM
  from then on (:meth:`disable`) and its drafts are aborted.
* Real requests first: drafts queue after them, count (running or queued) against ``SSR_MAX_BATCH``, are
  not forked into a busy KV pool, and are all aborted when a real request is left waiting or the pool
  could not hold the running batch's next steps (:meth:`preempt_drafts`); should SGLang retract anyway,
  drafts go first (:mod:`ssr_sglang.srt.hooks`).
"""

from __future__ import annotations

import logging
import time
from array import array
from typing import Dict, List, Optional

import msgspec

from ssr_sglang import settings
from ssr_sglang.core.policy import Decision, DraftPolicy, RequestView
from ssr_sglang.srt import faults
from ssr_sglang.srt.config import RequestConfig, ServerConfig, SSRConfigError, client_drafts, parse_request
from ssr_sglang.srt.metrics import ServerTotals, export_prometheus
from ssr_sglang.srt.overlap import window
from ssr_sglang.srt.request_state import ANSWER, REASONING, RequestSSR
from ssr_sglang.srt.scheduler_view import draft_rid, hide, kv_usage, live_rids, requests_of
from ssr_sglang.srt.stage_clock import StageClock
from ssr_sglang.srt.think_ids import ThinkIds

logger = logging.getLogger(__name__)

PROMPT_TAIL = settings.get("SSR_DRAFT_PROMPT_TAIL")
# A draft that lost alignment keeps decoding while what it proposes is still accepted: at most this many
# answer tokens since the last one it supplied (its length cap bounds it in any case).
DIVERGED_HORIZON = settings.get("SSR_DRAFT_DIVERGED_HORIZON")
# A request the policy declined to fork for is weighed again after this many more reasoning tokens, not every
# step (a decision costs tens of microseconds per request; its inputs move little in a few tokens).
REDECIDE_TOKENS = settings.get("SSR_DRAFT_REDECIDE_TOKENS")
# KV headroom below which drafts are preempted: the tokens the running batch may allocate in this many decode
# steps (SGLang reserves 2 * --speculative-num-draft-tokens per request and step; an aborted draft's KV is
# freed only when its abort is processed, a step later, so one step of margin).
PREEMPT_STEPS = settings.get("SSR_DRAFT_PREEMPT_STEPS")


def unsupported_request(req) -> str:
    """Why SSR cannot draft for ``req`` ("" when it can). A multimodal prompt: a draft would be forked
    with the padded multimodal token ids and without the request's multimodal inputs. Sampling
    parameters that SGLang's speculative verify does not apply as plain decoding does
    (:func:`inexact_sampling`): more accepted tokens per step would only move the output further from
    the model's, so the request is served as NGRAM serves it."""
    if getattr(req, "multimodal_inputs", None) is not None:
        return "multimodal input: SSR does not fork drafts for multimodal requests"
    return inexact_sampling(req.sampling_params, getattr(req, "custom_logit_processor", None))


def inexact_sampling(sp, custom_logit_processor=None) -> str:
    """The first sampling parameter of ``sp`` that speculative decoding in SGLang 0.5.23 does not keep
    exact, as a reason ("" if none): penalties and ``min_new_tokens`` are applied to a verify step in a
    relaxed form (counts of the tokens before the step, not per verified position), ``min_p`` (of a
    sampled request), ``logit_bias`` and custom logit processors are not applied per tree node.

    >>> from types import SimpleNamespace as S
    >>> inexact_sampling(S(frequency_penalty=0.5, presence_penalty=0.0, repetition_penalty=1.0, min_p=0.0,
    ...                    logit_bias=None, min_new_tokens=0)).split(":")[0]
    'frequency_penalty=0.5'
    """
    checks = (("frequency_penalty", 0.0), ("presence_penalty", 0.0), ("repetition_penalty", 1.0),
              ("min_p", 0.0), ("min_new_tokens", 0))
    greedy = getattr(sp, "temperature", 1.0) == 0 or getattr(sp, "top_k", -1) == 1  # min_p cannot matter
    for name, neutral in checks:
        value = getattr(sp, name, neutral)
        if value is not None and value != neutral and not (name == "min_p" and greedy):
            return (f"{name}={value}: SGLang's speculative verify does not apply it as plain decoding does; "
                    "served as NGRAM (no drafts)")
    if getattr(sp, "logit_bias", None):
        return "logit_bias: not applied per verified token; served as NGRAM (no drafts)"
    if custom_logit_processor:
        return "custom_logit_processor: not applied per verified token; served as NGRAM (no drafts)"
    return ""


GRAMMAR_FIELDS = ("json_schema", "regex", "ebnf", "structural_tag")


def constrained(sp) -> bool:
    """Does a request with sampling parameters ``sp`` decode under a grammar (JSON schema, regex, EBNF,
    structural tag; tool calls and ``response_format`` arrive as one of these)?"""
    return any(getattr(sp, f, None) is not None for f in GRAMMAR_FIELDS)


def grammar_refusal(req, think_end) -> str:
    """Why a draft of the constrained request ``req`` could not decode under its grammar as ``req`` will
    ("" when it can, and for an unconstrained request). A draft decodes ``prompt + reasoning + think end``
    under the same grammar applied from its first token, which is ``req``'s answer only when ``req``'s
    grammar is held back until its reasoning ends at the same think end (SGLang's reasoner grammar, set up
    by ``--reasoning-parser`` and ``require_reasoning``, which the chat API sets)."""
    sp = getattr(req, "sampling_params", None)
    if sp is None or not constrained(sp):
        return ""
    if getattr(sp, "ebnf_full_assistant", False):
        return "constrained decoding: the EBNF covers the whole assistant message, reasoning included"
    g = getattr(req, "grammar", None)
    if g is None or getattr(g, "reasoning_in_grammar", False):
        return "constrained decoding: the grammar covers the reasoning"
    if getattr(g, "tokens_in_think", -1) < 0:
        return ("constrained decoding: the grammar applies from the first output token (no --reasoning-parser, "
                "or require_reasoning off)")
    if list(getattr(g, "think_end_ids", ())) != list(think_end):
        return "constrained decoding: the grammar waits for another think end than SSR's"
    return ""


def _draft_request(rid: str, req, input_ids, max_new: int):
    """The hidden request ``input_ids`` (prompt + reasoning + forced think end) with ``req``'s sampling,
    at most ``max_new`` tokens, never streamed; the fields are checked by :mod:`ssr_sglang.srt.compat`.
    A constrained request's grammar comes along (the sampling parameters hold it) and, ``require_reasoning``
    being off, applies from the draft's first token: right after its think end, as in ``req``."""
    from sglang.srt.managers.io_struct import TokenizedGenerateReqInput

    params = msgspec.structs.replace(req.sampling_params, max_new_tokens=max_new, custom_params=None)
    return TokenizedGenerateReqInput(
        rid=rid, input_text=None, input_ids=input_ids, input_embeds=None, mm_inputs=None,
        token_type_ids=None, sampling_params=params, return_logprob=False, logprob_start_len=-1,
        top_logprobs_num=0, token_ids_logprob=None, stream=False, lora_id=req.lora_id,
        extra_key=req.extra_key,
    )


def _queued(scheduler, rid: str):
    """The Req ``rid`` just handed to the scheduler: in its waiting queue or, while its grammar compiles
    (a cache miss), in the grammar queue; None when it was rejected at admission."""
    req = next((r for r in reversed(scheduler.waiting_queue) if r.rid == rid), None)
    grammar = getattr(scheduler, "grammar_manager", None)
    if req is None and grammar is not None:
        req = next((r for r in reversed(grammar.grammar_queue) if r.rid == rid), None)
    return req


def _abort(scheduler, rid: str) -> None:
    from sglang.srt.managers.io_struct import AbortReq

    scheduler.abort_request(AbortReq(rid=rid))


class DraftManager:
    def __init__(self, cfg: ServerConfig, think: ThinkIds, num_nodes: int, vocab_size: Optional[int],
                 max_draft_batch: int, policy: Optional[DraftPolicy], device: str = "cpu", width=None,
                 overlap_schedule: Optional[bool] = None, check_trees: bool = False):
        """``width``: the worker's :class:`~ssr_sglang.srt.verify_width.VerifyWidth`, which rates each
        verify step when its result is processed (None: nothing to rate); ``overlap_schedule``: whether
        the scheduler overlaps steps (None: not reported); ``check_trees``: tests count duplicate
        siblings in every verified tree (``tree_stats``)."""
        self.cfg = cfg
        self.think = think
        self.num_nodes = num_nodes  # tree nodes per verify step (--speculative-num-draft-tokens)
        self.vocab_size = vocab_size
        self.max_draft_batch = max_draft_batch
        self.policy = policy  # None under tensor parallelism: requests follow their fixed schedules
        self.requests: Dict[str, RequestSSR] = {}  # client requests and drafts SGLang still holds
        self.disabled: Dict[str, str] = {}  # rid -> why SSR is off for it (served as under NGRAM)
        self.pending_aborts: List[str] = []  # drafts of disabled requests, aborted at the next hook call
        self._failures_logged: set = set()
        self.totals = ServerTotals()
        # parents SGLang ended through send_abort_output; states dropped by the per-step reconciliation
        # drafts_preempted: drafts aborted to make room for real requests (preempt_drafts)
        self.lifecycle_counts = {"ended_by_abort_output": 0, "reconciled": 0, "drafts_preempted": 0}
        self._waiting: set = set()  # real requests seen waiting at the last step (preempt_drafts)
        # tests (SSR_TEST_CHECK_TREES): counted by the worker
        self.tree_stats = {"tree_checks": 0, "duplicate_siblings_seen": 0, "siblings_renamed": 0} \
            if check_trees else None
        self.width = width
        # overlap scheduling on, and the decode steps the worker proposed from pending tokens
        self.overlap = {"schedule": overlap_schedule, "pending_steps": 0} if overlap_schedule is not None else None
        self.clock = StageClock(policy, num_nodes, cuda=str(device).startswith("cuda"))
        self._fork_s = 0.0  # seconds spent forking, in all (host time excludes it)
        self.scheduler_checked = False  # the live scheduler's attributes checked (hooks, at first use)

    # -- registry -----------------------------------------------------------------------------
    def state_for(self, req) -> RequestSSR:
        """The request's state, created on first sight (a client request: drafts are created by forking)."""
        st = self.requests.get(req.rid)
        if st is None:
            st = self._new_state(req)
            self.requests[req.rid] = st
        return st

    def _new_state(self, req) -> RequestSSR:
        params = req.sampling_params.custom_params
        try:
            cfg = parse_request(params, self.cfg.defaults)
            drafts = client_drafts(params, self.vocab_size)
        except SSRConfigError as e:  # the tokenizer manager rejects these first; never fail a batch here
            logger.warning("SSR disabled for %s: %s", req.rid, e)
            cfg, drafts = RequestConfig(enabled=False), []
        refused = unsupported_request(req)
        if refused and cfg.enabled:
            cfg, drafts = RequestConfig(enabled=False), []
            self.disable(req.rid, refused)
        tail = req.origin_input_ids_unpadded[-PROMPT_TAIL:]
        st = RequestSSR(req.rid, cfg, self.think, tail, self.num_nodes, prompt=req.origin_input_ids_unpadded,
                        constrained=constrained(req.sampling_params))
        if drafts and cfg.enabled:
            for d in drafts:
                st.add_client_draft(d)
            if st.phase != REASONING:
                st.phase, st.answer_start = ANSWER, 0  # the prompt already holds the reasoning
        return st

    def is_hidden(self, rid: str) -> bool:
        """Is ``rid`` a draft (never shown to clients, queued after every real request)?"""
        st = self.requests.get(rid)
        return st is not None and st.is_draft

    def disable(self, rid: str, reason: str, exc: Optional[BaseException] = None) -> None:
        """Turn SSR off for a request (for a draft: for its parent): no more drafts or draft-based
        proposals, so it is served as under NGRAM; its live drafts are aborted at the next hook call.
        The reason goes to ``meta_info["ssr"]["disabled_reason"]``; each kind of failure is logged
        once with its traceback, later ones at debug level."""
        st = self.requests.get(rid)
        if st is not None and st.is_draft and st.parent_rid:
            rid, st = st.parent_rid, self.requests.get(st.parent_rid)
        if rid in self.disabled:
            return
        self.disabled[rid] = reason
        self._log_failure(rid, reason, exc)
        if st is None:
            return
        st.schedule = None  # no more forks
        for b in st.drafts:
            if b.rid in self.requests:
                self.disabled[b.rid] = reason
                self.pending_aborts.append(b.rid)
            if not b.finished:
                try:
                    st.close_draft(b, cancelled=True)
                except Exception:  # noqa: BLE001 - the state may be what failed
                    b.finished = b.cancelled = True

    def _log_failure(self, rid: str, reason: str, exc: Optional[BaseException]) -> None:
        key = (reason.split(":", 1)[0], type(exc).__name__ if exc is not None else None)
        if key in self._failures_logged:
            logger.debug("SSR disabled for %s: %s", rid, reason)
            return
        self._failures_logged.add(key)
        log = logger.error if exc is not None else logger.info
        log("SSR disabled for %s (and any later request failing the same way): %s", rid, reason, exc_info=exc)

    # -- entry points of the scheduler hooks (each contains its own failures) -------------------
    def before_batch(self, batch, result=None) -> None:
        """Stage timers, before the batch's outputs are streamed (a request's final metrics include its
        last step). A failure disables SSR for the batch's requests (the timers are per batch)."""
        t0 = time.perf_counter()
        try:
            faults.hit("step", [r.rid for r in batch.reqs])
            self.clock.charge(batch, self.requests, result)  # the result's host copies are ready after this
            if self.width is not None and result is not None:
                self.width.rate(result)
        except Exception as e:  # noqa: BLE001 - SSR must never fail a batch
            if result is not None:
                result.ssr_step = None
            for req in batch.reqs:
                self.disable(req.rid, f"step bookkeeping failed: {e!r}", e)
        self.clock.host(time.perf_counter() - t0)

    def after_batch(self, scheduler, batch, counted: bool) -> None:
        """After a batch's results are in: settle finished requests, fork drafts, abort the drafts of
        requests SSR was disabled for, and drop state whose request the scheduler no longer holds."""
        t0, forks = time.perf_counter(), self._fork_s
        if counted:
            for req in batch.reqs:
                if req.finished():
                    try:
                        faults.hit("finish", req.rid)
                        self._ended(scheduler, req)
                    except Exception as e:  # noqa: BLE001
                        self.disable(req.rid, f"settling the finished request failed: {e!r}", e)
                        self.end(scheduler, req.rid)
            try:
                self.preempt_drafts(scheduler)
            except Exception:  # noqa: BLE001 - an SGLang change: SGLang's own retraction still applies
                logger.exception("SSR: checking for memory pressure failed")
            try:
                self.fork_due(scheduler, batch)
            except Exception as e:  # noqa: BLE001
                # Requests after the failing one are looked at again next step (forking reads counts).
                for req in requests_of(e, batch):
                    self.disable(req.rid, f"forking a draft failed: {e!r}", e)
        self.flush_aborts(scheduler)
        self.reconcile(scheduler, batch)
        self.clock.host(time.perf_counter() - t0 - (self._fork_s - forks))

    def on_abort_output(self, scheduler, req) -> None:
        """SGLang ended ``req`` outside the output stream (``send_abort_output``)."""
        st = self.requests.get(req.rid)
        if st is None:
            self.disabled.pop(req.rid, None)
            return
        if not st.is_draft:
            self.lifecycle_counts["ended_by_abort_output"] += 1
        try:
            self._ended(scheduler, req)
        except Exception as e:  # noqa: BLE001
            self.disable(req.rid, f"settling the aborted request failed: {e!r}", e)
        self.end(scheduler, req.rid)  # no-op when the settling above dropped it
        self.flush_aborts(scheduler)

    def on_idle(self, scheduler) -> None:
        if self.requests or self.disabled or self.pending_aborts:
            self.flush_aborts(scheduler)
            self.reconcile(scheduler, None)

    def final_meta(self, req) -> list:
        """``meta_info["ssr"]`` of a finished request, as the one-element list SGLang relays (or [])."""
        reason = self.disabled.get(req.rid)
        st = self.requests.get(req.rid)
        meta = None
        if st is not None:
            try:
                meta = st.finish(_through_stop(req))
            except Exception as e:  # noqa: BLE001 - never fail the output stream
                self.disable(req.rid, f"final accounting failed: {e!r}", e)
                reason = self.disabled.get(req.rid, reason)
        if reason:
            meta = {**(meta or {"enabled": False}), "disabled_reason": reason}
        return [meta] if meta is not None else []

    def server_info(self) -> dict:
        """The ``ssr`` entry of ``/server_info``: totals over finished requests, what is held now."""
        d = self.totals.as_dict()
        d["active_requests"] = sum(1 for s in self.requests.values() if not s.is_draft)
        d["active_drafts"] = sum(1 for s in self.requests.values() if s.is_draft)
        d["active_disabled"] = len(self.disabled)
        d.update(self.lifecycle_counts)
        if self.tree_stats is not None:
            d.update(self.tree_stats)
        if self.overlap is not None:
            d["overlap"] = dict(self.overlap)
        if self.policy is not None:
            d["policy"] = self.policy.summary()
        widths = self.width.summary() if self.width is not None else None
        if widths is not None:
            d["verify_width"] = widths
        return d

    # -- forking ------------------------------------------------------------------------------
    def fork_due(self, scheduler, batch) -> None:
        """After a batch's results are in: fork the drafts the requests' policies ask for, and prune
        the drafts of requests in their answer phase."""
        for req in batch.reqs:
            if req.finished() or req.is_retracted:
                continue
            st = self.requests.get(req.rid)
            if st is None or st.is_draft or st.schedule is None:
                continue
            st.advance(req.output_ids)
            if st.phase == ANSWER:
                self._prune(scheduler, st, req)
            elif st.phase == REASONING:
                self._maybe_fork(scheduler, st, req)

    # -- real requests first -----------------------------------------------------------------
    def preempt_drafts(self, scheduler) -> int:
        """Drafts yield to real requests: abort every live draft (running or queued) when a real request was
        left waiting at two consecutive steps (not admitted: slots or KV taken) or the free KV could not
        cover the running batch's next ``PREEMPT_STEPS`` decode steps (SGLang would retract a request next,
        maybe a real one). Returns the drafts aborted. Reads only queues and allocator counts, identical
        on every tensor-parallel rank."""
        waiting = {r.rid for r in scheduler.waiting_queue if not self.is_hidden(r.rid)}
        stuck, self._waiting = waiting & self._waiting, waiting
        parents = [st for st in self.requests.values() if not st.is_draft and st.live_drafts()]
        if not parents:
            return 0
        reason = f"{len(stuck)} real request(s) not admitted for two steps" if stuck else self._kv_pressure(scheduler)
        if not reason:
            return 0
        n = 0
        for st in parents:
            for b in st.live_drafts():
                self._cancel(scheduler, st, b)
                n += 1
        self.lifecycle_counts["drafts_preempted"] += n
        logger.info("SSR: %d draft(s) preempted: %s", n, reason)
        return n

    def _kv_pressure(self, scheduler) -> str:
        """Why the KV pool is too full for drafts ("" when it is not): its free tokens (free or evictable)
        below what the running batch may allocate in ``PREEMPT_STEPS`` decode steps."""
        free = (1.0 - kv_usage(scheduler)) * scheduler.max_total_num_tokens
        need = PREEMPT_STEPS * len(scheduler.running_batch.reqs) * 2 * self.num_nodes
        return f"{free:.0f} free KV tokens < {need} for the next {PREEMPT_STEPS} decode steps" if free < need else ""

    def _maybe_fork(self, scheduler, st: RequestSSR, req) -> None:
        reason = self._skip_reason(scheduler, req)  # checked first: cheap, and under load it is the answer
        if reason:
            self._note_skip(st, "skipped: " + reason)
            logger.debug("SSR: no draft for %s: %s", req.rid, reason)
            return
        decision = self._decide(scheduler, st, req)
        if decision["fork"] or st.cfg.policy != "fixed":
            st.note_decision(decision)
        if not decision["fork"]:
            return
        t0 = time.perf_counter()
        self._fork(scheduler, req, st, len(st.drafts) + st.counters.drafts_skipped)
        dt = time.perf_counter() - t0
        st.counters.fork_time_s += dt
        self._fork_s += dt

    @staticmethod
    def _note_skip(st: RequestSSR, reason: str) -> None:
        """Count a skipped draft: under ``fixed``, a checkpoint passed while blocked is used up; under
        ``auto``, one entry (and count) per stretch blocked for one reason."""
        skip = {"at": st.reasoning_len, "fork": False, "reason": reason}
        if st.cfg.policy == "fixed":
            if st.schedule.due(st.reasoning_len, len(st.drafts) + st.counters.drafts_skipped):
                st.note_decision(skip)
                st.counters.drafts_skipped += 1
        elif st.note_decision(skip):
            st.counters.drafts_skipped += 1

    def _skip_reason(self, scheduler, req) -> str:
        """Why no draft may start now ("" when one may): real requests go first, and drafts stay out
        of a busy batch (running requests and drafts already queued) or KV pool. Under TP all these inputs are
        identical on every rank by
        construction (same broadcast requests, same batches, same allocations): no broadcast needed."""
        if any(not self.is_hidden(r.rid) for r in scheduler.waiting_queue):
            return "real requests are waiting"
        running, queued = len(scheduler.running_batch.reqs), len(scheduler.waiting_queue)  # queued: drafts only
        if running + queued >= self.max_draft_batch:
            return f"{running} requests running and {queued} drafts queued (SSR_MAX_BATCH={self.max_draft_batch})"
        usage = kv_usage(scheduler)
        if usage > self.cfg.max_kv_usage:
            return f"KV usage {usage:.2f} > SSR_MAX_KV_USAGE={self.cfg.max_kv_usage}"
        pressure = self._kv_pressure(scheduler)  # a draft forked now would be preempted at once
        if pressure:
            return pressure
        return grammar_refusal(req, self.think.end)

    def _decide(self, scheduler, st: RequestSSR, req=None) -> dict:
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
        if live and self.policy is not None:  # one draft at a time: nothing to weigh (and no work per step)
            return {"at": st.reasoning_len, "fork": False, "reason": "a draft is running"}
        if self.policy is not None and st.control is None:
            st.control = self.policy.start_request()
        if st.control:
            return {"at": st.reasoning_len, "fork": False,
                    "reason": "control request: served without drafts, its answer measures a_plain"}
        if self.policy is None:  # tensor parallel: timers differ per rank, decisions must not
            decision = Decision(None, "tensor parallel: fixed schedule on every rank")
        elif st.declined is not None and st.reasoning_len - st.declined[0] < REDECIDE_TOKENS:
            return {"at": st.reasoning_len, "fork": False, "reason": st.declined[1]}
        else:
            decision = self.policy.decide(self._view(scheduler, st, req))
            st.declined = (st.reasoning_len, decision.reason) if decision.fork is False else None
        fork = (due and not live) if decision.fork is None else decision.fork
        if decision.fork is None:
            decision.reason += "; fixed schedule: " + ("checkpoint passed" if due else "no checkpoint passed")
        return dict(decision.as_dict(st.reasoning_len), fork=fork)

    def _view(self, scheduler, st: RequestSSR, req=None) -> RequestView:
        """What the policy weighs for ``st`` (``req``: its SGLang request, for the context a draft forked now
        would have: its prompt and output so far, plus the forced think end)."""
        last = st.drafts[-1] if st.drafts else None
        context = len(req.origin_input_ids) + len(req.output_ids) + len(self.think.force) if req is not None else 0
        return RequestView(
            reasoning_tokens=st.reasoning_len,
            reasoning_tokens_per_step=st.reasoning_len / max(1, st.counters.reasoning_steps),
            batch_size=sum(1 for r in scheduler.running_batch.reqs if not (r.finished() or self.is_hidden(r.rid))),
            seeded=last is not None and last.seeded,
            draft_cap=st.cfg.draft_max_tokens,
            settled=st.settled,
            latest=(last.checkpoint, st.draft_written(last), not last.finished) if last is not None else None,
            context_tokens=context,
        )

    def _fork(self, scheduler, req, st: RequestSSR, k: int) -> None:
        """Queue draft ``k`` of ``req``; a fork with no room left or rejected at admission counts as
        skipped. The new draft replaces any older one still running (whose tokens stay indexed)."""
        input_ids = array("q", req.origin_input_ids)
        input_ids.extend(req.output_ids)
        input_ids.extend(st.force)
        cap = st.cfg.draft_max_tokens if self.policy is None or st.cfg.policy == "fixed" \
            else self.policy.draft_cap(st.cfg.draft_max_tokens)
        max_new = min(cap, scheduler.max_req_input_len - len(input_ids))
        if max_new < 1:
            st.counters.drafts_skipped += 1
            return
        if not req.skip_radix_cache_insert:
            # Publish the reasoning KV so the draft's prefix match finds it (it is private until now).
            req.refresh_fill_ids()
            scheduler.tree_cache.checkpoint(req, up_to=req.kv.kv_committed_len)
        branch = self._queue(scheduler, st, _draft_request(draft_rid(req.rid, k), req, input_ids, max_new))
        if branch is None:
            return
        for old in st.live_drafts():
            if old is not branch:
                self._cancel(scheduler, st, old)

    def _queue(self, scheduler, st: RequestSSR, obj):
        """Register the draft ``obj`` of ``st`` and hand it to the scheduler. Its branch, or None when the
        scheduler rejected it at admission (then it is counted as skipped and leaves no state)."""
        rid = obj.rid
        # Iterative SSR: the new draft is seeded with the older drafts' answers as they stand now
        # (verified as its proposals), so it decodes mostly by accepting them.
        seeds = st.draft_answers()
        branch = st.add_draft(rid, checkpoint=st.reasoning_len, seeded=bool(seeds))
        self._add_draft_state(rid, st, seeds)
        scheduler.handle_generate_request(obj)
        branch.req = _queued(scheduler, rid)
        if branch.req is None:  # rejected at admission (too long, ...): the abort output was suppressed
            branch.finished = True
            self.drop(rid)
            st.counters.drafts_skipped += 1
            return None
        # A draft's KV never enters the tree: its prefill recomputes the parent's newest token(s) (not yet
        # committed at the fork), and were that KV published, the parent's next checkpoint would take it in
        # place of its own (the tree keeps the first copy of a prefix), computed by a prefill instead of a
        # decode step -- a rounding apart, enough to change a greedy token. Nothing reads a draft's KV later.
        branch.req.skip_radix_cache_insert = True
        hide(branch.req)
        st.counters.drafts_started += 1
        logger.debug("SSR: draft %s forked at %d reasoning tokens", rid, st.reasoning_len)
        return branch

    def _add_draft_state(self, rid: str, parent: RequestSSR, seeds) -> RequestSSR:
        faults.hit("fork", parent.rid)
        st = RequestSSR(rid, parent.cfg, self.think, (), self.num_nodes, is_draft=True, parent_rid=parent.rid,
                        constrained=parent.constrained)
        for toks in seeds:  # iterative SSR: earlier drafts propose tokens for this one
            st.add_client_draft(toks)
        self.requests[rid] = st
        return st

    @staticmethod
    def _cancel(scheduler, st: RequestSSR, branch) -> None:
        st.close_draft(branch, cancelled=True)
        _abort(scheduler, branch.rid)

    def _prune(self, scheduler, st: RequestSSR, req) -> None:
        """In the answer phase a draft runs only while it can still feed proposals: aligned (or resumed at a
        later place) and ahead of the answer, or diverged but still supplying accepted suffix matches
        (:meth:`~ssr_sglang.core.proposer.DraftProposer.contributes`)."""
        live = st.live_drafts()
        if not live:
            return
        st.pull_drafts()
        st.proposer.sync_answer(window(req.output_ids, st.answer_start))  # a view: no copy of the answer
        for b in live:
            if not st.proposer.contributes(b.draft_id, DIVERGED_HORIZON):
                self._cancel(scheduler, st, b)

    # -- ending ---------------------------------------------------------------------------------
    def _ended(self, scheduler, req) -> None:
        """``req`` left the running set (finished, aborted): settle it and, for a parent, its drafts."""
        st = self.requests.get(req.rid)
        if st is None:
            return
        if st.is_draft:
            self._draft_ended(st, req)
            return
        st.finish(_through_stop(req))  # usually done already, when the final output was streamed
        for b in st.drafts:
            if b.cancelled and b.rid in self.requests:  # closed at finish, not yet aborted
                _abort(scheduler, b.rid)
        self.drop(req.rid)
        self.totals.add(st)
        self._teach_policy(st, req)
        self.export_metrics()

    def _teach_policy(self, st: RequestSSR, req) -> None:
        """What a finished reasoning request tells the drafting policy (not an aborted one: its
        reasoning length says nothing about when reasoning ends)."""
        from sglang.srt.managers.schedule_batch import FINISH_ABORT

        if self.policy is None or not st.reasoning_len or not st.cfg.enabled \
                or isinstance(req.finished_reason, FINISH_ABORT):
            return
        c = st.counters
        answer = req.output_ids[st.answer_start:] if st.phase == ANSWER else []
        plain = (c.answer_tokens - c.draft_answer_tokens, c.answer_verify_steps - c.draft_answer_steps)
        # answered without a draft, forced or not: a fair sample of the draft-free rate (core.policy)
        control = bool(st.control) or (c.drafts_started == 0 and c.draft_answer_steps == 0)
        self.policy.observe_request(st.reasoning_len, len(answer), plain,
                                    (c.draft_answer_tokens, c.draft_answer_steps), st.draft_replays(answer),
                                    control=control)
        for b in st.drafts:  # drafts that ended on their own were observed as they ended (_draft_ended)
            if b.cancelled:
                self.policy.observe_draft_cut(b.consumed)

    def _draft_ended(self, st: RequestSSR, req) -> None:
        """A draft request ended: close its branch, keep its length and steps for the parent's
        ``meta_info`` and the policy."""
        self.drop(req.rid)
        parent = self.requests.get(st.parent_rid)
        if parent is None:
            return
        for b in parent.drafts:
            if b.rid != req.rid:
                continue
            b.req = b.req or req
            parent.close_draft(b, cancelled=False)
            st.settle(req.output_ids)
            b.tokens, b.steps = len(req.output_ids), st.counters.answer_verify_steps
            if self.policy is not None and b.steps:
                self.policy.observe_draft(b.seeded, b.tokens, b.steps)

    def drop(self, rid: str) -> Optional[RequestSSR]:
        self.disabled.pop(rid, None)
        return self.requests.pop(rid, None)

    def end(self, scheduler, rid: str) -> None:
        """Drop ``rid``'s state without relying on it being consistent; abort the drafts of a parent,
        close the branch of a draft. Never raises."""
        st = self.drop(rid)
        if st is None:
            return
        try:
            if st.is_draft:
                parent = self.requests.get(st.parent_rid)
                for b in parent.drafts if parent is not None else ():
                    if b.rid == rid and not b.finished:
                        b.finished = b.cancelled = True
                        parent.counters.drafts_cancelled += 1
                return
            for b in st.drafts:
                if not b.finished:
                    b.finished = b.cancelled = True
                    st.counters.drafts_cancelled += 1
                if b.rid in self.requests:  # still queued or running in SGLang
                    _abort(scheduler, b.rid)
            self.totals.add(st)
        except Exception:  # noqa: BLE001
            logger.exception("SSR: while dropping the state of %s", rid)

    def flush_aborts(self, scheduler) -> None:
        """Abort the drafts queued by :meth:`disable` (called where no scheduler is at hand)."""
        while self.pending_aborts:
            rid = self.pending_aborts.pop()
            try:
                _abort(scheduler, rid)
            except Exception:  # noqa: BLE001
                logger.exception("SSR: aborting draft %s", rid)

    def reconcile(self, scheduler, batch=None) -> int:
        """Drop the state of requests the scheduler no longer holds; return how many were dropped."""
        if not self.requests and not self.disabled:
            return 0
        try:
            live = live_rids(scheduler, batch)
        except Exception:  # noqa: BLE001 - an SGLang change: keep the state rather than guess
            logger.exception("SSR: reading the scheduler's live requests failed")
            return 0
        stale = [rid for rid in self.requests if rid not in live]
        stale += [rid for rid in self.disabled if rid not in live and rid not in self.requests]
        # Parents first: ending a parent aborts its drafts while their state still marks them live.
        stale.sort(key=self.is_hidden)
        self.lifecycle_counts["reconciled"] += len(stale)
        for rid in stale:
            logger.debug("SSR: dropping the state of %s, no longer held by the scheduler", rid)
            self.end(scheduler, rid)
        if stale:
            self.export_metrics()
        return len(stale)

    # -- exported totals -----------------------------------------------------------------------------
    def export_metrics(self) -> None:
        """Mirror the totals into Prometheus when SGLang runs with ``--enable-metrics``."""
        from sglang.srt.runtime_context import get_observability, get_parallel

        if get_observability().enable_metrics:
            export_prometheus(self.totals, {"tp_rank": str(get_parallel().tp_rank)})


def _through_stop(req) -> list:
    """The output SGLang returns: a verify step may accept tokens past a stop or ``max_new_tokens``, which
    SGLang keeps in ``req.output_ids`` but leaves out of the output and of ``completion_tokens``."""
    return getattr(req, "output_ids_through_stop", req.output_ids)
