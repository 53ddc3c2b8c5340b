"""Sampled requests on SGLang's CPU engine: speculative verify samples instead of taking the argmax.

SGLang 0.5.23's ``eagle_sample`` (``sglang/srt/speculative/eagle_utils.py``), the verify step of
NGRAM, EAGLE and SSR, asks ``_verify_uses_greedy(is_all_greedy=..., is_cpu=..., ...)`` and walks the
tree greedily whenever it returns true, which it always does on CPU. A request with ``temperature >
0`` on a speculative CPU server therefore committed the target's argmax at every verified position:
its output was greedy, not sampled (every SSR answer step and every NGRAM step is a verify step).

With the CPU engine's ``sgl_kernel`` stand-ins active, :func:`install` (from the plugin entry point)
registers an AROUND hook on ``_verify_uses_greedy`` that drops only the ``is_cpu`` reason: a batch
with a sampled request takes ``eagle_sample``'s sampling branch, whose ops (``None`` on CPU in
SGLang) it points at the pure-torch stand-ins of :mod:`ssr_sglang.cpu.sampling_ops`. All-greedy
batches keep the greedy walk (the same tokens as before), and so does
``--speculative-use-rejection-sampling`` (its Triton chain sampler has no CPU version).

``SSR_CPU_SPEC_SAMPLING=0`` switches this off (SGLang's greedy CPU verify, for comparison).
"""

from __future__ import annotations

import inspect
import logging

from ssr_sglang import settings

logger = logging.getLogger(__name__)

ENV = "SSR_CPU_SPEC_SAMPLING"
EAGLE_UTILS = "sglang.srt.speculative.eagle_utils"
TARGET = f"{EAGLE_UTILS}._verify_uses_greedy"
# Module globals eagle_sample's sampling branch reads at call time; SGLang leaves them None on CPU.
OP_NAMES = ("tree_speculative_sampling_target_only", "top_k_renorm_prob", "top_p_renorm_prob")
# Keyword arguments eagle_sample passes to _verify_uses_greedy.
PREDICATE_ARGS = ("is_all_greedy", "is_cpu", "is_hip", "is_xpu", "use_rejection_sampling")

_announced = False


def enabled() -> bool:
    return settings.get(ENV)


def wanted() -> bool:
    """This process runs SGLang's CPU engine on the stand-ins, and sampling is not switched off."""
    from ssr_sglang.cpu import bootstrap

    return enabled() and bootstrap.cpu_engine_requested() and bootstrap.shim_active()


def problems() -> list:
    """What this SGLang lacks for the hook to take effect (empty: nothing), as ``(internal, detail)``."""
    import importlib

    try:
        eu = importlib.import_module(EAGLE_UTILS)
    except Exception as e:  # noqa: BLE001
        return [(EAGLE_UTILS, f"not importable: {e!r}")]
    out = []
    pred = getattr(eu, "_verify_uses_greedy", None)
    sample = getattr(eu, "eagle_sample", None)
    if not callable(pred):
        return [(TARGET, "missing")]
    if not callable(sample):
        return [(f"{EAGLE_UTILS}.eagle_sample", "missing")]
    params = inspect.signature(getattr(pred, "__wrapped__", pred)).parameters
    for a in PREDICATE_ARGS:
        if a not in params:
            out.append((TARGET, f"argument {a!r}"))
    names = set(getattr(getattr(sample, "__wrapped__", sample), "__code__").co_names)
    for n in ("_verify_uses_greedy", *OP_NAMES):
        if n not in names:
            out.append((f"{EAGLE_UTILS}.eagle_sample", f"looks up {n!r}"))
    return out


def install() -> None:
    """Register the hook (every SGLang process; applied by SGLang's ``load_plugins``). Idempotent."""
    if not wanted():
        return
    from ssr_sglang.hook_once import register_once

    register_once(__name__, [(TARGET, _verify_uses_greedy, "AROUND")])


def applied() -> bool:
    from sglang.srt.plugins.hook_registry import HookRegistry

    return TARGET in HookRegistry._patched


def provide_ops() -> None:
    """Point eagle_utils' missing sampling ops at the CPU stand-ins (a name SGLang set is kept)."""
    import importlib

    from ssr_sglang.cpu import sampling_ops

    eu = importlib.import_module(EAGLE_UTILS)
    for name in OP_NAMES:
        if getattr(eu, name, None) is None:
            setattr(eu, name, sampling_ops.PYTHON_OPS[name])


def _verify_uses_greedy(original, *args, **kwargs) -> bool:
    greedy = original(*args, **kwargs)
    if not greedy or args or not kwargs.get("is_cpu") or kwargs.get("use_rejection_sampling"):
        return greedy
    if original(**{**kwargs, "is_cpu": False}):  # greedy for another reason: all greedy, HIP, XPU
        return True
    provide_ops()
    global _announced
    if not _announced:
        _announced = True
        logger.info("ssr-sglang: speculative verify of sampled requests on CPU uses the tree "
                    "speculative sampling stand-in (%s=0 restores SGLang's greedy CPU verify)", ENV)
    return False
