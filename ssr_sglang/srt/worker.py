"""``SSRWorker``: NGRAM's verify path, fed with proposals from draft answers in the answer phase.

Per decode step, for each request of the batch:

* reasoning phase: the n-gram proposal SGLang's NGRAM would make (``SSR_REASONING_FALLBACK=ngram``,
  the default: with the full verify width reasoning runs exactly as under NGRAM) or none;
* answer phase with drafts: the core proposer's branches (prefix continuation of aligned drafts,
  suffix-index matches), merged into one token tree of ``--speculative-num-draft-tokens`` nodes;
  the n-gram proposal when the drafts have nothing to offer.

Verification is SGLang's own (greedy tree walk; its sampling path where SGLang uses one), so the
output is the target model's whatever is proposed. On CPU a step may verify only the first ``w``
tree nodes (a subtree: parents come first): ``SSR_VERIFY_WIDTH=auto`` (the default) takes the ``w``
of :class:`~ssr_sglang.core.width.WidthPolicy`, which it feeds with every iteration's time and each
sequence's accepted path; ``adaptive`` takes the widest proposal in the batch (1 when nobody proposes
anything: a plain decode step). Tensor-parallel servers, GPUs and models with recurrent state keep the
full width. The worker only proposes: the per-request state, the hidden draft requests and their endings belong to the
:class:`~ssr_sglang.srt.draft_manager.DraftManager` it creates, which it asks for a request's state.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from sglang.srt.configs.hybrid_arch import mambaish_config
from sglang.srt.speculative.ngram_info import NgramVerifyInput
from sglang.srt.speculative.ngram_worker import NGRAMWorker

from ssr_sglang.core.policy import DraftPolicy
from ssr_sglang.core.tree import (build_chain, distinct_siblings, distinct_siblings_batch, duplicate_siblings,
                                  layout_tree, nodes_in_use_batch, parents_batch)
from ssr_sglang.core.width import WidthPolicy, accepted_path
from ssr_sglang.srt import active, compat, consensus, faults, overlap, think_ids
from ssr_sglang.srt.config import SSRConfigError, default_max_batch, server_config_from_env
from ssr_sglang.srt.draft_manager import DraftManager
from ssr_sglang.srt.request_state import ANSWER, REASONING

logger = logging.getLogger(__name__)


class SSRWorker(NGRAMWorker):
    def __init__(self, server_args, gpu_id, nccl_port, target_worker):
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        compat.check_worker(self)  # a missing SGLang internal stops the server here, naming it
        self.ssr_config = cfg = server_config_from_env()  # the one read of the SSR_* environment
        runner = target_worker.model_runner
        hf_config = runner.model_config.hf_config
        from sglang.srt.runtime_context import get_serving

        think = think_ids.from_config(target_worker.tokenizer, getattr(hf_config, "model_type", "") or "",
                                      get_serving().reasoning_parser, cfg)
        self.adaptive_width = _adaptive_width(cfg.verify_width, runner)
        # SSR_VERIFY_WIDTH=auto: the width each step verifies is chosen from measured costs and acceptance.
        # Tensor-parallel ranks time differently and must verify the same trees: they keep the full width.
        auto = cfg.verify_width == "auto"
        if auto and server_args.tp_size > 1:
            self.adaptive_width = False
        self.width_policy = WidthPolicy(self.draft_token_num) if self.adaptive_width and auto else None
        self._widths: Optional[list] = None  # per request of the batch being prepared: nodes in use
        self._kinds: Optional[list] = None  # ... and where its proposal came from (width policy)
        self._trees: Optional[tuple] = None  # (tokens, parents), (bs, n) each, of a step the width policy rates
        self._last_timed: Optional[tuple] = None  # (sequences, width, start, tokens) of the last step it chose
        self._free: Optional[tuple] = None  # (width, rate it) of a step where rows are nearly free
        self._chosen = False  # the width policy chose the width of the step being prepared
        self._choice_s: Optional[float] = None  # seconds of bookkeeping a chosen width cost this step
        self._width = self.draft_token_num  # nodes verified in the current step
        self._forwards = 0  # forward passes so far (the width policy pairs consecutive steps)
        # Overlap scheduling: per request of the batch being prepared, the previous step's accepted tokens
        # not yet in req.output_ids (None when nothing is pending; see ssr_sglang.srt.overlap)
        self._pending: Optional[dict] = None
        # The drafting policy decides from this process's own timers. Tensor-parallel ranks time
        # differently, so there requests follow their fixed schedules (token counts only).
        policy = DraftPolicy(max_accept=self.draft_token_num) if server_args.tp_size == 1 else None
        self.manager = DraftManager(cfg, think, self.draft_token_num, runner.model_config.vocab_size,
                                    cfg.max_batch or default_max_batch(runner.device), policy, str(self.device))
        self.check_trees = faults.CHECK_TREES  # tests: count duplicate siblings in every verified tree
        if self.check_trees:
            self.manager.tree_stats = {"tree_checks": 0, "duplicate_siblings_seen": 0, "siblings_renamed": 0}
        if not think.end:
            logger.warning("SSR: no think markers for this model; requests decode as under NGRAM (set SSR_THINK_START/END)")
        self.manager.overlap = {"schedule": self.enable_overlap, "pending_steps": 0}  # /server_info
        self.manager.width_policy = self.width_policy
        self.manager.on_result = self.rate_result  # verify steps are rated when their results are processed
        active.MANAGER = self.manager  # one per scheduler process (each tensor-parallel rank has its own)

    # -- one step: timing, and the rows of a narrowed verify -------------------
    def forward_batch_generation(self, batch, *args, **kwargs):
        started = time.perf_counter()
        self._forwards += 1
        last, self._last_timed = self._last_timed, None
        if last is not None and batch.forward_mode.is_decode() and self.width_policy is not None:
            # decode right after decode: the interval between their starts is the whole last iteration
            self.width_policy.observe_step(last[0], last[1], started - last[2], last[3], last[4])
        self._width = self.draft_token_num
        self._trees = None
        self._chosen = False
        self._choice_s = None
        result = super().forward_batch_generation(batch, *args, **kwargs)
        if self._trees is not None:
            # rated when the result is processed (rate_result), from the host copy SGLang makes of it then
            result.ssr_rating = (self._trees, self._kinds, self._width, self._choice_s)
            self._trees = None
        if self._chosen and self.width_policy is not None:
            # tokens committed: wider steps commit more, and their output work is no row cost (CPU tensors)
            self._last_timed = (len(batch.reqs), self._width, started, _committed(result), self._forwards)
        if self._width < self.draft_token_num:
            # Accepted tokens come back in rows of ``width``; SGLang reads rows of the full width.
            rows = result.next_token_ids.view(-1, self._width)
            padded = F.pad(rows, (0, self.draft_token_num - self._width)).reshape(-1)
            result.next_token_ids = padded
            result.next_draft_input.accept_tokens = padded
        # charged to the stages when this result is processed (one step later under overlap scheduling)
        self.manager.clock.step_ran(result, started, self._width)
        return result

    def rate_result(self, batch, result) -> None:
        """When a verify step's result is processed (:meth:`DraftManager.before_batch`; its tensors are host
        copies by then, so this waits for no device): the width policy learns each sequence's accepted path
        (nodes below the step's width), by kind of proposal, and what choosing the width cost."""
        rating = getattr(result, "ssr_rating", None)
        if rating is None:
            return
        result.ssr_rating = None  # rated once
        if self.width_policy is None:
            return
        (tokens, parents), kinds, width, choice_s = rating
        t0 = time.perf_counter()
        try:
            tokens, parents, bs = tokens.tolist(), parents.tolist(), len(tokens)
            # rows of the full width once padded (forward_batch_generation), of `width` otherwise
            out = result.next_token_ids.view(bs, -1).tolist()
            accepted = result.accept_lens.tolist()
            paths: dict = {}
            for i, kind in enumerate(kinds):
                paths.setdefault(kind, []).append(accepted_path(tokens[i], parents[i], out[i], accepted[i], width))
            for kind, ps in paths.items():
                self.width_policy.observe_paths(kind, ps, width)
        except Exception as e:  # noqa: BLE001 - never fail the batch: verify at the full width from now on
            self._width_failed("rating a step", e)
        if choice_s is not None and self.width_policy is not None:
            self.width_policy.observe_choice(len(kinds), choice_s + time.perf_counter() - t0)

    def _width_failed(self, what: str, e: Exception) -> None:
        logger.exception("SSR: %s for SSR_VERIFY_WIDTH=auto failed (%r); verifying at the full width from now on",
                         what, e)
        self.width_policy = self.manager.width_policy = None
        self._trees = None

    # -- proposals ----------------------------------------------------------
    def _prepare_draft_tokens(self, batch):
        # Overlap: the previous step's accepted tokens are pending. Their one host copy of the step is
        # NGRAM's (prev_token_ids / prev_accept_lens), made in its proposal step (see ssr_sglang.srt.overlap).
        relay = overlap.uses_relay(self.enable_overlap, batch)
        if self.ssr_config.reasoning_fallback == "ngram":
            req_drafts, mask = super()._prepare_draft_tokens(batch)
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
        # Where rows are nearly free the width needs no per-request widths, and kinds only to rate the step.
        self._free = free = self.width_policy.free_width(len(batch.reqs)) if self.width_policy is not None else None
        widths = [n] * len(batch.reqs) if self.adaptive_width and free is None else None  # nodes in use, per request
        kinds = [] if self.width_policy is not None and (free is None or free[1]) else None
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
        t0 = time.perf_counter()
        if widths is not None and ngram_rows:  # read before the padding is renamed
            for i, w in zip(ngram_rows, nodes_in_use_batch(tokens[ngram_rows], parents[ngram_rows]).tolist()):
                widths[i] = w
        if free is None and self.width_policy is not None:  # what the choice costs (the rating is added later)
            self._choice_s = time.perf_counter() - t0
        renamed = _distinct_padding(tokens, parents, ngram_rows)  # SGLang zero-pads: make padding distinct
        if self.check_trees:
            stats = self.manager.tree_stats
            stats["siblings_renamed"] += renamed
            for i in range(bs):
                stats["tree_checks"] += 1
                stats["duplicate_siblings_seen"] += duplicate_siblings(tokens[i], mask[i * nn:(i + 1) * nn], n)
        self._widths = widths
        self._kinds = kinds
        if kinds is not None:
            t0 = time.perf_counter()
            self._trees = (tokens, parents)  # made lists when the step is rated (rate_result), not before the forward
            if self._choice_s is not None:
                self._choice_s += time.perf_counter() - t0
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
        self._widths = None
        self._kinds = None
        self._free = None
        self._pending = None  # set by _prepare_draft_tokens, for a decode batch
        super()._prepare_for_speculative_decoding(batch)
        if not batch.forward_mode.is_target_verify():
            self._trees = None
            return
        # SGLang derives grammar masks and logprobs at the full width
        if batch.has_grammar or batch.return_logprob:
            self._trees = None
        elif self._free is not None:
            self._chosen = True
            if self._free[0] < self.draft_token_num:
                self._narrow(batch, self._free[0])
        elif self._widths:
            t0 = time.perf_counter()
            self._chosen = self.width_policy is not None
            width = max(self._widths)
            if self.width_policy is not None:
                try:
                    width, _ = self.width_policy.width(self._kinds, self._widths)
                except Exception as e:  # noqa: BLE001 - never fail the batch
                    self._width_failed("choosing a width", e)
            if width < self.draft_token_num:
                self._narrow(batch, width)
            if self._choice_s is not None:
                self._choice_s += time.perf_counter() - t0
        consensus.note_tree(batch)  # TP ranks compare the trees (a no-op with one rank)

    def _narrow(self, batch, width: int) -> None:
        """Cut the batch's verify input to the first ``width`` nodes of every tree.

        Trees are in BFS order (a parent before its children), so the first ``width`` nodes are a
        subtree; the nodes cut are padding or, for a request with a narrower tree than the batch's
        widest, nothing. The KV slots stay reserved as for a full step; only fewer are written.

        The subtree's verify metadata is the full tree's, cut: a node keeps its depth (its ancestors come
        before it); its first child and its next sibling are the smallest such index, so either it lies
        below ``width`` and stays, or none does (-1).
        """
        n, bs, info = self.draft_token_num, len(batch.reqs), batch.spec_info
        tokens = info.draft_token.view(bs, n)[:, :width].reshape(-1).contiguous()
        mask = info.custom_mask.view(bs, n, n)[:, :width, :width].reshape(-1).contiguous()
        positions = info.positions.view(bs, n)[:, :width].reshape(-1).contiguous()
        index = torch.arange(bs * width, dtype=info.retrieve_index.dtype, device=tokens.device).view(bs, width)
        next_token = _cut(info.retrieve_next_token.view(bs, n)[:, :width], width)
        next_sibling = _cut(info.retrieve_next_sibling.view(bs, n)[:, :width], width)
        batch.input_ids = tokens
        batch.out_cache_loc = batch.out_cache_loc.view(bs, n)[:, :width].reshape(-1).contiguous()
        batch.spec_info = NgramVerifyInput(
            draft_token=tokens, custom_mask=mask, positions=positions, retrieve_index=index,
            retrieve_next_token=next_token, retrieve_next_sibling=next_sibling, draft_token_num=width,
        )
        self._width = width

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


def _cut(links: torch.Tensor, width: int) -> torch.Tensor:
    """Node links (first child, next sibling; -1 for none) of a tree cut to its first ``width`` nodes."""
    return torch.where(links < width, links, torch.full_like(links, -1))


def _committed(result) -> float:
    """Tokens a verify step committed (accepted nodes and bonus tokens of all its sequences); 0 where the
    result does not say."""
    lens = getattr(result, "accept_lens", None)
    return float(lens.sum()) if lens is not None else 0.0


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


def _adaptive_width(setting: str, runner) -> bool:
    """``SSR_VERIFY_WIDTH``: narrow verify steps only where the verify input has a flat tree mask and no
    fixed-shape CUDA graphs, and the model has no recurrent state committed at the full width. ``auto``
    falls back to the full width where narrowing is not possible; ``adaptive`` asked for it explicitly,
    so a GPU refuses it."""
    if setting == "full":
        return False
    if not str(runner.device).startswith("cpu"):
        if setting == "auto":
            return False
        raise SSRConfigError("environment variable SSR_VERIFY_WIDTH=adaptive is supported on CPU only "
                             "(GPU verify steps run at a fixed width in CUDA graphs); use 'full' or 'auto'")
    return not getattr(runner.model_config, "is_hybrid_swa", False) and mambaish_config(runner.model_config) is None
