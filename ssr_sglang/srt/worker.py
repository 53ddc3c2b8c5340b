"""``SSRWorker``: NGRAM's verify path, fed with proposals from draft answers in the answer phase.

Per decode step, for each request of the batch:

* reasoning phase: the n-gram proposal SGLang's NGRAM would make (``SSR_REASONING_FALLBACK=ngram``,
  the default: with the full verify width reasoning runs exactly as under NGRAM) or none;
* answer phase with drafts: the core proposer's branches (prefix continuation of aligned drafts,
  suffix-index matches), merged into one token tree of ``--speculative-num-draft-tokens`` nodes;
  the n-gram proposal when the drafts have nothing to offer.

Verification is SGLang's own (greedy tree walk; its sampling path where SGLang uses one), so the
output is the target model's whatever is proposed. The worker proposes and hands the verify input to
its :class:`~ssr_sglang.srt.verify_width.VerifyWidth`, which on CPU may verify only the first ``w``
tree nodes (``SSR_VERIFY_WIDTH``). The per-request state, the hidden draft requests and their endings
belong to the :class:`~ssr_sglang.srt.draft_manager.DraftManager` it creates, which it asks for a
request's state.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

import numpy as np
from sglang.srt.speculative.ngram_worker import NGRAMWorker

from ssr_sglang.core.policy import DraftPolicy
from ssr_sglang.core.tree import (build_chain, distinct_siblings, distinct_siblings_batch, duplicate_siblings,
                                  layout_tree, parents_batch)
from ssr_sglang.srt import compat, consensus, faults, overlap, think_ids
from ssr_sglang.srt.config import default_max_batch, server_config_from_env
from ssr_sglang.srt.draft_manager import DraftManager
from ssr_sglang.srt.request_state import ANSWER, REASONING
from ssr_sglang.srt.verify_width import VerifyWidth

logger = logging.getLogger(__name__)


class SSRWorker(NGRAMWorker):
    serves_ssr = True  # what the hooks look for on the scheduler's draft worker (scheduler_view.worker_of)

    def __init__(self, server_args, gpu_id, nccl_port, target_worker):
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        compat.check_worker(self)  # a missing SGLang internal stops the server here, naming it
        self.ssr_config = cfg = server_config_from_env()  # the one read of the SSR_* environment
        runner = target_worker.model_runner
        hf_config = runner.model_config.hf_config
        from sglang.srt.runtime_context import get_serving

        think = think_ids.from_config(target_worker.tokenizer, getattr(hf_config, "model_type", "") or "",
                                      get_serving().reasoning_parser, cfg)
        self.width = VerifyWidth.for_runner(cfg.verify_width, self.draft_token_num, runner, server_args.tp_size,
                                            overlap=self.enable_overlap)
        # Overlap scheduling: per request of the batch being prepared, the previous step's accepted tokens
        # not yet in req.output_ids (None when nothing is pending; see ssr_sglang.srt.overlap)
        self._pending: Optional[dict] = None
        # The drafting policy decides from this process's own timers. Tensor-parallel ranks time
        # differently, so there requests follow their fixed schedules (token counts only).
        policy = DraftPolicy(max_accept=self.draft_token_num) if server_args.tp_size == 1 else None
        self.check_trees = faults.CHECK_TREES  # tests: count duplicate siblings in every verified tree
        self.manager = DraftManager(cfg, think, self.draft_token_num, runner.model_config.vocab_size,
                                    cfg.max_batch or default_max_batch(runner.device), policy, str(self.device),
                                    width=self.width, overlap_schedule=self.enable_overlap,
                                    check_trees=self.check_trees)
        self.consensus = consensus.make()  # TP ranks compare their decisions (None with one rank)
        if not think.end:
            logger.warning("SSR: no think markers for this model; requests decode as under NGRAM (set SSR_THINK_START/END)")

    # -- one step: timed, and narrowed by the width control --------------------
    def forward_batch_generation(self, batch, *args, **kwargs):
        started = time.perf_counter()
        self.width.start(batch, started)
        inner = time.perf_counter()
        try:
            result = super().forward_batch_generation(batch, *args, **kwargs)
        finally:
            self.draft_token_num = self.width.full  # a narrowed grammar step set it to its width
        done = time.perf_counter()
        self.width.finish(batch, result, started)
        # charged to the stages when this result is processed (one step later under overlap scheduling)
        self.manager.clock.step_ran(result, started, self.width.width)
        self.manager.clock.host(inner - started + time.perf_counter() - done)
        return result

    # -- proposals ----------------------------------------------------------
    def _prepare_draft_tokens(self, batch):
        # Overlap: the previous step's accepted tokens are pending. Their one host copy of the step is
        # NGRAM's (prev_token_ids / prev_accept_lens), made in its proposal step (see ssr_sglang.srt.overlap).
        t0, ngram_s = time.perf_counter(), 0.0
        relay = overlap.uses_relay(self.enable_overlap, batch)
        if self.ssr_config.reasoning_fallback == "ngram":
            req_drafts, mask = super()._prepare_draft_tokens(batch)
            ngram_s = time.perf_counter() - t0  # NGRAM's own proposal work: not SSR's host time
            rows = (self.prev_token_ids, self.prev_accept_lens) if relay else None
        else:
            rows = overlap.relayed_rows(batch) if relay else None
            req_drafts, mask = self._empty_proposals(batch, rows)
        if rows is not None:
            self._pending = overlap.pending_from_rows(batch, rows[0], rows[1], self.draft_token_num)
            self.manager.overlap["pending_steps"] += 1
        req_drafts = np.ascontiguousarray(req_drafts)  # so that its (bs, n) view below writes through
        n = self.draft_token_num
        nn = n * n
        widths, kinds = self.width.plan(len(batch.reqs))  # to fill in: nodes in use, kind of proposal
        disabled = self.manager.disabled
        ngram_rows = []  # requests that keep the n-gram (or padding-only) rows
        for i, req in enumerate(batch.reqs):
            tree, phase = None, None
            if not (disabled and req.rid in disabled):
                try:
                    tree, phase = self._propose_one(req, n)
                except Exception as e:  # noqa: BLE001 - never fail the batch: this request goes on as NGRAM
                    self.manager.disable(req.rid, f"building proposals failed: {e!r}", e)
                    tree = None
            if kinds is not None:
                kinds.append("drafts" if tree is not None else f"ngram-{phase if phase in (REASONING, ANSWER) else 'other'}")
            if tree is not None:
                req_drafts[i * n:(i + 1) * n] = tree.tokens
                mask[i * nn:(i + 1) * nn] = tree.mask
                if widths is not None:
                    widths[i] = tree.num_real
            else:
                ngram_rows.append(i)
        bs = len(batch.reqs)
        tokens = req_drafts.reshape(bs, n)  # a view: renaming below writes through
        # one pass over the masks serves the widths, the renaming and the rating (renaming keeps parents)
        parents = parents_batch(mask, n) if ngram_rows or kinds is not None or self.check_trees else None
        self.width.proposed(tokens, parents, ngram_rows)  # read before the padding is renamed
        renamed = _distinct_padding(tokens, parents, ngram_rows)  # SGLang zero-pads: make padding distinct
        if self.check_trees:
            stats = self.manager.tree_stats
            stats["siblings_renamed"] += renamed
            for i in range(bs):
                stats["tree_checks"] += 1
                stats["duplicate_siblings_seen"] += duplicate_siblings(tokens[i], mask[i * nn:(i + 1) * nn], n)
        self.width.keep_trees(tokens, parents)
        self.manager.clock.host(time.perf_counter() - t0 - ngram_s)
        return req_drafts, mask

    def _propose_one(self, req, n: int):
        """The token tree of one request's draft-based proposals, or None (keep the n-gram rows), and
        the request's phase."""
        st = self.manager.state_for(req)
        out = overlap.seen_outputs(req, self._pending)  # req.output_ids, or it plus the pending tokens
        st.settle(out)
        st.advance(out)
        st.feed_sources(out)  # here only: one chunk per step (the fork pass advances too)
        if st.phase == ANSWER and st.has_drafts:
            faults.hit("propose", req.rid)
            branches = st.propose(out, self._pending)  # the drafts' pending tokens too: current drafts
            if branches:
                return layout_tree(overlap.last_token(req, out), [b.tokens for b in branches], n), st.phase
        if st.phase == ANSWER:
            st.note_plain_step(out)
        return None, st.phase

    def _prepare_for_speculative_decoding(self, batch):
        t0 = time.perf_counter()
        self.width.reset_plan()
        self._pending = None  # set by _prepare_draft_tokens, for a decode batch
        inner = time.perf_counter()
        super()._prepare_for_speculative_decoding(batch)  # proposals (timed in _prepare_draft_tokens)
        done = time.perf_counter()
        self.width.choose(batch)
        if self.width.width < self.draft_token_num:
            self._narrowed(len(batch.reqs), self.width.width)
        if batch.forward_mode.is_target_verify():
            consensus.note_tree(self.consensus, batch)  # TP ranks compare the trees (a no-op with one rank)
        self.manager.clock.host(inner - t0 + time.perf_counter() - done)

    def _narrowed(self, bs: int, width: int) -> None:
        """A step narrowed to ``width`` nodes (the first ``width`` of every tree: a subtree). After the verify
        forward SGLang reads the trees' width from ``draft_token_num`` where it builds a grammar mask (from
        ``grammar_tree_host``, the step's masks and tokens: cut to the same nodes here, one mask row per
        verified node) and where it commits recurrent states (the accepted node of request ``i`` at flat
        index ``i * draft_token_num + node``): in those steps it is set to ``width``, and restored once the
        forward returns. Elsewhere it stays the full width, at which an overlapped step relays its tokens."""
        if self.grammar_tree_host is not None:
            n = self.draft_token_num
            mask, tokens = self.grammar_tree_host
            self.grammar_tree_host = (np.ascontiguousarray(mask.reshape(bs, n, n)[:, :width, :width]).reshape(-1),
                                      np.ascontiguousarray(tokens.reshape(bs, n)[:, :width]).reshape(-1))
        if self.grammar_tree_host is not None or self.width.recurrent:
            self.draft_token_num = width

    def _empty_proposals(self, batch, rows=None):
        """Every request gets a tree of padding only (zero-padded as SGLang's n-gram corpus pads; the
        caller makes the padding distinct): one verified token per step. ``rows``: the relayed
        ``(accept_tokens, accept_lens)`` host lists under overlap scheduling."""
        n, bs = self.draft_token_num, len(batch.reqs)
        # read by the corpus update, as NGRAM's proposal step leaves them
        self.prev_token_ids, self.prev_accept_lens = rows if rows is not None else ([], [0] * bs)
        pending = overlap.pending_from_rows(batch, rows[0], rows[1], n) if rows is not None else None
        last = [overlap.last_token(req, overlap.seen_outputs(req, pending)) for req in batch.reqs]
        _, mask, _ = build_chain(0, [], self.draft_token_num)
        req_drafts = np.zeros(bs * self.draft_token_num, dtype=np.int64)
        req_drafts[:: self.draft_token_num] = last
        return req_drafts, np.tile(mask, bs)


def _distinct_padding(tokens: np.ndarray, parents: np.ndarray, rows: list) -> int:
    """No repeated siblings in the trees of requests ``rows`` (``tokens`` and ``parents`` are ``(B, n)``;
    the rows' tokens are renamed in place: one vectorised pass from ``_BATCH_FROM`` rows on, a loop
    below); returns the nodes renamed."""
    if len(rows) < _BATCH_FROM:  # a loop over few trees costs less than the vectorised pass's fixed cost
        n = tokens.shape[1]
        return sum(distinct_siblings(tokens[i], None, n, parents[i]) for i in rows)
    picked = tokens[rows]
    renamed = distinct_siblings_batch(picked, None, tokens.shape[1], parents[rows])
    if renamed:
        tokens[rows] = picked
    return renamed


_BATCH_FROM = 6
