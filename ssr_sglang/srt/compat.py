"""Every SGLang internal SSR relies on, checked when an SSR server starts.

SSR pins ``sglang==0.5.23`` because it reaches into SGLang's internals: the hook targets, the
constructor of the hidden draft requests, and attributes read off ``Req``, ``Scheduler``,
``NGRAMWorker`` and the radix cache. A mismatch (a renamed method, a changed constructor, a hook that
failed to apply, which ``HookRegistry`` only logs) stops the server with :class:`SGLangCompatError`
naming the internal and the installed SGLang version, instead of SSR quietly degrading or failing
under traffic.

* :func:`check_static` (``SSRSpecAlgo.handle_server_args``, the launcher, before a model loads):
  classes, methods, constructor fields, ``Req`` attributes.
* :func:`check_worker` (``SSRWorker.__init__``, the scheduler process): the hooks are applied there
  (on the CPU engine, also the one that lets verify sample: :mod:`ssr_sglang.cpu.eagle_sampling`),
  and the NGRAM worker attributes SSR reads exist.
* :func:`check_scheduler` (first scheduler hook call): instance attributes of the live scheduler.
"""

from __future__ import annotations

import importlib
import inspect

SCHED = "sglang.srt.managers.scheduler.Scheduler"
TOKENIZER = "sglang.srt.managers.tokenizer_manager.TokenizerManager"

INTERNAL_STATE = "sglang.srt.managers.scheduler_components.internal_state.SchedulerInternalStateController"
# Methods SSR hooks: (target, function of ssr_sglang.srt.hooks, HookType name); hooks.install registers exactly
# these.
HOOKS = (
    (f"{SCHED}.process_batch_result", "_process_batch_result", "AROUND"),
    (f"{SCHED}.get_output_streamer_class", "_output_streamer_class", "AROUND"),
    (f"{SCHED}.send_abort_output", "_send_abort_output", "AROUND"),
    (f"{SCHED}.on_idle", "_on_idle", "AROUND"),
    ("sglang.srt.managers.schedule_policy.SchedulePolicy.calc_priority", "_calc_priority", "AROUND"),
    ("sglang.srt.managers.schedule_batch.ScheduleBatch._get_decode_retraction_order", "_retraction_order", "AROUND"),
    (f"{INTERNAL_STATE}._add_speculative", "_add_speculative", "AFTER"),
    (f"{TOKENIZER}._create_tokenized_object", "_create_tokenized_object", "AROUND"),
    (f"{TOKENIZER}.update_request_meta_info", "_update_request_meta_info", "AROUND"),
)
HOOK_TARGETS = tuple(target for target, _, _ in HOOKS)
# Other callables SSR calls or overrides.
CALLABLES = (
    f"{SCHED}.handle_generate_request",
    f"{SCHED}.abort_request",
    "sglang.srt.mem_cache.unified_radix_cache.UnifiedRadixCache.checkpoint",
    "sglang.srt.managers.scheduler_components.output_streamer.SchedulerOutputStreamer.stream_output",
    "sglang.srt.managers.scheduler_components.output_streamer.SchedulerOutputStreamer.build_additional_customized_info",
    "sglang.srt.managers.scheduler_components.output_streamer.SchedulerOutputStreamer.should_build_additional_customized_info",
    "sglang.srt.managers.scheduler_components.output_streamer.SchedulerOutputStreamer.is_request_level_customized_info_key",
    "sglang.srt.speculative.ngram_worker.NGRAMWorker._prepare_draft_tokens",
    "sglang.srt.speculative.ngram_worker.NGRAMWorker._prepare_for_speculative_decoding",
    "sglang.srt.speculative.ngram_worker.NGRAMWorker.forward_batch_generation",
    "sglang.srt.speculative.ngram_worker.reconstruct_indices_from_tree_mask_func",
    "sglang.srt.managers.schedule_batch.Req.refresh_fill_ids",
    "sglang.srt.managers.schedule_batch.Req.finished",
    # overlap scheduling: whether the previous step's accepted tokens are still pending (ssr_sglang.srt.overlap)
    "sglang.srt.managers.schedule_batch.ScheduleBatch.grammar_needs_sync",
    # the verify step of every SSR decode step (sampled requests on CPU: ssr_sglang.cpu.eagle_sampling)
    "sglang.srt.speculative.eagle_utils.eagle_sample",
    "sglang.srt.speculative.eagle_utils._verify_uses_greedy",
    # replaced in the CPU engine's exact mode (ssr_sglang.cpu.exact, SSR_CPU_EXACT_VERIFY=1)
    "sglang.srt.layers.quantization.unquant.UnquantizedLinearMethod.apply",
    "sglang.srt.layers.logits_processor.LogitsProcessor._compute_lm_head",
)
# Keyword arguments draft_manager._draft_request passes to TokenizedGenerateReqInput.
FORK_FIELDS = ("rid", "input_text", "input_ids", "input_embeds", "mm_inputs", "token_type_ids", "sampling_params",
               "return_logprob", "logprob_start_len", "top_logprobs_num", "token_ids_logprob", "stream", "lora_id",
               "extra_key")
NGRAM_VERIFY_FIELDS = ("draft_token", "custom_mask", "positions", "retrieve_index", "retrieve_next_token",
                       "retrieve_next_sibling", "draft_token_num")
# Attributes read off a Req (set in its __init__ or methods).
REQ_ATTRS = ("rid", "output_ids", "origin_input_ids", "origin_input_ids_unpadded", "sampling_params",
             "is_retracted", "skip_radix_cache_insert", "kv", "lora_id", "extra_key", "multimodal_inputs",
             "grammar", "cached_tokens", "finished_reason", "to_finish")
# Attributes read off the live Scheduler.
SCHEDULER_ATTRS = ("waiting_queue", "running_batch", "last_batch", "chunked_req", "grammar_manager", "tree_cache",
                   "token_to_kv_pool_allocator", "max_total_num_tokens", "max_req_input_len", "server_args")
# Attributes the hooks reach the SSR worker through (scheduler_view.worker_of), set in these classes' code:
# checked before a model loads, since without them every hook would pass through and SSR would do nothing.
REACH_ATTRS = ((SCHED, "draft_worker"), (INTERNAL_STATE, "scheduler"))
# Attributes read off the NGRAM worker SSR subclasses. A narrowed step of a batch with a grammar cuts
# grammar_tree_host (the host tree NGRAMWorker.forward_batch_generation builds the grammar mask from) and sets
# draft_token_num to the width for that forward (srt/worker.py).
WORKER_ATTRS = ("draft_token_num", "device", "enable_overlap", "grammar_tree_host")


class SGLangCompatError(RuntimeError):
    """SGLang lacks an internal SSR relies on."""


def sglang_version() -> str:
    try:
        import sglang

        return getattr(sglang, "__version__", "unknown")
    except Exception:  # noqa: BLE001
        return "unknown"


def _fail(what: str, detail: str) -> None:
    raise SGLangCompatError(
        f"--speculative-algorithm SSR needs the SGLang internal {what} ({detail}), which SGLang "
        f"{sglang_version()} does not provide; ssr-sglang supports sglang==0.5.23")


def resolve(path: str):
    """Import ``a.b.C.meth`` (module, then attributes); raise naming the path when it is missing."""
    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            if not hasattr(obj, name):
                _fail(path, f"no attribute {name!r}")
            obj = getattr(obj, name)
        return obj
    _fail(path, "module not importable")


def check_static() -> None:
    from ssr_sglang.srt import sglang_fixes

    for path in HOOK_TARGETS + CALLABLES + sglang_fixes.TARGETS:
        if not callable(resolve(path)):
            _fail(path, "not callable")
    cls = resolve("sglang.srt.managers.io_struct.TokenizedGenerateReqInput")
    fields = set(getattr(cls, "__struct_fields__", ()) or getattr(cls, "__dataclass_fields__", {}))
    for f in FORK_FIELDS:
        if f not in fields:
            _fail(f"sglang.srt.managers.io_struct.TokenizedGenerateReqInput.{f}", "constructor field used to fork drafts")
    verify = resolve("sglang.srt.speculative.ngram_info.NgramVerifyInput")
    params = set(inspect.signature(verify).parameters)
    for f in NGRAM_VERIFY_FIELDS:
        if f not in params:
            _fail(f"sglang.srt.speculative.ngram_info.NgramVerifyInput.{f}", "constructor argument")
    for path, a in REACH_ATTRS:
        if f"self.{a} = " not in inspect.getsource(resolve(path)):
            _fail(f"{path}.{a}", "attribute the SSR hooks reach the SSR worker through")
    req = resolve("sglang.srt.managers.schedule_batch.Req")
    source = inspect.getsource(req)
    for a in REQ_ATTRS:
        if f"self.{a}" not in source and f"def {a}" not in source and not hasattr(req, a):
            _fail(f"sglang.srt.managers.schedule_batch.Req.{a}", "request attribute")
    from ssr_sglang.cpu import eagle_sampling

    if eagle_sampling.wanted():  # CPU engine: sampled requests need the verify step's sampling branch
        for what, detail in eagle_sampling.problems():
            _fail(what, f"{detail}; needed to sample on CPU ({eagle_sampling.ENV}=0 verifies greedily)")


def check_hooks_applied() -> None:
    """``HookRegistry.apply_hooks`` only logs a target it cannot patch: SSR needs every one (its own hooks
    and the SGLang fixes of :mod:`ssr_sglang.srt.sglang_fixes`)."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    from ssr_sglang.srt import sglang_fixes

    for target in HOOK_TARGETS + sglang_fixes.TARGETS:
        if target not in HookRegistry._patched:
            _fail(target, "its SSR hook was not applied: see 'Failed to apply hooks' in the log")


def check_worker(worker) -> None:
    check_static()
    check_hooks_applied()
    from ssr_sglang.cpu import eagle_sampling

    if eagle_sampling.wanted() and not eagle_sampling.applied():
        _fail(eagle_sampling.TARGET, "its CPU sampling hook was not applied: see 'Failed to apply hooks' in the log")
    for a in WORKER_ATTRS:
        if not hasattr(worker, a):
            _fail(f"sglang.srt.speculative.ngram_worker.NGRAMWorker.{a}", "worker attribute")


def check_scheduler(scheduler) -> None:
    for a in SCHEDULER_ATTRS:
        if not hasattr(scheduler, a):
            _fail(f"{SCHED}.{a}", "scheduler attribute")
