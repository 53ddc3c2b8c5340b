#!/usr/bin/env bash
# On the lent GPU machine: unpack .gpu_bundle (benchmarks/gpu/bundle.py), check the toolchain, run
# benchmarks/gpu/sglang_check.py, keep SGLang's compiled JIT kernels. Everything lands in $OUT:
# log.txt, results.json, stack.json, server_logs.tgz, jit_cache.tgz.
#   usage (repository root): bash benchmarks/gpu/run_check.sh [sglang_check.py options]
set -u
OUT=${OUT:-$PWD/gpu_results}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
B=${SSR_GPU_BUNDLE:-.gpu_bundle}
SITE=${SSR_GPU_SITE:-/tmp/ssr-site}
T0=$(date +%s)
PYBIN=$(python3 -c 'import os, sys; print(os.path.dirname(sys.executable))')
export PATH="$PYBIN:$PATH"
[ -n "${CUDA_HOME:-}" ] || export CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")

echo "== toolchain"
for c in "c++ --version" "ninja --version" "nvcc --version" "cmake --version"; do
  echo "\$ $c"; $c 2>&1 | head -4 || echo "MISSING: $c"
done
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1
python3 -c 'import torch, triton, transformers, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, "transformers", transformers.__version__, torch.cuda.is_available() and torch.cuda.get_device_name(0))'

echo "== install bundle into $SITE"
[ -f "$B/manifest.json" ] || { echo "no $B/manifest.json: build it with python -m benchmarks.gpu.bundle"; exit 2; }
rm -rf "$SITE"; mkdir -p "$SITE"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$B"/wheels/*.whl || exit 3
tar -xJf "$B/sglang.tar.xz" -C "$SITE" || exit 3
ROUTE=stub
if [ -f "$B/sgl_kernel.tar.xz" ]; then tar -xJf "$B/sgl_kernel.tar.xz" -C "$SITE" && ROUTE=sglang-kernel; fi
DI="$SITE/ssr_sglang-0.1.0.dist-info"; mkdir -p "$DI"
printf 'Metadata-Version: 2.1\nName: ssr-sglang\nVersion: 0.1.0\n' > "$DI/METADATA"
printf '[sglang.srt.plugins]\nssr = ssr_sglang.srt.plugin:register\n' > "$DI/entry_points.txt"
export PYTHONPATH="$SITE:$PWD" SGLANG_USE_CPU_ENGINE=0 SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1 \
  SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python SGLANG_JIT_CACHE_DIR=/tmp/sglang-jit PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=/tmp/triton-cache
# compiled kernels of an earlier run (its jit_cache.tgz / triton_cache.tgz copied into the bundle) save minutes
if [ -f "$B/jit_cache.tgz" ]; then mkdir -p /tmp/sglang-jit && tar -xzf "$B/jit_cache.tgz" -C /tmp/sglang-jit; fi
if [ -f "$B/triton_cache.tgz" ]; then mkdir -p /tmp/triton-cache && tar -xzf "$B/triton_cache.tgz" -C /tmp/triton-cache; fi
if [ "$ROUTE" = sglang-kernel ] && ! python3 -c 'import sgl_kernel' 2>"$OUT/sgl_kernel_import.txt"; then
  echo "sglang-kernel does not import here (see sgl_kernel_import.txt); falling back to the stub + torch ops"
  tail -5 "$OUT/sgl_kernel_import.txt"; rm -rf "$SITE/sgl_kernel"; ROUTE=stub
fi
if [ "$ROUTE" = stub ]; then
  cp -r benchmarks/gpu/sgl_kernel_stub/sgl_kernel "$SITE/"
  export SGLANG_FORCE_FUSED_OP_BACKEND=torch
fi
# Without flashinfer SGLang cannot verify sampled requests on CUDA, and SSR refuses to start unless told to
# serve greedy requests only (sampled ones then get HTTP 400; sglang_check.py records that).
python3 -c 'import flashinfer' 2>/dev/null || export SSR_GREEDY_ONLY=1
python3 - "$OUT/stack.json" "$ROUTE" <<'PY'
import json, os, sys, torch, triton, transformers, platform
json.dump({"route": sys.argv[2], "python": platform.python_version(), "torch": torch.__version__,
           "cuda": torch.version.cuda, "triton": triton.__version__, "transformers": transformers.__version__,
           "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "sglang": "0.5.23 (trimmed wheel)",
           "sgl_kernel": "sglang-kernel 0.4.5 sm90" if sys.argv[2] == "sglang-kernel" else "stub (torch ops)",
           "attention_backend": "triton", "sampling_backend": "pytorch",
           "ssr_greedy_only": os.environ.get("SSR_GREEDY_ONLY") == "1"}, open(sys.argv[1], "w"), indent=1)
PY
cat "$OUT/stack.json"
echo "== set up in $(( $(date +%s) - T0 ))s; import check"
timeout 120 python3 -c 'import sglang.launch_server, sglang.srt.managers.scheduler, sglang.srt.speculative.ngram_worker, ssr_sglang.srt.plugin, ssr_sglang.srt.worker; print("imports ok")' || echo "IMPORT CHECK FAILED"

echo "== check"
export SSR_GPU_STACK_FILE="$OUT/stack.json"
timeout ${SSR_GPU_CHECK_TIMEOUT:-500} python3 benchmarks/gpu/sglang_check.py --out "$OUT" "$@"
echo "check exit $?"
pkill -f sglang.launch_server 2>/dev/null
tar -czf "$OUT/jit_cache.tgz" -C /tmp/sglang-jit . 2>/dev/null && ls -la "$OUT/jit_cache.tgz"
tar -czf "$OUT/triton_cache.tgz" -C /tmp/triton-cache . 2>/dev/null && ls -la "$OUT/triton_cache.tgz"
[ -d "$OUT/logs" ] && tar -czf "$OUT/server_logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
echo "== done in $(( $(date +%s) - T0 ))s"
