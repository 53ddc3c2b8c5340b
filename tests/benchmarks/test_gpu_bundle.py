"""The GPU bundle (``benchmarks/gpu/bundle.py``): what it keeps, the stub ``sgl_kernel``, and (opt-in) the
whole bundle installed offline into an environment holding only the GPU machine's packages.

The opt-in test (``SSR_TEST_GPU_BUNDLE=1``; it downloads torch 2.11 with its CUDA libraries, several GB)
needs a Python 3.12 interpreter (``SSR_TEST_PY312``, default ``python3.12``): it builds the bundle, creates
a fresh virtual environment with the GPU machine's torch/triton/transformers versions, installs the bundle
there with ``--no-index``, imports SGLang's whole server path and the plugin with CUDA faked on, as
``benchmarks/gpu/run_check.sh`` lays it out on the device, and serves one request from an SSR server started
from that install on this machine's CPU engine. Last run here 2026-12-04 (Python 3.12.1, torch 2.11.0).
"""

from __future__ import annotations

import doctest
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "benchmarks" / "gpu"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bundle_selection_doctests():
    bundle = _load("ssr_gpu_bundle", GPU / "bundle.py")
    assert doctest.testmod(bundle).failed == 0
    assert bundle.keep_sglang("sglang/kernels/jit/include/sgl_kernel/utils.cuh")  # JIT sources travel
    assert not bundle.keep_sglang("sglang/srt/rust_extensions/_server.py")
    assert len({w.split("==")[0].lower().replace("_", "-") for w in bundle.WHEELS}) == len(bundle.WHEELS)


def test_stub_sgl_kernel_imports_anything_and_refuses_calls(tmp_path):
    code = (
        "import sgl_kernel\n"
        "from sgl_kernel import rmsnorm\n"
        "from sgl_kernel.scalar_type import scalar_types\n"
        "from sgl_kernel.utils import is_arch_support_pdl\n"
        "assert is_arch_support_pdl() is False\n"
        "t = scalar_types.uint4b8\n"
        "try:\n"
        "    rmsnorm(1)\n"
        "except NotImplementedError as e:\n"
        "    assert 'sgl_kernel.rmsnorm' in str(e), e\n"
        "else:\n"
        "    raise AssertionError('a stub op ran')\n"
        "print('ok')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(GPU / "sgl_kernel_stub")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_check_script_compares_against_plain():
    check = _load("ssr_gpu_check", GPU / "sglang_check.py")
    names = [c[0] for c in check.exactness_configs()]
    assert names[0] == "dense-plain-ov" and "hybrid-plain-ov" in names
    assert {"dense-ssrfixed-ov", "dense-ssrfixed-noov", "hybrid-ssrfixed-ov", "hybrid-ssrfixed-noov"} <= set(names)
    same, other = [[1, 2, 3]] * 8, [[1, 2, 4]] * 8
    runs = {"dense-plain-ov": {"b1": same, "conc": same * 2, "b1_meta": [{}] * 8, "conc_meta": [{}] * 16,
                               "b1_s": 1.0, "conc_s": 1.0, "idle_load": {"num_used_tokens": 0}},
            "dense-ngram-ov": {"b1": other, "conc": same * 2, "b1_meta": [{"spec_verify_ct": 1}] * 8,
                               "conc_meta": [{}] * 16, "b1_s": 1.0, "conc_s": 1.0,
                               "idle_load": {"num_used_tokens": 0}},
            "hybrid-ngram-ov": {"error": "start failed: x"}}
    table = check.compare(runs)
    assert table["dense-ngram-ov"]["b1_identical"] == 0 and table["dense-ngram-ov"]["conc_identical"] == 16
    assert table["dense-ngram-ov"]["b1_tokens_per_step"] == 3.0
    assert "error" in table["hybrid-ngram-ov"]


H200_PACKAGES = ["torch==2.11.0", "triton==3.6.0", "transformers==5.17.0", "torchvision==0.26.0",
                 "torchaudio==2.11.0", "numpy", "requests", "aiohttp", "uvloop", "psutil", "prometheus-client",
                 "msgpack", "pillow", "einops", "tqdm", "huggingface-hub", "safetensors", "tokenizers",
                 "sentencepiece", "tiktoken", "pyyaml", "regex", "packaging", "filelock", "jinja2", "anyio",
                 "httpx", "h11", "click", "ninja", "cloudpickle", "nvidia-ml-py", "scipy"]

FAKE_CUDA_IMPORTS = """
import importlib, sys, torch
torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 1
torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
torch.cuda.get_device_name = lambda *a, **k: "NVIDIA H200"
for t in ["sglang.launch_server", "sglang.srt.entrypoints.http_server", "sglang.srt.managers.scheduler",
          "sglang.srt.managers.tokenizer_manager", "sglang.srt.managers.detokenizer_manager",
          "sglang.srt.model_executor.model_runner", "sglang.srt.models.qwen3", "sglang.srt.models.qwen3_5",
          "sglang.srt.layers.attention.triton_backend", "sglang.srt.speculative.ngram_worker",
          "sglang.srt.layers.sampler", "ssr_sglang.srt.plugin", "ssr_sglang.srt.worker",
          "ssr_sglang.srt.draft_manager", "ssr_sglang.srt.hooks"]:
    importlib.import_module(t)
from importlib.metadata import entry_points
assert [e.value for e in entry_points(group="sglang.srt.plugins")] == ["ssr_sglang.srt.plugin:register"]
print("server path imports:", len(sys.modules), "modules")
"""


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("SSR_TEST_GPU_BUNDLE") != "1",
                    reason="opt-in (SSR_TEST_GPU_BUNDLE=1): downloads torch 2.11 with CUDA libraries")
def test_bundle_installs_offline_and_imports_the_server_path(tmp_path):
    py312 = shutil.which(os.environ.get("SSR_TEST_PY312", "python3.12"))
    if py312 is None:
        pytest.skip("no Python 3.12 interpreter (set SSR_TEST_PY312)")
    subprocess.run([sys.executable, "-m", "benchmarks.gpu.bundle", "--out", str(tmp_path / "bundle")],
                   cwd=ROOT, check=True, timeout=1800)
    env_dir = tmp_path / "h200"
    subprocess.run([py312, "-m", "venv", str(env_dir)], check=True)
    pip = [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run(pip + H200_PACKAGES, check=True, timeout=3600)
    site = tmp_path / "site"
    wheels = sorted(str(p) for p in (tmp_path / "bundle" / "wheels").glob("*.whl"))
    subprocess.run(pip + ["--no-index", "--no-deps", "--target", str(site)] + wheels, check=True, timeout=600)
    subprocess.run(["tar", "-xJf", str(tmp_path / "bundle" / "sglang.tar.xz"), "-C", str(site)], check=True)
    shutil.copytree(GPU / "sgl_kernel_stub" / "sgl_kernel", site / "sgl_kernel")  # no CUDA here to load the real one
    dist = site / "ssr_sglang-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ssr-sglang\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[sglang.srt.plugins]\nssr = ssr_sglang.srt.plugin:register\n")
    env = {**os.environ, "PYTHONPATH": f"{site}:{ROOT}", "SGLANG_USE_CPU_ENGINE": "0",
           "SGLANG_FORCE_FUSED_OP_BACKEND": "torch", "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND": "python"}
    out = subprocess.run([str(env_dir / "bin" / "python"), "-c", FAKE_CUDA_IMPORTS], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "server path imports" in out.stdout
    _serve_ssr_on_cpu(env_dir, site, tmp_path)


def _serve_ssr_on_cpu(env_dir: Path, site: Path, tmp_path: Path) -> None:
    """An SSR server on this machine's CPU engine from the same install (the bundle's CUDA ``sgl_kernel``
    left out: the plugin's CPU stand-ins serve, loaded by a ``sitecustomize`` since a ``--target`` install
    runs no ``.pth``), answering one task of the bundled model."""
    import requests

    from ssr_sglang.models import tasks
    from ssr_sglang.testing.server import free_port

    shutil.rmtree(site / "sgl_kernel")
    (site / "sitecustomize.py").write_text("import ssr_sglang.cpu.bootstrap\n")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": f"{site}:{ROOT}", "SGLANG_USE_CPU_ENGINE": "1", "OMP_NUM_THREADS": "1",
           "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND": "python"}
    args = [str(env_dir / "bin" / "python"), "-m", "sglang.launch_server", "--model-path",
            str(ROOT / "ssr_sglang" / "models" / "tiny-reasoner"), "--device", "cpu", "--dtype", "bfloat16",
            "--max-total-tokens", "8192", "--mem-fraction-static", "0.8", "--sleep-on-idle",
            "--skip-server-warmup", "--speculative-algorithm", "SSR", "--port", str(port)]
    with open(tmp_path / "server.log", "w") as log:
        proc = subprocess.Popen(args, env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            assert proc.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            try:
                if requests.get(url + "/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            import time

            time.sleep(1)
        import random

        prompt = tasks.format_chat(str(tasks.make_example(random.Random(5))["prompt"]))
        out = requests.post(url + "/generate", json={"text": prompt, "sampling_params": {
            "max_new_tokens": 300, "temperature": 0}}, timeout=600).json()
        assert out["meta_info"]["ssr"]["answer_tokens"] > 0 and "```" in out["text"], out
    finally:
        import signal

        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
