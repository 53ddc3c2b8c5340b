"""Grammar masks on SGLang's CPU engine: the xgrammar backend's ``apply_vocab_mask`` for CPU logits.

SGLang 0.5.23 applies a grammar's token bitmask through one of two functions. A compiled grammar's own
``XGrammarGrammar.apply_vocab_mask`` has a CPU branch (xgrammar's ``apply_token_bitmask_inplace`` with
``backend="cpu"``), so regex, EBNF, JSON schema, structural tags and tool calls work on CPU. The backend's
static ``XGrammarGrammarBackend.apply_vocab_mask`` has none and raises ``RuntimeError("Unsupported device:
cpu")``; SGLang reaches it through a reasoner grammar without an inner grammar
(``ReasonerGrammarObject.apply_vocab_mask`` falls back to it), which ``--enable-strict-thinking`` gives every
unconstrained request (think-excluded tokens, ``thinking_budget``): on CPU such a request failed its batch.

:func:`install` (from the plugin entry point, with the CPU engine's stand-ins active) registers an AROUND hook
that applies a mask to CPU logits as the compiled grammar does; any other device goes to SGLang's function.
"""

from __future__ import annotations

TARGET = "sglang.srt.constrained.xgrammar_backend.XGrammarGrammarBackend.apply_vocab_mask"



def install() -> None:
    """Register the hook (every SGLang process of a CPU-engine server). Idempotent."""
    from ssr_sglang.cpu import bootstrap

    if not (bootstrap.cpu_engine_requested() and bootstrap.shim_active()):
        return
    from ssr_sglang.hook_once import register_once

    register_once(__name__, [(TARGET, apply_vocab_mask, "AROUND")])


def apply_vocab_mask(original, logits, vocab_mask) -> None:
    """Mask ``logits`` (``(batch, vocab)``) in place with the packed token bitmask ``vocab_mask`` (a set bit
    keeps a token, a cleared bit sets its logit to ``-inf``): xgrammar's CPU kernel for CPU logits, SGLang's
    own function on any other device."""
    if logits.device.type != "cpu":
        return original(logits, vocab_mask)
    from xgrammar import apply_token_bitmask_inplace

    apply_token_bitmask_inplace(logits, vocab_mask.to(logits.device), backend="cpu")
    return None
