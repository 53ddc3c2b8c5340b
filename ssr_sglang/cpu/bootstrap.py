"""Interpreter-start hook for SGLang's CPU engine (run from ``ssr_sglang_cpu.pth``).

SGLang's CPU engine imports ``sgl_kernel`` at module level in many modules, and in processes it
starts with ``spawn`` (scheduler, detokenizer) before any plugin code runs. So the ``.pth`` line imports
this module at interpreter start when ``SGLANG_USE_CPU_ENGINE=1`` (and only then; tests import it too):

* it sets ``OMP_NUM_THREADS=1`` and ``SGLANG_CPU_OMP_THREADS_BIND=0`` unless the user set them
  (the figure behind that default is in docs/cpu.md); the bind default is for
  one rank, and a server with more ranks (``--tp-size``/``--dp-size``) widens it to one core group per
  rank in each rank's process (:mod:`ssr_sglang.cpu.parallel`);
* it installs an import finder that, when ``sgl_kernel`` is imported and the real package fails to
  load (no CPU build of sgl-kernel is on PyPI; the CUDA one needs ``libcuda.so.1``), serves the
  pure-torch stand-ins of :mod:`ssr_sglang.cpu.sgl_kernel_shim` under that name instead;
* it hides the CUDA-only packages SGLang imports only to see whether they are there
  (:data:`CUDA_ONLY`: ``flashinfer``): ``import flashinfer`` raises ``ModuleNotFoundError`` and
  ``importlib.util.find_spec`` returns None, as on a machine without them, so SGLang takes its CPU
  fallbacks without loading them (about 2.5 s of imports in each of a server's three processes).

A working ``sgl_kernel`` (a GPU machine, or a real CPU build) is always used untouched.
Set ``SSR_SGLANG_CPU_SHIM=0`` to switch the stand-ins off.
"""

from __future__ import annotations

import os
import sys

BIND_DEFAULTED_ENV = "SSR_SGLANG_CPU_BIND_DEFAULTED"  # read by ssr_sglang.cpu.parallel
CPU_ENV_DEFAULTS = {"OMP_NUM_THREADS": "1", "SGLANG_CPU_OMP_THREADS_BIND": "0"}
CUDA_ONLY = ("flashinfer",)  # imported by SGLang under try/except ImportError or behind find_spec


def cpu_engine_requested() -> bool:
    return os.environ.get("SGLANG_USE_CPU_ENGINE", "0") == "1"


def apply_cpu_env_defaults() -> None:
    if "SGLANG_CPU_OMP_THREADS_BIND" not in os.environ:
        os.environ[BIND_DEFAULTED_ENV] = "1"  # ours, so ssr_sglang.cpu.parallel may widen it
    for key, value in CPU_ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)


class _SglKernelFinder:
    """Meta-path finder that falls back to the stand-ins when the real ``sgl_kernel`` fails."""

    _decided = False
    _use_shim = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "sgl_kernel" and not fullname.startswith("sgl_kernel."):
            return None
        if not self._decide():
            return None
        from ssr_sglang.cpu import sgl_kernel_shim

        return sgl_kernel_shim.find_spec(fullname)

    @classmethod
    def _decide(cls) -> bool:
        if not cls._decided:
            cls._decided = True
            cls._use_shim = not _real_sgl_kernel_loads()
        return cls._use_shim


def _real_sgl_kernel_loads() -> bool:
    """Try the real package with this finder out of the way; undo a failed partial import."""
    import importlib

    finders = [f for f in sys.meta_path if isinstance(f, _SglKernelFinder)]
    for f in finders:
        sys.meta_path.remove(f)
    try:
        importlib.import_module("sgl_kernel")
        return True
    except Exception:  # ImportError, OSError (libcuda.so.1), ...
        for name in [m for m in sys.modules if m == "sgl_kernel" or m.startswith("sgl_kernel.")]:
            del sys.modules[name]
        return False
    finally:
        sys.meta_path[:0] = finders


def hide_cuda_only_packages() -> None:
    """``None`` in ``sys.modules`` is Python's own marker for a module that must not be imported."""
    for name in CUDA_ONLY:
        if name not in sys.modules:
            sys.modules[name] = None


def install() -> None:
    if not cpu_engine_requested():
        return
    apply_cpu_env_defaults()
    hide_cuda_only_packages()
    from ssr_sglang import settings  # here, not at the top: this module runs at every interpreter start

    if not settings.get("SSR_SGLANG_CPU_SHIM"):
        return
    if not any(isinstance(f, _SglKernelFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SglKernelFinder())


def shim_active() -> bool:
    """True when ``sgl_kernel`` in this process is (or will be) the stand-in module."""
    mod = sys.modules.get("sgl_kernel")
    if mod is not None:
        return bool(getattr(mod, "__ssr_stand_in__", False))
    return cpu_engine_requested() and any(
        isinstance(f, _SglKernelFinder) and f._decide() for f in sys.meta_path
    )


install()
