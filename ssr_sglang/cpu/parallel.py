"""Tensor and data parallelism on SGLang's CPU engine (``--device cpu --tp-size N`` / ``--dp-size N``).

SGLang 0.5.23 runs CPU ranks as separate scheduler processes joined by a ``gloo`` process group, and
falls back to ``torch.distributed`` over gloo for its all-reduce and all-gather when the ``sgl_kernel``
shared-memory collectives are unavailable (``is_shm_available`` needs the AMX kernels, which the
stand-ins never claim: they define no ``convert_weight_packed``). Two things stopped a CPU TP server
before that fallback was reached; both are fixed here with ``HookRegistry`` hooks, installed in every
SGLang process of a CPU-engine server (from the plugin entry point):

``SGLANG_CPU_OMP_THREADS_BIND``: one bind group per rank
    Every CPU rank looks its group up by its global device id (``numa_utils.init_threads_binding``,
    index ``gpu_id``, which counts over DP replicas too), so TP=2 needs ``a|b``. The interpreter-start
    hook (:mod:`ssr_sglang.cpu.bootstrap`) defaults the variable to ``0`` (one group, right for one
    rank) and records that it did; when a server then has more ranks, :func:`_bind_groups_hook`
    replaces that default, in the rank's own process, with :func:`bind_groups` over the cores this
    process may run on (2 cores, 2 ranks: ``0|1``). A value the user set is never touched.

No NCCL communicator on CPU
    ``init_model_parallel_group`` asks for a PyNccl communicator unless the platform is out of tree and
    says it has none; SGLang's CPU platform is in tree, so on a machine whose torch ships
    ``libnccl.so.2`` (any CUDA build of torch) every CPU TP group built one and failed with
    ``Expected a cuda device, but got: cpu``. :func:`_group_hook` turns PyNccl and the CUDA custom
    all-reduce off for groups on the ``gloo`` backend, i.e. CPU groups; collectives then take SGLang's
    own CPU branches (shared memory where available, else ``torch.distributed`` over gloo).
"""

from __future__ import annotations

import logging
import os

from ssr_sglang import settings

logger = logging.getLogger(__name__)

BIND_ENV = "SGLANG_CPU_OMP_THREADS_BIND"
# Set by the interpreter-start hook when it supplied BIND_ENV's value (so it may be widened per rank).
BIND_DEFAULTED_ENV = "SSR_SGLANG_CPU_BIND_DEFAULTED"

THREADS_BINDING = "sglang.srt.utils.numa_utils.init_threads_binding"
GROUP_INIT = "sglang.srt.distributed.parallel_state.init_model_parallel_group"
TARGETS = (THREADS_BINDING, GROUP_INIT)

def install() -> None:
    from ssr_sglang.hook_once import register_once

    register_once(__name__, [(THREADS_BINDING, _bind_groups_hook, "AROUND"), (GROUP_INIT, _group_hook, "AROUND")])


def _ranges(cores: list) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5``."""
    out, start = [], None
    for i, c in enumerate(cores):
        if start is None:
            start = c
        if i + 1 == len(cores) or cores[i + 1] != c + 1:
            out.append(str(start) if start == c else f"{start}-{c}")
            start = None
    return ",".join(out)


def bind_groups(n_ranks: int, cores: list) -> str:
    """``|``-separated core groups, one per rank: the cores split into ``n_ranks`` contiguous runs of
    equal size (the remainder left unbound); with fewer cores than ranks, ranks share cores round-robin."""
    cores = sorted(cores)
    if n_ranks < 1 or not cores:
        raise ValueError(f"need at least one rank and one core, got {n_ranks} ranks, cores {cores}")
    if len(cores) < n_ranks:
        return "|".join(str(cores[r % len(cores)]) for r in range(n_ranks))
    per = len(cores) // n_ranks
    return "|".join(_ranges(cores[r * per:(r + 1) * per]) for r in range(n_ranks))


def _available_cores() -> list:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def _bind_groups_hook(original, *args, numa_index: int, world_size: int, **kwargs):
    """Widen the bootstrap's one-group default to one group per rank, before SGLang reads it."""
    value = os.environ.get(BIND_ENV, "")
    groups = value.split("|") if value else []
    needed = max(world_size, numa_index + 1)
    if settings.get(BIND_DEFAULTED_ENV) and len(groups) < needed:
        widened = bind_groups(needed, _available_cores())
        logger.info("%s defaulted to %r for %d CPU ranks (was the single-rank default %r)",
                    BIND_ENV, widened, needed, value)
        os.environ[BIND_ENV] = widened
    return original(*args, numa_index=numa_index, world_size=world_size, **kwargs)


def _group_hook(original, *args, **kwargs):
    """CPU (gloo) groups get neither a PyNccl communicator nor the CUDA custom all-reduce.

    SGLang passes ``group_ranks, local_rank, backend`` positionally and the switches by keyword."""
    backend = args[2] if len(args) > 2 else kwargs.get("backend")
    if backend == "gloo" and len(args) <= 3:
        kwargs["use_pynccl"] = False
        kwargs["use_custom_allreduce"] = False
    return original(*args, **kwargs)
