"""CPU support for running SGLang (and SSR) without a GPU: see :mod:`ssr_sglang.cpu.bootstrap`."""
