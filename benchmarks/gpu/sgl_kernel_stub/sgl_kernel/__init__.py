"""A stand-in for ``sgl_kernel`` when no build of it loads on the GPU machine's torch (route B).

Every ``sgl_kernel`` name and submodule imports, and calling any op raises naming it, so a server path
that needs one fails loudly instead of computing something else. SGLang's fused layers are sent to their
torch implementations by ``SGLANG_FORCE_FUSED_OP_BACKEND=torch``, which ``run_check.sh`` sets with it.
"""

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+stub"


class _Missing:
    """An op (or a namespace of constants) that this stack lacks: attributes chain, calls raise."""

    def __init__(self, qualname):
        self._qualname = qualname
        self.__name__ = qualname.rsplit(".", 1)[-1]

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Missing(f"{self._qualname}.{name}")

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(f"sgl_kernel stub: {self._qualname} is not available on this stack")


def _missing(qualname):
    return _Missing(qualname)


class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name in ("is_arch_support_pdl", "is_hopper_arch"):
            return lambda *a, **k: False
        return _missing(f"{self.__name__}.{name}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.startswith("sgl_kernel."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _Module(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Finder())
sys.modules[__name__].__class__ = _Module
