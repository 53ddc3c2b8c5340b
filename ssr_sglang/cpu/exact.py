"""Exact mode of the CPU engine (``SSR_CPU_EXACT_VERIFY=1``): every row of a step is computed as a
one-token decode step computes it, so a verify pass gives the logits plain decoding gives.

Speculative verification computes several tokens per request in one pass, and plain decoding one.
In bf16 (and, more rarely, in float32) a product over more rows rounds differently, and one flipped
rounding over 30 layers is enough to change a greedy token where the top two logits are close. In
this mode, on the CPU stand-in engine:

* attention: each verify row attends to exactly its own keys (:mod:`ssr_sglang.cpu.attention_ops`);
* linear layers (SGLang's unquantized linear method) run one row at a time: decode and verify steps
  and prefills alike, so a row's product depends neither on its batchmates nor on how many rows the
  step has;
* prefill attention: each prompt token alone over its keys, as its decode step would see them, so a
  prompt's KV does not depend on what the prefix cache held when it arrived, on chunking or on the
  prompts prefilled beside it (which all depend on timing);
* the logits (lm head), one row at a time too.

So a greedy token is a function of the prompt and the tokens before it, at any concurrency, with or
without drafts, exact ties aside (on dense attention; sliding-window layers still prefill each request
as one product). What it costs is measured in ``benchmarks/results`` (each verify step multiplies its linear layers'
work by its number of rows). Pair it with ``--enable-fp32-lm-head``: bf16 logits tie often (a tie
broken by a last-bit difference is still a different token).
"""

from __future__ import annotations

import torch

from ssr_sglang import settings

ENV = "SSR_CPU_EXACT_VERIFY"
# The SGLang internals this mode replaces (named in ssr_sglang.srt.compat, checked at start-up).
TARGETS = (
    "sglang.srt.layers.quantization.unquant.UnquantizedLinearMethod.apply",
    "sglang.srt.layers.logits_processor.LogitsProcessor._compute_lm_head",
)
_installed = False


def requested() -> bool:
    return settings.get(ENV)


def _by_rows(x: torch.Tensor, fn):
    """``fn`` over each row of a 2-D ``x``, concatenated; ``fn(x)`` for one row or another shape."""
    if x.dim() != 2 or x.shape[0] <= 1:
        return fn(x)
    return torch.cat([fn(x[i:i + 1]) for i in range(x.shape[0])])


def install() -> None:
    """Patch the linear method and the lm head when the mode is requested; idempotent."""
    global _installed
    if _installed or not requested():
        return
    from sglang.srt.layers import logits_processor
    from sglang.srt.layers.quantization import unquant

    linear = unquant.UnquantizedLinearMethod.apply
    lm_head = logits_processor.LogitsProcessor._compute_lm_head

    def apply(self, layer, x, bias=None):
        return _by_rows(x, lambda rows: linear(self, layer, rows, bias))

    def compute_lm_head(self, hidden_states, lm_head_layer, embedding_bias=None, *, out=None):
        if hidden_states.dim() == 2 and hidden_states.shape[0] > 1:
            return _by_rows(hidden_states, lambda rows: lm_head(self, rows, lm_head_layer, embedding_bias))
        return lm_head(self, hidden_states, lm_head_layer, embedding_bias, out=out)

    unquant.UnquantizedLinearMethod.apply = apply
    logits_processor.LogitsProcessor._compute_lm_head = compute_lm_head
    _installed = True
