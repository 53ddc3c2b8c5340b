"""The interpreter-start hook: stand-in ``sgl_kernel`` only on SGLang's CPU engine, CPU env defaults."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = """
import json, os, sys
import sgl_kernel
info = {"stand_in": getattr(sgl_kernel, "__ssr_stand_in__", False), "omp": os.environ.get("OMP_NUM_THREADS"),
        "bind": os.environ.get("SGLANG_CPU_OMP_THREADS_BIND")}
try:
    sgl_kernel.no_such_op_xyz(1)
except NotImplementedError as e:
    info["missing"] = str(e)
import torch
info["torch_op"] = hasattr(torch.ops.sgl_kernel, "extend_attention_cpu")
info["amx_marker"] = hasattr(torch.ops.sgl_kernel, "convert_weight_packed")
try:
    import sgl_kernel.no_such_submodule
except ImportError:
    info["submodule"] = "ImportError"
import importlib.util
info["flashinfer_spec"] = importlib.util.find_spec("flashinfer") is not None
try:
    import flashinfer
    info["flashinfer"] = "imported"
except ModuleNotFoundError:
    info["flashinfer"] = "ModuleNotFoundError"
print("INFO", json.dumps(info))
"""


def probe(env_updates: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("SGLANG_USE_CPU_ENGINE", "OMP_NUM_THREADS",
                                                             "SGLANG_CPU_OMP_THREADS_BIND")}
    env.update(env_updates)
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    line = [l for l in proc.stdout.splitlines() if l.startswith("INFO ")]
    assert line, proc.stderr[-3000:]
    return json.loads(line[0][5:])


def test_cpu_engine_gets_stand_ins_and_defaults():
    info = probe({"SGLANG_USE_CPU_ENGINE": "1"})
    assert info["stand_in"] is True
    assert info["omp"] == "1" and info["bind"] == "0"
    assert "no_such_op_xyz" in info["missing"] and "not available on CPU" in info["missing"]
    assert info["torch_op"] is True
    assert info["amx_marker"] is False  # would route every layer through AMX-only kernels
    assert info["submodule"] == "ImportError"  # SGLang's ImportError fallbacks keep working
    assert info["flashinfer"] == "ModuleNotFoundError" and info["flashinfer_spec"] is False  # CUDA-only, hidden


def test_user_settings_win():
    info = probe({"SGLANG_USE_CPU_ENGINE": "1", "OMP_NUM_THREADS": "2"})
    assert info["omp"] == "2"


def test_inactive_without_cpu_engine():
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_USE_CPU_ENGINE"}
    code = "import sys, ssr_sglang.cpu.bootstrap as b; print(any(type(f).__name__ == '_SglKernelFinder' for f in sys.meta_path))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_nothing_is_imported_at_start_without_cpu_engine():
    """The ``.pth`` line checks the variable itself: without ``SGLANG_USE_CPU_ENGINE=1`` no module of the
    package is imported at interpreter start (with it, the bootstrap is)."""
    base = {k: v for k, v in os.environ.items() if k != "SGLANG_USE_CPU_ENGINE"}
    code = "import sys; print(sorted(m for m in sys.modules if m.startswith('ssr_sglang')))"
    for env, want in ((base, "[]"), ({**base, "SGLANG_USE_CPU_ENGINE": "1"}, "ssr_sglang.cpu.bootstrap")):
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        assert want in out.stdout, (out.stdout, out.stderr)
