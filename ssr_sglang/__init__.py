"""ssr-sglang: SSR (Self-Speculation for Reasoning models) for SGLang.

Kept import-light on purpose: ``ssr_sglang_cpu.pth`` imports a submodule at every interpreter start.
"""

__version__ = "0.1.0"
