"""Exact mode of the CPU engine (``SSR_CPU_EXACT_VERIFY=1``): every row of a step is computed as a
one-token decode step computes it, so a verify pass gives the logits plain decoding gives.

Speculative verification computes several tokens per request in one pass, and plain decoding one.
In bf16 (and, more rarely, in float32) a product over more rows rounds differently, and one flipped
rounding over 30 layers is enough to change a greedy token where the top two logits are close. In
this mode, on the CPU stand-in engine:

* attention: each verify row attends to exactly its own keys (:mod:`ssr_sglang.cpu.attention_ops`);
* linear layers (SGLang's unquantized linear method) run one row at a time for inputs of at most
  :data:`MAX_ROWS` rows: decode and verify steps, and prefills of short prompts, also several of them
  batched together (a row's product must not depend on its batchmates). A longer prefill keeps one
  product, which is exact only when the prompt is prefilled alone (as at batch 1): prefills batched
  past ``MAX_ROWS`` rows, or verify steps past it (concurrent requests x tree nodes), are not exact;
* the logits (lm head) of such steps, one row at a time too.

What it costs is measured in ``benchmarks/results`` (each verify step multiplies its linear layers'
work by its number of rows). Pair it with ``--enable-fp32-lm-head``: bf16 logits tie often (a tie
broken by a last-bit difference is still a different token).
"""

from __future__ import annotations

import torch

from ssr_sglang import settings

ENV = "SSR_CPU_EXACT_VERIFY"
MAX_ROWS = 512  # rows computed one at a time; more keep one product (see module doc)
# The SGLang internals this mode replaces (named in ssr_sglang.srt.compat, checked at start-up).
TARGETS = (
    "sglang.srt.layers.quantization.unquant.UnquantizedLinearMethod.apply",
    "sglang.srt.layers.logits_processor.LogitsProcessor._compute_lm_head",
)
_installed = False


def requested() -> bool:
    return settings.get(ENV)


def _by_rows(x: torch.Tensor, fn):
    """``fn`` over each row of a 2-D ``x`` of at most MAX_ROWS rows, concatenated; ``fn(x)`` otherwise."""
    if x.dim() != 2 or not 1 < x.shape[0] <= MAX_ROWS:
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
        if hidden_states.dim() == 2 and 1 < hidden_states.shape[0] <= MAX_ROWS:
            return _by_rows(hidden_states, lambda rows: lm_head(self, rows, lm_head_layer, embedding_bias))
        return lm_head(self, hidden_states, lm_head_layer, embedding_bias, out=out)

    unquant.UnquantizedLinearMethod.apply = apply
    logits_processor.LogitsProcessor._compute_lm_head = compute_lm_head
    _installed = True
