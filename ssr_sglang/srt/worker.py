"""``SSRWorker``: NGRAM's verify path, fed with proposals from draft answers in the answer phase.

Per decode step, for each request of the batch:

* reasoning phase: the n-gram proposal SGLang's NGRAM would make (``SSR_REASONING_FALLBACK=ngram``,
  the default: with the full verify width reasoning runs exactly as under NGRAM) or none;
* answer phase with drafts: the core proposer's branches (prefix continuation of aligned drafts,
  suffix-index matches), merged into one token tree of ``--speculative-num-draft-tokens`` nodes;
  the n-gram proposal when the drafts have nothing to offer.

Verification is SGLang's own (greedy tree walk; its sampling path where SGLang uses one), so the
output is the target model's whatever is proposed. With ``SSR_VERIFY_WIDTH=adaptive`` (CPU only) a
step verifies only the first ``w`` tree nodes, ``w`` the widest proposal in the batch (1 when nobody
proposes anything: a plain decode step), since on a compute-bound device a padding node costs as
much as a real one. On the bundled model it saves about 1 node in 12 and measured 0.93-1.00x the
throughput of the full width (``benchmarks/verify_width.py``), so it is not the default. Hidden draft requests are forked and managed
by :mod:`ssr_sglang.srt.drafts`; this class only holds their state and reads their tokens.
"""

from __future__ import annotations

import logging
import time
from typing import Dict, List, Optional

import numpy as np
import torch
import torch.nn.functional as F
from sglang.srt.configs.hybrid_arch import mambaish_config
from sglang.srt.speculative.ngram_info import NgramVerifyInput
from sglang.srt.speculative.ngram_worker import NGRAMWorker, reconstruct_indices_from_tree_mask_func

from ssr_sglang.core.policy import DraftPolicy
from ssr_sglang.core.tree import build_chain, distinct_siblings, duplicate_siblings, layout_tree, nodes_in_use
from ssr_sglang.srt import active, compat, faults, metrics
from ssr_sglang.srt.config import (RequestConfig, SSRConfigError, client_drafts, default_max_batch, parse_request,
                                   server_config_from_env)
from ssr_sglang.srt.request_state import ANSWER, REASONING, RequestSSR
from ssr_sglang.srt.think_ids import from_environment

logger = logging.getLogger(__name__)

PROMPT_TAIL = 64  # prompt tokens examined for an open think block


class SSRWorker(NGRAMWorker):
    def __init__(self, server_args, gpu_id, nccl_port, target_worker):
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        compat.check_worker(self)  # a missing SGLang internal stops the server here, naming it
        self.ssr_config = server_config_from_env()
        runner = target_worker.model_runner
        hf_config = runner.model_config.hf_config
        from sglang.srt.runtime_context import get_serving

        self.think = from_environment(
            target_worker.tokenizer, getattr(hf_config, "model_type", "") or "", get_serving().reasoning_parser
        )
        self.vocab_size = runner.model_config.vocab_size
        self.requests: Dict[str, RequestSSR] = {}
        self.disabled: Dict[str, str] = {}  # rid -> why SSR is off for it (served as under NGRAM)
        self.pending_aborts: List[str] = []  # drafts of disabled requests, aborted by the scheduler hook
        self._failures_logged: set = set()
        # parents SGLang ended through send_abort_output; states dropped by the per-step reconciliation
        self.lifecycle_counts = {"ended_by_abort_output": 0, "reconciled": 0}
        self.check_trees = faults.CHECK_TREES  # tests: count duplicate siblings in every verified tree
        self.tree_checks = self.duplicate_siblings_seen = self.siblings_renamed = 0
        self.adaptive_width = _adaptive_width(self.ssr_config.verify_width, runner)
        self.max_draft_batch = self.ssr_config.max_batch or default_max_batch(runner.device)
        self._widths: Optional[list] = None  # per request of the batch being prepared: nodes in use
        self._width = self.draft_token_num  # nodes verified in the current step
        self.step_started: Optional[float] = None  # perf_counter() at the current step's forward
        self._last_result: Optional[float] = None  # perf_counter() when the last batch's results arrived
        self.totals = metrics.ServerTotals()
        # The drafting policy decides from this process's own timers. Tensor-parallel ranks time
        # differently, so there requests follow their fixed schedules (token counts only).
        self.policy = DraftPolicy(max_accept=self.draft_token_num) if server_args.tp_size == 1 else None
        if not self.think.end:
            logger.warning("SSR: no think markers for this model; requests decode as under NGRAM (set SSR_THINK_START/END)")
        active.WORKER = self  # one per scheduler process (each tensor-parallel rank has its own)

    def export_metrics(self) -> None:
        """Mirror the totals into Prometheus when SGLang runs with ``--enable-metrics``."""
        from sglang.srt.runtime_context import get_observability, get_parallel

        if get_observability().enable_metrics:
            metrics.export_prometheus(self.totals, {"tp_rank": str(get_parallel().tp_rank)})

    # -- per-request state ------------------------------------------------
    def state_for(self, req) -> RequestSSR:
        st = self.requests.get(req.rid)
        if st is None:
            st = self._new_state(req)
            self.requests[req.rid] = st
        return st

    def _new_state(self, req) -> RequestSSR:
        params = req.sampling_params.custom_params
        try:
            cfg = parse_request(params, self.ssr_config.defaults)
            drafts = client_drafts(params, self.vocab_size)
        except SSRConfigError as e:  # the tokenizer manager rejects these first; never fail a batch here
            logger.warning("SSR disabled for %s: %s", req.rid, e)
            cfg, drafts = RequestConfig(enabled=False), []
        refused = unsupported_request(req)
        if refused and cfg.enabled:
            cfg, drafts = RequestConfig(enabled=False), []
            self.disable(req.rid, refused)
        tail = req.origin_input_ids_unpadded[-PROMPT_TAIL:]
        st = RequestSSR(req.rid, cfg, self.think, tail, self.draft_token_num)
        if drafts and cfg.enabled:
            for d in drafts:
                st.add_client_draft(d)
            if st.phase != "reasoning":
                st.phase, st.answer_start = ANSWER, 0  # the prompt already holds the reasoning
        return st

    def add_draft_state(self, rid: str, parent: RequestSSR, seed_drafts) -> RequestSSR:
        faults.hit("fork", parent.rid)
        st = RequestSSR(rid, parent.cfg, self.think, (), self.draft_token_num, is_draft=True, parent_rid=parent.rid)
        for toks in seed_drafts:  # iterative SSR: earlier drafts propose tokens for this one
            st.add_client_draft(toks)
        self.requests[rid] = st
        return st

    def is_hidden(self, rid: str) -> bool:
        st = self.requests.get(rid)
        return st is not None and st.is_draft

    def drop(self, rid: str) -> Optional[RequestSSR]:
        self.disabled.pop(rid, None)
        return self.requests.pop(rid, None)

    def disable(self, rid: str, reason: str, exc: Optional[BaseException] = None) -> None:
        """Turn SSR off for a request (for a draft: for its parent): no more drafts or draft-based
        proposals, so it is served as under NGRAM; its live drafts are aborted by the scheduler hook.
        The reason goes to ``meta_info["ssr"]["disabled_reason"]``; each kind of failure is logged
        once with its traceback, later ones at debug level."""
        st = self.requests.get(rid)
        if st is not None and st.is_draft and st.parent_rid:
            rid, st = st.parent_rid, self.requests.get(st.parent_rid)
        if rid in self.disabled:
            return
        self.disabled[rid] = reason
        key = (reason.split(":", 1)[0], type(exc).__name__ if exc is not None else None)
        if key in self._failures_logged:
            logger.debug("SSR disabled for %s: %s", rid, reason)
        else:
            self._failures_logged.add(key)
            log = logger.error if exc is not None else logger.info
            log("SSR disabled for %s (and any later request failing the same way): %s", rid, reason, exc_info=exc)
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

    # -- one step: timing, and the rows of a narrowed verify -------------------
    def forward_batch_generation(self, batch, *args, **kwargs):
        self.step_started = time.perf_counter()
        self._width = self.draft_token_num
        result = super().forward_batch_generation(batch, *args, **kwargs)
        if self._width < self.draft_token_num:
            # Accepted tokens come back in rows of ``width``; SGLang reads rows of the full width.
            rows = result.next_token_ids.view(-1, self._width)
            padded = F.pad(rows, (0, self.draft_token_num - self._width)).reshape(-1)
            result.next_token_ids = padded
            result.next_draft_input.accept_tokens = padded
        return result

    def note_step(self, batch) -> None:
        """When a batch's results arrive: charge its wall time to the requests' stages.

        Decode steps go to each client request's reasoning or answer (verify) time, flagged when a
        draft of the request was in the same batch; a prefill batch's share per draft it started goes
        to the parent's draft prefill time.
        """
        started = self.step_started
        if started is None:
            return
        self.step_started = None
        if str(self.device).startswith("cuda"):  # result processing waits for the device next anyway
            torch.cuda.current_stream().synchronize()
        now = time.perf_counter()
        seconds = now - started
        # The policy pays for whole scheduler iterations (result processing, batch building and the
        # forward), i.e. the time since the last batch's results; a gap much longer than the forward
        # was idle time, not the step.
        loop = now - self._last_result if self._last_result is not None else None
        self._last_result = now
        loop = loop if loop is not None and loop <= 3 * seconds else None
        states = [self.requests.get(r.rid) for r in batch.reqs]
        if batch.forward_mode.is_decode():
            with_draft = {st.parent_rid for st in states if st is not None and st.is_draft}
            drafts = sum(1 for st in states if st is not None and st.is_draft)
            if self.policy is not None and loop is not None:
                reasoning = all(st is not None and (st.is_draft or st.phase == REASONING) for st in states)
                self.policy.observe_step(len(states) - drafts, drafts, loop, reasoning)
            for st in states:
                if st is not None and not st.is_draft:
                    st.note_step_time(seconds, st.rid in with_draft)
                    st.counters.verify_steps += 1
                    st.counters.verify_nodes += self._width
        else:
            share = seconds / max(1, len(states))
            for st in states:
                parent = self.requests.get(st.parent_rid) if st is not None and st.is_draft else None
                if parent is not None:
                    parent.counters.draft_prefill_time_s += share
                    if self.policy is not None and loop is not None:
                        self.policy.observe_prefill(loop / max(1, len(states)))

    # -- proposals ----------------------------------------------------------
    def _prepare_draft_tokens(self, batch):
        if self.ssr_config.reasoning_fallback == "ngram":
            req_drafts, mask = super()._prepare_draft_tokens(batch)
        else:
            req_drafts, mask = self._empty_proposals(batch)
        n = self.draft_token_num
        nn = n * n
        widths = [n] * len(batch.reqs) if self.adaptive_width else None  # nodes in use, per request
        disabled = self.disabled
        for i, req in enumerate(batch.reqs):
            rows, mrows = slice(i * n, (i + 1) * n), slice(i * nn, (i + 1) * nn)
            tree = None
            if not (disabled and req.rid in disabled):
                try:
                    tree = self._propose_one(req, n)
                except Exception as e:  # noqa: BLE001 - never fail the batch: this request goes on as NGRAM
                    self.disable(req.rid, f"building proposals failed: {e!r}", e)
                    tree = None
            if tree is not None:
                req_drafts[rows] = tree.tokens
                mask[mrows] = tree.mask
                if widths is not None:
                    widths[i] = tree.num_real
            else:  # n-gram or padding-only rows, zero-padded: width first, then distinct padding
                if widths is not None:
                    widths[i] = nodes_in_use(req_drafts[rows], mask[mrows], n)
                renamed = distinct_siblings(req_drafts[rows], mask[mrows], n)
                if self.check_trees:
                    self.siblings_renamed += renamed
            if self.check_trees:
                self.tree_checks += 1
                self.duplicate_siblings_seen += duplicate_siblings(req_drafts[rows], mask[mrows], n)
        self._widths = widths
        return req_drafts, mask

    def _propose_one(self, req, n: int):
        """The token tree of one request's draft-based proposals, or None (keep the n-gram rows)."""
        st = self.state_for(req)
        out = req.output_ids
        st.settle(out)
        st.advance(out)
        if st.phase == ANSWER and st.has_drafts:
            faults.hit("propose", req.rid)
            branches = st.propose(out)
            if branches:
                last = out[-1] if len(out) else req.origin_input_ids_unpadded[-1]
                return layout_tree(last, [b.tokens for b in branches], n)
        if st.phase == ANSWER:
            st.note_plain_step(out)
        return None

    def _prepare_for_speculative_decoding(self, batch):
        self._widths = None
        super()._prepare_for_speculative_decoding(batch)
        if not (self._widths and batch.forward_mode.is_target_verify()):
            return
        if batch.has_grammar or batch.return_logprob:
            return  # SGLang derives grammar masks and logprobs at the full width
        width = max(self._widths)
        if width < self.draft_token_num:
            self._narrow(batch, width)

    def _narrow(self, batch, width: int) -> None:
        """Cut the batch's verify input to the first ``width`` nodes of every tree.

        Trees are in BFS order (a parent before its children), so the first ``width`` nodes are a
        subtree; the nodes cut are padding or, for a request with a narrower tree than the batch's
        widest, nothing. The KV slots stay reserved as for a full step; only fewer are written.
        """
        n, bs, info = self.draft_token_num, len(batch.reqs), batch.spec_info
        tokens = info.draft_token.view(bs, n)[:, :width].reshape(-1).contiguous()
        mask = info.custom_mask.view(bs, n, n)[:, :width, :width].reshape(-1).contiguous()
        positions = torch.empty(bs * width, dtype=info.positions.dtype, device=tokens.device)
        index = torch.empty((bs, width), dtype=info.retrieve_index.dtype, device=tokens.device)
        next_token = torch.empty_like(index)
        next_sibling = torch.empty_like(index)
        reconstruct_indices_from_tree_mask_func(mask, batch.seq_lens, positions, index, next_token, next_sibling,
                                                bs, width)
        batch.input_ids = tokens
        batch.out_cache_loc = batch.out_cache_loc.view(bs, n)[:, :width].reshape(-1).contiguous()
        batch.spec_info = NgramVerifyInput(
            draft_token=tokens, custom_mask=mask, positions=positions, retrieve_index=index,
            retrieve_next_token=next_token, retrieve_next_sibling=next_sibling, draft_token_num=width,
        )
        self._width = width

    def _empty_proposals(self, batch):
        """Every request gets a tree of padding only (zero-padded as SGLang's n-gram corpus pads; the
        caller makes the padding distinct): one verified token per step."""
        self.prev_token_ids, self.prev_accept_lens = [], [0] * len(batch.reqs)  # read by the corpus update
        bs = len(batch.reqs)
        last = [req.output_ids[-1] if len(req.output_ids) else req.origin_input_ids_unpadded[-1] for req in batch.reqs]
        _, mask, _ = build_chain(0, [], self.draft_token_num)
        req_drafts = np.zeros(bs * self.draft_token_num, dtype=np.int64)
        req_drafts[:: self.draft_token_num] = last
        return req_drafts, np.tile(mask, bs)


def unsupported_request(req) -> str:
    """Why SSR cannot draft for ``req`` ("" when it can). A multimodal prompt: a draft would be forked
    with the padded multimodal token ids and without the request's multimodal inputs."""
    if getattr(req, "multimodal_inputs", None) is not None:
        return "multimodal input: SSR does not fork drafts for multimodal requests"
    return ""


def _adaptive_width(setting: str, runner) -> bool:
    """``SSR_VERIFY_WIDTH``: narrow verify steps only where the verify input has a flat tree mask and no
    fixed-shape CUDA graphs, and the model has no recurrent state committed at the full width."""
    if setting == "full":
        return False
    if not str(runner.device).startswith("cpu"):
        raise SSRConfigError("environment variable SSR_VERIFY_WIDTH=adaptive is supported on CPU only "
                             "(GPU verify steps run at a fixed width in CUDA graphs); use 'full'")
    return not getattr(runner.model_config, "is_hybrid_swa", False) and mambaish_config(runner.model_config) is None
