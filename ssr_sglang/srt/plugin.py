"""Entry point of the ``sglang.srt.plugins`` group.

SGLang 0.5.23 calls it in the launcher, ``sglang.Engine``, every scheduler process and the
detokenizer, so it must be idempotent and cheap; anything heavy is imported lazily.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


def register() -> None:
    from ssr_sglang.cpu import bootstrap

    if bootstrap.cpu_engine_requested():
        from ssr_sglang.cpu import parallel

        parallel.install()  # --tp-size / --dp-size on CPU: a bind group per rank, gloo groups without NCCL
    if bootstrap.cpu_engine_requested() and bootstrap.shim_active():
        _keep_intel_amx_attention()
        from ssr_sglang.cpu import eagle_sampling

        eagle_sampling.install()  # sampled requests: CPU verify samples, as on GPU (NGRAM and EAGLE too)
        from ssr_sglang.cpu import exact

        exact.install()  # SSR_CPU_EXACT_VERIFY=1: verify rows computed as decode rows
        from ssr_sglang.cpu import gdn_ops

        gdn_ops.install()  # hybrid Gated DeltaNet models: the gated RMSNorm's CPU op
        from ssr_sglang.cpu import grammar_ops

        grammar_ops.install()  # reasoner grammars without an inner grammar (--enable-strict-thinking) on CPU
    _register_algorithm()
    from ssr_sglang.srt import hooks, sglang_fixes

    hooks.install()
    sglang_fixes.install()  # SGLang bugs, fixed on every speculative server (NGRAM too)
    from ssr_sglang.srt import consensus

    consensus.install()  # after SSR's hooks: TP ranks compare their draft decisions after each step


def _register_algorithm() -> None:
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import get_spec

    from ssr_sglang.srt.spec import NAME, SSRSpecAlgo

    if get_spec(NAME) is not None:
        return

    def worker_factory(server_args):
        from ssr_sglang.srt.worker import SSRWorker

        return SSRWorker

    # Overlap scheduling: results arrive one step late, which the worker's proposals account for
    # (ssr_sglang.srt.overlap); SSRSpecAlgo.handle_server_args turns it off where SGLang does for NGRAM.
    SpeculativeAlgorithm.register(NAME, supports_overlap=True, spec_class=SSRSpecAlgo)(worker_factory)


def _keep_intel_amx_attention() -> None:
    """Let ``--attention-backend intel_amx`` (SGLang's CPU default) stand on the stand-in ops.

    SGLang rewrites ``intel_amx`` to ``torch_native`` unless its platform fact ``has_amx`` holds,
    and ``torch_native`` cannot run speculative verification (no TARGET_VERIFY). The stand-ins
    provide the two attention ops that backend uses, so the fact is set for attention only;
    linear/norm layers still check for ``convert_weight_packed`` and keep their torch paths.
    """
    from sglang.srt.runtime_context import get_platform, override_platform

    if not get_platform().has_amx:
        override_platform(has_amx=True).install()
