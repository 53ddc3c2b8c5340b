"""The ``SSR`` speculative algorithm as SGLang 0.5.23 sees it.

SSR reuses NGRAM's verify path (host-side proposals laid out as a token tree), so the spec class
answers like NGRAM (``is_ngram``) and adds what 0.5.23's ``CustomSpecAlgo`` lacks but the scheduler
calls (``create_future_map``, ``need_topk``, ``carries_draft_hidden_states``).
"""

from __future__ import annotations

import logging

from sglang.srt.speculative.spec_registry import CustomSpecAlgo

logger = logging.getLogger(__name__)

NAME = "SSR"
DEFAULT_NUM_DRAFT_TOKENS = 12  # tree nodes per verify step, the same default as NGRAM
DEFAULT_MAX_RUNNING_REQUESTS = 48
# Tests only: keep overlap scheduling on a CPU server (SGLang turns it off for speculative decoding on
# CPU; its overlap loop runs there, synchronously, which is what makes SSR's overlap path testable).
FORCE_OVERLAP_CPU_ENV = "SSR_TEST_FORCE_OVERLAP_CPU"


def force_overlap_cpu() -> bool:
    from ssr_sglang import settings

    return settings.get(FORCE_OVERLAP_CPU_ENV)


class SSRSpecAlgo(CustomSpecAlgo):
    def is_ngram(self) -> bool:
        return True

    def has_draft_kv(self) -> bool:
        return False

    def need_topk(self) -> bool:
        return False

    def carries_draft_hidden_states(self) -> bool:
        return False

    def create_future_map(self, device, req_to_token_pool, needs_cpu_seq_lens=True, needs_confidence_relay=False):
        from sglang.srt.managers.overlap_utils import FutureMap

        return FutureMap(device, self, req_to_token_pool, needs_cpu_seq_lens, needs_confidence_relay)

    def handle_server_args(self, sa) -> None:
        """SSR's defaults, the way ``_handle_ngram`` sets NGRAM's; explicit user flags win.

        ``sa`` is SGLang's write-recording stand-in: reads see the user's values, writes declare.
        """
        from ssr_sglang import settings
        from ssr_sglang.srt.config import server_config_from_env

        settings.check_environment()  # a bad SSR_* value fails start-up here, naming it; unknown ones are logged
        server_config_from_env()  # likewise for what no single variable shows (a schedule, the think markers)
        from ssr_sglang.srt import compat

        compat.check_static()  # an SGLang internal SSR relies on is missing: stop, naming it
        if sa.device not in ("cuda", "cpu", "xpu"):
            raise ValueError(f"--speculative-algorithm SSR supports --device cuda, cpu or xpu, not {sa.device!r}")
        refuse_unsupported(sa)
        check_cuda_kernels(sa.device)
        changed = {}
        # Overlap scheduling stays where SGLang keeps it for NGRAM (off on CPU: _handle_ngram), unless a
        # test forces it on.
        if sa.device == "cpu" and not sa.disable_overlap_schedule and not force_overlap_cpu():
            sa.disable_overlap_schedule = True
            changed["disable_overlap_schedule"] = True
        if sa.enable_mixed_chunk:
            sa.enable_mixed_chunk = False
            changed["enable_mixed_chunk"] = False
        if sa.max_running_requests is None:
            sa.max_running_requests = DEFAULT_MAX_RUNNING_REQUESTS
            changed["max_running_requests"] = DEFAULT_MAX_RUNNING_REQUESTS
        if sa.speculative_num_draft_tokens is None:
            sa.speculative_num_draft_tokens = DEFAULT_NUM_DRAFT_TOKENS
            changed["speculative_num_draft_tokens"] = DEFAULT_NUM_DRAFT_TOKENS
        elif sa.speculative_num_draft_tokens < 1:
            raise ValueError(
                f"--speculative-num-draft-tokens must be >= 1 for SSR, got {sa.speculative_num_draft_tokens}"
            )
        n = sa.speculative_num_draft_tokens
        if sa.speculative_eagle_topk is None:
            topk = min(sa.speculative_ngram_max_bfs_breadth, n)
            sa.speculative_eagle_topk = topk
            changed["speculative_eagle_topk"] = topk
        if sa.speculative_num_steps is None:
            steps = max(1, n // sa.speculative_eagle_topk)
            sa.speculative_num_steps = steps
            changed["speculative_num_steps"] = steps
        if sa.speculative_eagle_topk > 1 and sa.page_size not in (None, 1) and sa.attention_backend != "flashinfer":
            raise ValueError(
                "--speculative-algorithm SSR with --page-size > 1 needs --attention-backend flashinfer "
                "(token trees on paged attention); use --page-size 1 or flashinfer"
            )
        if sa.device == "cpu" and not sa.disable_overlap_schedule:
            logger.warning("SSR: overlap scheduling kept on CPU (%s=1, tests only)", FORCE_OVERLAP_CPU_ENV)
        if changed:
            logger.info("SSR set server defaults: %s", ", ".join(f"{k}={v}" for k, v in changed.items()))


def refuse_unsupported(sa) -> None:
    """Deployments SSR cannot serve correctly stop the server at start-up, naming the setting.

    * PD disaggregation: a forked draft lands in the bootstrap / prealloc queues, not in
      ``waiting_queue``, so SSR would count it as rejected while it runs on, unhidden.
    * Pipeline parallelism: drafts are forked from ``process_batch_result`` of one scheduler, and
      the pipeline's micro-batches are not the batches SSR's bookkeeping reads.
    * ``SGLANG_RUST_SERVER=1``: SSR's ``meta_info["ssr"]`` travels as additional customized output,
      which SGLang's Rust egress refuses.
    * DP attention: SGLang 0.5.23's NGRAM worker, whose verify path SSR rides on, has no DP-attention
      support yet (``ngram_worker``: idle batches "once DP attention support lands"), and the attention
      DP ranks of one TP group would each fork drafts for different requests. Whole replicas
      (``--dp-size`` without ``--enable-dp-attention``) are supported.
    """
    if getattr(sa, "enable_dp_attention", False):
        raise ValueError("--speculative-algorithm SSR does not support DP attention (--enable-dp-attention); "
                         "use --dp-size replicas without --enable-dp-attention")
    mode = getattr(sa, "disaggregation_mode", "null")
    if mode not in (None, "null"):
        raise ValueError(f"--speculative-algorithm SSR does not support PD disaggregation "
                         f"(--disaggregation-mode {mode}); serve SSR without --disaggregation-mode")
    pp = getattr(sa, "pp_size", 1) or 1
    if pp > 1:
        raise ValueError(f"--speculative-algorithm SSR does not support pipeline parallelism (--pp-size {pp}); "
                         f"use --pp-size 1")
    from sglang.srt.environ import envs

    if envs.SGLANG_RUST_SERVER.get():
        raise ValueError("--speculative-algorithm SSR does not support SGLang's Rust server "
                         "(environment variable SGLANG_RUST_SERVER=1): its egress refuses the per-request "
                         "meta_info['ssr']; unset SGLANG_RUST_SERVER")


# What SGLang 0.5.23 verifies a sampled (temperature > 0) request's token tree with on CUDA
# (speculative/eagle_utils.eagle_sample): both come from flashinfer (the second is SGLang's JIT kernel, built
# against flashinfer's headers). Without them the first sampled request kills the scheduler (measured on an
# H200 without flashinfer, benchmarks/results/gpu-h200-1204).
SAMPLED_VERIFY_KERNELS = ("flashinfer.sampling.top_k_renorm_probs", "tree_speculative_sampling_target_only")


def check_cuda_kernels(device: str, has_module=None) -> None:
    """On CUDA, refuse to start unless sampled requests can be verified, naming the kernels and the flag.

    ``has_module(name)`` (default: ``importlib.util.find_spec``) says whether a package is importable.
    With ``SSR_GREEDY_ONLY=1`` the server starts all the same and sampled requests get a 400
    (:func:`check_request_sampling`)."""
    import importlib.util

    from ssr_sglang import settings

    if str(device).split(":")[0] != "cuda" or settings.get("SSR_GREEDY_ONLY"):
        return
    has = has_module or (lambda name: importlib.util.find_spec(name) is not None)
    if not has("flashinfer"):
        raise ValueError(
            "--speculative-algorithm SSR on CUDA verifies sampled requests with "
            f"{' and '.join(SAMPLED_VERIFY_KERNELS)}, which need flashinfer, and flashinfer is not installed: "
            "install flashinfer-python, or set SSR_GREEDY_ONLY=1 to serve greedy requests only "
            "(sampled requests then get HTTP 400)")


def check_request_sampling(sampling_params, device: str) -> None:
    """With ``SSR_GREEDY_ONLY=1`` on CUDA, a sampled request is refused (a ``ValueError``: HTTP 400).

    Greedy is temperature 0, which SGLang normalizes to ``top_k == 1``."""
    from ssr_sglang import settings

    if sampling_params is None or str(device).split(":")[0] != "cuda" or not settings.get("SSR_GREEDY_ONLY"):
        return
    temperature = getattr(sampling_params, "temperature", 0.0) or 0.0
    if getattr(sampling_params, "top_k", None) == 1 or temperature < 1e-6:
        return
    raise ValueError(f"sampling_params.temperature must be 0 on this server (SSR_GREEDY_ONLY=1: no flashinfer to "
                     f"verify sampled requests), got {temperature}")
