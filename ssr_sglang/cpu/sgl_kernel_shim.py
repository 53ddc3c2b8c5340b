"""The module served as ``sgl_kernel`` (and any ``sgl_kernel.<sub>``) on SGLang's CPU engine.

Known ops come from :mod:`ssr_sglang.cpu.ops`, :mod:`ssr_sglang.cpu.gdn_ops` (hybrid Gated DeltaNet
models) and :mod:`ssr_sglang.cpu.sampling_ops` (pure torch; the latter: ``tree_speculative_sampling_target_only``,
``top_k_renorm_prob``, ``top_p_renorm_prob``).
Any other name resolves lazily to a callable that raises ``NotImplementedError`` naming the op when it
is called, so SGLang modules that merely import an op they never use on CPU still load, and a model
or feature that does need a missing op fails with a message that says which one.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import types


# Submodules SGLang imports without an ImportError fallback on the CPU serving path.
KNOWN_SUBMODULES = {"speculative"}


class MissingCpuOp:
    """Placeholder for an ``sgl_kernel`` op that has no CPU stand-in."""

    def __init__(self, qualname: str):
        self.qualname = qualname
        self.__name__ = qualname.rsplit(".", 1)[-1]

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(
            f"{self.qualname} is not available on CPU: ssr-sglang's pure-torch sgl_kernel stand-ins "
            "do not implement it (no CPU build of sgl-kernel is installed). Use a model/feature that "
            "does not need it, or install a CPU build of sgl-kernel."
        )

    def __repr__(self) -> str:
        return f"<missing CPU op {self.qualname}>"


def _module_getattr(modname: str):
    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return MissingCpuOp(f"{modname}.{name}")

    return __getattr__


class _ShimLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return types.ModuleType(spec.name)

    def exec_module(self, module):
        from ssr_sglang.cpu import gdn_ops, ops, sampling_ops

        module.__path__ = []  # a package, so ``import sgl_kernel.<sub>`` goes through the finder too
        module.__ssr_stand_in__ = True
        module.__getattr__ = _module_getattr(module.__name__)
        if module.__name__ == "sgl_kernel":
            module.__version__ = "0.0.0+ssr-cpu-stand-in"
            ops.register_torch_ops()
            gdn_ops.register_torch_ops()
        for name, fn in {**ops.PYTHON_OPS, **sampling_ops.PYTHON_OPS, **gdn_ops.PYTHON_OPS}.items():
            setattr(module, name, fn)


def find_spec(fullname: str):
    """Serve ``sgl_kernel`` itself and the submodules the stand-ins define; others stay missing.

    Unknown submodules raise ``ModuleNotFoundError`` as usual, because SGLang guards several
    of them with ``try: from sgl_kernel.x import ... except ImportError`` and a pure-Python
    fallback (``sgl_kernel.scalar_type``, for one).
    """
    from ssr_sglang.cpu import gdn_ops, ops

    known = KNOWN_SUBMODULES | set(getattr(ops, "SUBMODULES", ())) | gdn_ops.SUBMODULES
    if fullname != "sgl_kernel" and fullname.split(".", 1)[1] not in known:
        return None
    return importlib.machinery.ModuleSpec(fullname, _ShimLoader(), is_package=True)
