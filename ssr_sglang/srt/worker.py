"""``SSRWorker``: NGRAM's verify path, fed with proposals from draft answers in the answer phase.

Per decode step, for each request of the batch:

* reasoning phase: the n-gram proposal SGLang's NGRAM would make (``SSR_REASONING_FALLBACK=ngram``,
  the default, so reasoning is exactly as fast as under NGRAM) or none;
* answer phase with drafts: the core proposer's branches (prefix continuation of aligned drafts,
  suffix-index matches), merged into one token tree of ``--speculative-num-draft-tokens`` nodes;
  the n-gram proposal when the drafts have nothing to offer.

Verification is SGLang's own (greedy tree walk; its sampling path where SGLang uses one), so the
output is the target model's whatever is proposed. Hidden draft requests are forked and managed
by :mod:`ssr_sglang.srt.drafts`; this class only holds their state and reads their tokens.
"""

from __future__ import annotations

import logging
from typing import Dict, Optional

from sglang.srt.speculative.ngram_worker import NGRAMWorker

from ssr_sglang.core.tree import layout_tree
from ssr_sglang.srt import active, metrics
from ssr_sglang.srt.config import RequestConfig, SSRConfigError, client_drafts, parse_request, server_config_from_env
from ssr_sglang.srt.request_state import ANSWER, RequestSSR
from ssr_sglang.srt.think_ids import from_environment

logger = logging.getLogger(__name__)

PROMPT_TAIL = 64  # prompt tokens examined for an open think block


class SSRWorker(NGRAMWorker):
    def __init__(self, server_args, gpu_id, nccl_port, target_worker):
        super().__init__(server_args, gpu_id, nccl_port, target_worker)
        self.ssr_config = server_config_from_env()
        runner = target_worker.model_runner
        hf_config = runner.model_config.hf_config
        from sglang.srt.runtime_context import get_serving

        self.think = from_environment(
            target_worker.tokenizer, getattr(hf_config, "model_type", "") or "", get_serving().reasoning_parser
        )
        self.vocab_size = runner.model_config.vocab_size
        self.requests: Dict[str, RequestSSR] = {}
        self.totals = metrics.ServerTotals()
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
        tail = req.origin_input_ids_unpadded[-PROMPT_TAIL:]
        st = RequestSSR(req.rid, cfg, self.think, tail, self.draft_token_num)
        if drafts and cfg.enabled:
            for d in drafts:
                st.add_client_draft(d)
            if st.phase != "reasoning":
                st.phase, st.answer_start = ANSWER, 0  # the prompt already holds the reasoning
        return st

    def add_draft_state(self, rid: str, parent: RequestSSR, seed_drafts) -> RequestSSR:
        st = RequestSSR(rid, parent.cfg, self.think, (), self.draft_token_num, is_draft=True, parent_rid=parent.rid)
        for toks in seed_drafts:  # iterative SSR: earlier drafts propose tokens for this one
            st.add_client_draft(toks)
        self.requests[rid] = st
        return st

    def is_hidden(self, rid: str) -> bool:
        st = self.requests.get(rid)
        return st is not None and st.is_draft

    def drop(self, rid: str) -> Optional[RequestSSR]:
        return self.requests.pop(rid, None)

    # -- proposals ----------------------------------------------------------
    def _prepare_draft_tokens(self, batch):
        if self.ssr_config.reasoning_fallback == "ngram":
            req_drafts, mask = super()._prepare_draft_tokens(batch)
        else:
            req_drafts, mask = self._empty_proposals(batch)
        n = self.draft_token_num
        nn = n * n
        for i, req in enumerate(batch.reqs):
            st = self.state_for(req)
            out = req.output_ids
            st.settle(out)
            st.advance(out)
            if st.phase != ANSWER:
                continue
            branches = st.propose(out) if st.has_drafts else []
            if branches:
                last = out[-1] if len(out) else req.origin_input_ids_unpadded[-1]
                tree = layout_tree(last, [b.tokens for b in branches], n)
                req_drafts[i * n:(i + 1) * n] = tree.tokens
                mask[i * nn:(i + 1) * nn] = tree.mask
            else:
                st.note_plain_step(out)
        return req_drafts, mask

    def _empty_proposals(self, batch):
        """Every request gets a tree of padding only: one verified token per step."""
        import numpy as np

        from ssr_sglang.core.tree import build_chain

        self.prev_token_ids, self.prev_accept_lens = [], [0] * len(batch.reqs)  # read by the corpus update
        bs = len(batch.reqs)
        last = [req.output_ids[-1] if len(req.output_ids) else req.origin_input_ids_unpadded[-1] for req in batch.reqs]
        toks, mask, _ = build_chain(0, [], self.draft_token_num)
        req_drafts = np.tile(toks, bs)
        req_drafts[:: self.draft_token_num] = last
        return req_drafts, np.tile(mask, bs)
